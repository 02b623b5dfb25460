"""A plan: the actions `install` or `uninstall` takes, in order, and what
both service managers' plans say besides (a daemon not the service's, the
trash left without the daemon)."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass

from agentkeep.paths import Env
from agentkeep.service.state import State, answering_daemon


@dataclass(frozen=True)
class Action:
    """One step of a plan. `kind` is write, mkdir, run, remove, note or warn;
    for run, `what` is the command line (shell-quoted), for the others a path
    or the text to say; `content` is what a write writes."""

    kind: str
    what: str
    content: str | None = None

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.what)


def run_action(*argv: str) -> Action:
    return Action("run", shlex.join(argv))


@dataclass(frozen=True)
class Plan:
    """What `install` or `uninstall` does, in order. An install stops at the
    first failure and then carries out the actions `undo` gives (what a
    fresh install did, taken back; asked for only then, so they fit the
    state the failure left); an uninstall (`keep_going`) tries every step,
    so one that fails does not leave the files behind."""

    verb: str
    actions: list[Action]
    keep_going: bool = False
    undo: Callable[[], list[Action]] | None = None


def foreign_daemon(env: Env, state: State) -> int | None:
    """The pid of a daemon that answers on the socket but is not the service's."""
    pid = answering_daemon(env)
    return pid if pid is not None and pid != state.pid else None


def foreign_warning(env: Env, pid: int, start: str) -> Action:
    return Action(
        "warn",
        f"a daemon not run by the service (pid {pid}) already answers on {env.socket_path}, "
        f"and the service's own cannot start while it runs: the service is installed but not "
        f"started. Stop pid {pid}, then: {start}",
    )


def trash_note(env: Env) -> list[Action]:
    """Without the daemon nothing expires the trash: say what is left in it."""
    from agentkeep import render
    from agentkeep.trash.entries import list_entries, trash_dir

    entries = list_entries(env.state_dir)
    if not entries:
        return []
    total = sum(e.bytes for e in entries)
    count = f"{len(entries)} pruned session{'s' * (len(entries) > 1)}"
    return [
        Action(
            "note",
            f"the trash ({trash_dir(env.state_dir)}) still holds {count} "
            f"({render.size(total)}), which nothing expires without the daemon: "
            "`agentkeep restore AGENT ID` puts one back; "
            "`deploy/install.sh --uninstall --purge` removes them with agentkeep's state",
        )
    ]
