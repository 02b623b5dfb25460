"""Conformance against the real GitHub Copilot CLI (pins.py), driven offline
against the mock model: what it writes is what agentkeep finds, prunes and
purges, and Copilot itself agrees afterwards.

One fake user, one workspace, and these sessions:

- P: plain; F: P forked with `/fork` in the TUI, with a message of its own;
- T: tool use (a file written, the `sql` tool's `session.db`, a big output
  saved to $TMPDIR, which Copilot deletes when it exits);
- S: a `task` subagent (its events are S's own);
- R: plain, then `--resume=<R>`;
- X: `--session-id=<uuid>`;
- C: killed after a big tool output: a stale `inuse.<pid>` pair, and the
  output left in $TMPDIR, named by nothing but the pid in its name;
- D: removed by Copilot's own `/session delete`, which leaves its rows and
  operation lock: a session to agentkeep, none to Copilot;
- L: live, a TUI left open through the prune.

Known shared files, never a session's: the process logs, the sidebar, the
open sessions, the command history and the config. They name sessions, are
never changed by a prune, and are reported as residual where they name a
removed one.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import groundtruth
import pytest
from drive_copilot import Copilot, Tui, age, say

from conftest import agent_driver, agentkeep
from fakehome import FakeHome

DAY = 86400.0
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
SHARED_FILES = ("open-sessions-state.json", "command-history-state.json", "config.json")
NAMES = {
    "P": "plain one",
    "T": "tool use",
    "S": "delegate this",
    "R": "resumed one",
    "X": "chosen id",
    "C": "crash now",
    "D": "deleted one",
    "L": "live one",
}


@dataclass
class Driven:
    home: FakeHome
    copilot: Copilot
    alpha: Path
    ids: dict[str, str]
    live: Tui

    def naming(self) -> dict[str, groundtruth.Naming]:
        return groundtruth.naming([self.copilot.root, self.copilot.tmp], self.ids.values())

    def shared(self, path: str) -> bool:
        root = self.copilot.root
        rel = Path(path).relative_to(root) if Path(path).is_relative_to(root) else None
        if rel is None:
            return False
        return rel.parts[0] in ("logs", "sidebar-sessions-state") or str(rel) in SHARED_FILES

    def cli(self, *args: str) -> Any:
        return agentkeep(self.home, *args)


@pytest.fixture(scope="module")
def driven(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driven]:
    c = agent_driver(Copilot, tmp_path_factory.mktemp("copilot"))
    home = c.home
    alpha = c.workspace("work", "alpha")
    ids: dict[str, str] = {}
    ids["P"] = c.plain(alpha, NAMES["P"])
    ids["T"] = c.tools(alpha, NAMES["T"])
    ids["S"] = c.subagent(alpha, NAMES["S"])
    ids["R"] = c.plain(alpha, NAMES["R"])
    assert c.resume(alpha, ids["R"]) == ids["R"]
    ids["X"] = c.chosen(alpha, NAMES["X"])
    ids["C"] = c.crash(alpha, NAMES["C"])
    ids["D"] = c.plain(alpha, NAMES["D"])
    before = set(c.ids())
    tui = c.tui(alpha, f"--resume={ids['P']}", rules=say("in the fork", "Forked."))
    try:
        tui.type("/fork")
        tui.wait("Forked from")
        tui.type("in the fork")
        tui.wait("Forked.")
        tui.type(f"/session delete {ids['D']} --yes")
        tui.wait("Deleted session")
        tui.exit()
    finally:
        tui.kill()
    (ids["F"],) = set(c.ids()) - before - {ids["D"]}
    before = set(c.ids())
    live = c.tui(alpha, rules=say(NAMES["L"], "Live."))
    try:
        live.type(NAMES["L"])
        live.wait("Live.")
        (ids["L"],) = set(c.ids()) - before
        check_setup(c, ids)
        yield Driven(home, c, alpha, ids, live)
    finally:
        live.kill()
        runtime = Path(home.environ["XDG_RUNTIME_DIR"])
        shutil.rmtree(runtime, ignore_errors=True)


def check_setup(c: Copilot, ids: dict[str, str]) -> None:
    assert len(set(ids.values())) == len(ids), "SETUP INVALID: sessions were not made"
    crashed = c.state / ids["C"]
    assert list(crashed.glob("inuse.*.lock")), "SETUP INVALID: the crash left no inuse lock"
    assert outputs(c), "SETUP INVALID: the crash left no tool output"
    assert list((c.state / ids["L"]).glob("inuse.*.hold")), "SETUP INVALID: L is not open"
    assert not (c.state / ids["D"]).exists(), "SETUP INVALID: Copilot did not delete D"
    assert (c.state / ".session-operation-locks" / f"{ids['D']}.lock").exists()
    assert (c.state / ids["T"] / "session.db").exists(), "SETUP INVALID: no sql tool"


def outputs(c: Copilot) -> list[Path]:
    return sorted(c.tmp.glob("*-copilot-tool-output-*.txt"))


def _covered(path: str, artifacts: set[str]) -> bool:
    if path.endswith("#search_index_content"):  # the FTS5 table's own content
        path = path.removesuffix("_content")
    return groundtruth.covered(path, artifacts)


def test_every_session_and_every_artifact_is_found(driven: Driven) -> None:
    d = driven
    listed = {s["id"]: s for s in d.cli("ls", "--agent", "copilot")}
    assert set(listed) == set(d.ids.values())
    for name, sid in d.ids.items():
        assert listed[sid]["workspace"] == str(d.alpha), name
        assert listed[sid]["parent"] == (d.ids["P"] if name == "F" else None), name
        assert listed[sid]["state"] == ("live" if name == "L" else "idle"), name
    shown = {name: d.cli("show", "copilot", sid) for name, sid in d.ids.items()}
    artifacts = {name: {a["path"] for a in s["artifacts"]} for name, s in shown.items()}
    # A fork's events are a copy naming its parent, and the parent's name the fork.
    kin = {"P": artifacts["F"], "F": artifacts["P"]}
    truth = d.naming()
    found, expected = 0, 0
    for name, sid in d.ids.items():
        everything = {p for p in truth[sid].everything() if not d.shared(p)}
        missing = {
            p
            for p in everything
            if not _covered(p, artifacts[name]) and not _covered(p, kin.get(name, set()))
        }
        assert not missing, (name, missing)
        expected += len(everything)
        found += len(everything) - len(missing)
    # The crash's tool output names no session: the pid in its name is the link.
    assert {str(p) for p in outputs(d.copilot)} <= artifacts["C"]
    assert {a["kind"] for a in shown["C"]["artifacts"]} >= {"inuse-lock", "tool-output"}
    assert shown["C"]["holders"] == []
    assert {a["kind"] for a in shown["D"]["artifacts"]} == {"row", "operation-lock"}
    print(f"\ncopilot: sessions {len(listed)}/{len(d.ids)}, ground truth {found}/{expected}")


def test_prune_and_purge_leave_nothing_and_copilot_agrees(driven: Driven) -> None:
    d, c = driven, driven.copilot
    gone, kept = ["S", "R", "C", "D"], ["X", "F", "P", "L"]
    for name in [*gone, "P", "L"]:
        age(c, d.ids[name], 60 * DAY, extra=outputs(c) if name == "C" else [])
    live_pid = next((c.state / d.ids["L"]).glob("inuse.*.lock")).name.split(".")[1]
    quiet = [p for p in (c.root / "logs").glob("*.log") if not p.name.endswith(f"-{live_pid}.log")]
    quiet += [c.root / "config.json", c.root / "command-history-state.json"]
    before = groundtruth.digests(quiet)
    kept_before = {n: d.cli("show", "copilot", d.ids[n]) for n in kept}

    # While L's Copilot runs, it has session-store.db open: the files go, the
    # rows stay (reported) for the next prune.
    report = d.cli("prune", "--older-than", "30d")
    assert {r["id"] for r in report["removed"]} == {d.ids[n] for n in gone}, report
    assert report["failed"] == [], report
    assert {(k["id"], k["reason"]) for k in report["kept"]} == {
        (d.ids["P"], "ancestor"),
        (d.ids["L"], "live"),
    }
    assert groundtruth.digests(quiet) == before, "shared files are never changed"
    d.live.exit()
    purged = d.cli("purge", "copilot", d.ids["T"])
    assert [r["id"] for r in purged["removed"]] == [d.ids["T"]], purged
    again = d.cli("prune", "--older-than", "30d")
    assert {r["id"] for r in again["removed"]} == {d.ids[n] for n in gone}, again
    assert again["failed"] == [], again
    residual = {r["path"] for rep in (report, purged, again) for r in rep["residual"]}

    after = d.naming()
    leftovers = {name: after[d.ids[name]].everything() - residual for name in [*gone, "T"]}
    assert all(not left for left in leftovers.values()), leftovers
    assert outputs(c) == [], "the crash's tool output went with it"
    for name, shown in kept_before.items():
        for artifact in shown["artifacts"]:
            if not artifact["kind"].startswith("inuse"):  # Copilot's own, gone at its exit
                assert os.path.lexists(artifact["path"].partition("#")[0]), (name, artifact)
    print(f"\ncopilot: leftovers outside residual 0, residual {len(residual)}")

    # Copilot itself: lists and resumes what stays, refuses what went.
    listed = sessions_tab(c, d.alpha, [NAMES.get(name, NAMES["P"]) for name in kept])
    for name in [*gone, "T"]:
        assert NAMES[name] not in listed, name
        assert not c.resumes(d.alpha, d.ids[name]), name
    for name in kept:
        assert c.resumes(d.alpha, d.ids[name]), name
    print("copilot: after the prune it lists and resumes X, F, P and L, refuses S, R, C, D, T")

    # A pruned session restored from the trash is Copilot's to resume again.
    restored = d.cli("restore", "copilot", d.ids["S"])
    assert [r["id"] for r in restored["restored"]] == [d.ids["S"]], restored
    assert c.resumes(d.alpha, d.ids["S"])


def sessions_tab(c: Copilot, cwd: Path, names: list[str]) -> str:
    """What Copilot's own Sessions tab lists (its sessions by name), once it
    shows every one of `names` (it loads them after it opens)."""
    tui = c.tui(cwd)
    try:
        tui.type("/session")
        for name in names:
            tui.wait(name, timeout=30, setup=False)
        return tui.screen()
    finally:
        tui.kill()


def test_the_legacy_dir_and_the_links_copilot_leaves_there_count_a_session_once(
    tmp_path: Path,
) -> None:
    """An older install's `$XDG_STATE_HOME/.copilot`: 1.0.102 moves its
    sessions home and leaves links behind (only with COPILOT_HOME unset)."""
    c = agent_driver(Copilot, tmp_path)
    home = c.home
    del home.environ["COPILOT_HOME"]
    alpha = c.workspace("work", "alpha")
    old = c.plain(alpha, "an old one")
    legacy = Path(home.environ["XDG_STATE_HOME"]) / ".copilot"
    legacy.mkdir(parents=True)
    for name in ("session-state", "session-store.db", "session-store.db-wal"):
        if (c.root / name).exists():
            (c.root / name).rename(legacy / name)
    new = c.plain(alpha, "a new one")
    links = [legacy / "session-state", legacy / "session-store.db"]
    assert all(p.is_symlink() for p in links), "SETUP INVALID: Copilot left no links"

    listed = json.loads(home.cli("ls", "--agent", "copilot", "--json", check=True).stdout)
    assert sorted(s["id"] for s in listed) == sorted([old, new])
    shown = json.loads(home.cli("show", "copilot", old, "--json", check=True).stdout)
    paths = [a["path"] for a in shown["artifacts"]]
    assert len(paths) == len(set(paths)) and not any(p.startswith(str(legacy)) for p in paths)
    purged = json.loads(home.cli("purge", "copilot", old, "--json").stdout)
    assert [r["id"] for r in purged["removed"]] == [old], purged
    assert all(p.is_symlink() for p in links)
    assert not c.resumes(alpha, old) and c.resumes(alpha, new)
