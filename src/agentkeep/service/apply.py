"""A plan (the actions `install` or `uninstall` takes, in order) and
carrying it out, or in a dry run showing it, step by step; and each step in
words for a person. A real run does nothing the dry run did not print."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from agentkeep import fsio
from agentkeep.errors import Failed
from agentkeep.paths import Env, ensure_private_dir

log = structlog.get_logger("agentkeep.service")


@dataclass(frozen=True)
class Action:
    """One step of a plan. `kind` is write, mkdir, run, remove, note or warn;
    for run, `what` is the command line (shell-quoted), for the others a path
    or the text to say; `content` is what a write writes."""

    kind: str
    what: str
    content: str | None = None


def run_action(*argv: str) -> Action:
    """The action that runs `argv`."""
    return Action("run", shlex.join(argv))


@dataclass(frozen=True)
class Plan:
    """What `install` or `uninstall` does, in order. An install stops at the
    first failure, then carries out what `undo` gives (asked for only then,
    to fit the state the failure left); an uninstall (`keep_going`) tries
    every step, so one that fails does not leave the files behind."""

    actions: list[Action]
    keep_going: bool = False
    undo: Callable[[], list[Action]] | None = None


@dataclass(frozen=True)
class Step:
    """One action carried out (or, in a dry run, shown): `error` says why it
    failed; `undo` marks the steps that take back a failed install."""

    action: Action
    error: str | None = None
    undo: bool = False

    def to_json(self) -> dict[str, Any]:
        """The step in `service install|uninstall --json`."""
        return {
            "kind": self.action.kind,
            "what": self.action.what,
            "ok": self.error is None,
            "error": self.error,
            "undo": self.undo,
        }


def _write(path: Path, content: str) -> None:
    """Whole or not at all (fsio.replace). A unit or agent definition is
    read by the service manager, not secret: 0644."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fsio.replace(path, content.encode("utf-8"), 0o644)


def _execute(argv: list[str], environ: Mapping[str, str]) -> str | None:
    """Run one command of a plan; the reason it failed, or None."""
    program = shutil.which(argv[0], path=environ.get("PATH") or os.defpath)
    if program is None:
        return f"{argv[0]} not found on PATH"
    try:
        done = subprocess.run(
            [program, *argv[1:]],
            env=dict(environ),
            capture_output=True,
            text=True,
            timeout=330,  # enable --now waits for READY=1 (TimeoutStartSec=300)
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()
        return f"exited {done.returncode}" + (f": {detail}" if detail else "")
    return None


def _do(action: Action, environ: Mapping[str, str]) -> str | None:
    """Carry out one action; why it failed, or None (the caller reports it)."""
    try:
        if action.kind == "write":
            _write(Path(action.what), action.content or "")
        elif action.kind == "mkdir":
            ensure_private_dir(Path(action.what))
        elif action.kind == "run":
            failure = _execute(shlex.split(action.what), environ)
            if failure is not None:
                return failure
        elif action.kind == "remove":
            Path(action.what).unlink(missing_ok=True)
    except OSError as exc:
        return str(exc)
    log.info("service action", kind=action.kind, what=action.what)
    return None


def apply(
    plan: Plan,
    *,
    dry_run: bool,
    env: Env | None = None,
    report: Callable[[Step], None] | None = None,
) -> list[Step]:
    """Carry out a plan in order, or with `dry_run` show each step and do
    nothing; commands run with `env`'s variables (default: this process's).
    Each step goes to `report` as it is done; all of them are returned."""
    environ: Mapping[str, str] = env.environ if env is not None else os.environ
    steps: list[Step] = []

    def record(step: Step) -> None:
        steps.append(step)
        if report is not None:
            report(step)

    if dry_run:
        for action in plan.actions:
            record(Step(action))
        return steps
    failed = False
    for action in plan.actions:
        error = _do(action, environ)
        record(Step(action, error))
        failed = failed or error is not None
        if failed and not plan.keep_going:
            break
    if failed and plan.undo is not None:
        for action in plan.undo():
            record(Step(action, _do(action, environ), undo=True))
    return steps


def exit_code(steps: list[Step]) -> int:
    """0 when every step of the plan was done, 1 (Failed) otherwise."""
    return Failed.exit if any(s.error is not None for s in steps) else 0


_DONE = {"write": "wrote", "mkdir": "created directory", "remove": "removed", "run": "ran:"}
_WOULD = {"write": "would write", "mkdir": "would create directory", "remove": "would remove"}


def describe(step: Step, *, dry_run: bool) -> list[str]:
    """The step as lines for a person (a dry run's write shows the content)."""
    action = step.action
    if action.kind in ("note", "warn"):
        return [f"{'note' if action.kind == 'note' else 'warning'}: {action.what}"]
    prefix = "undoing the install: " if step.undo else ""
    if step.error is not None:
        return [f"{prefix}failed: {action.what}: {step.error}"]
    if not dry_run:
        return [f"{prefix}{_DONE[action.kind]} {action.what}"]
    if action.kind == "run":
        return [f"would run: {action.what}"]
    lines = [f"{_WOULD[action.kind]} {action.what}" + (":" if action.kind == "write" else "")]
    if action.kind == "write":
        lines += [f"    {line}" if line else "" for line in (action.content or "").splitlines()]
    return lines
