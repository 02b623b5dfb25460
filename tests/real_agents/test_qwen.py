"""Conformance against the real Qwen Code (pins.py) driven against the mock
model: what it writes is what agentkeep finds, prunes and purges, and Qwen
itself agrees afterwards.

One fake user whose `QWEN_RUNTIME_DIR` lies apart from `QWEN_HOME`, two
workspaces whose project key is the same (`w/a.b` and `w/a-b`), and these
sessions (drive_qwen.py):

- P: plain, then resumed (`--resume P`);
- T: tool use (a file write, a shell command whose output Qwen truncates
  into `<runtime>/tmp/<sha256(cwd)>/`, named only in the transcript);
- F: `--resume T --fork-session`: T's records copied, each with `forkedFrom`;
- S: a subagent (`projects/<key>/subagents/<S>/`) running a big command;
- C: plain in the other workspace, then `--continue`;
- N: `--session-id` of the caller's choosing;
- D: deleted with Qwen's own `/delete` in a terminal: what it leaves is found;
- U: in a terminal: an edit of an existing file (file history), plan mode
  (`plans/<U>.md`), the `runtime.json` sidecar;
- L: in a terminal left open through the prune: the registry keeps it live.

Shared files (never a session's, never changed by a prune): the usage
records, each project's meta.json, extract-cursor.json, logs.json and
scheduled_tasks.lock; what of them names a removed session is residual.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import groundtruth
import pytest
from drive_qwen import Qwen, QwenTui, age, edit_rules, plan_rules, say
from groundtruth import covered

from conftest import agent_binary, agent_driver, agentkeep
from fakehome import FakeHome

DAY = 86400.0
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
GONE = ("P", "S", "F", "U", "D")  # aged and pruned; T purged; C, N and L stay


@dataclass
class Driven:
    home: FakeHome
    qwen: Qwen
    dotted: Path
    dashed: Path
    ids: dict[str, str]
    live: QwenTui

    def roots(self) -> list[Path]:
        return [self.qwen.root, self.qwen.runtime]

    def naming(self) -> dict[str, groundtruth.Naming]:
        return groundtruth.naming(self.roots(), self.ids.values())

    def shared(self) -> set[str]:
        r = self.qwen.runtime
        found = [self.qwen.root / "usage_record.jsonl", *r.glob("usage/*")]
        found += [*r.glob("projects/*/meta.json"), *r.glob("projects/*/extract-cursor.json")]
        found += [*r.glob("tmp/*/logs.json"), *r.glob("tmp/*/scheduled_tasks.lock")]
        return {str(p) for p in found}

    def workspace(self, name: str) -> Path | None:
        if name == "D":
            return None  # /delete took the chat, the records with the cwd
        return self.dashed if name in ("C", "N", "U") else self.dotted

    def cli(self, *args: str) -> Any:
        return agentkeep(self.home, *args)


@pytest.fixture(scope="module")
def driven(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driven]:
    agent_binary("node")  # Qwen Code needs Node >= 22: the suite's own, on PATH
    with agent_driver(Qwen, tmp_path_factory.mktemp("qwen")) as q:
        yield _drive(q)


def _drive(q: Qwen) -> Driven:
    dotted, dashed = q.workspace("w", "a.b"), q.workspace("w", "a-b")
    (dashed / "notes.txt").write_text("before\n")
    ids: dict[str, str] = {}
    ids["P"] = q.plain(dotted, "hello P")
    assert q.resume(dotted, ids["P"]) == ids["P"]
    ids["T"] = q.tools(dotted, "write a file T")
    ids["F"] = q.session(dotted, "forked F", "--resume", ids["T"], "--fork-session")
    ids["S"] = q.subagent(dotted, "delegate S")
    ids["C"] = q.plain(dashed, "hello C")
    assert q.session(dashed, "continue C", "--continue", rules=[say("continue", "Go.")]) == ids["C"]
    ids["N"] = q.session(dashed, "named N", "--session-id", str(uuid.uuid4()))
    ids["D"] = q.plain(dashed, "doomed D")
    u = q.tui(dashed, [say("hi U", "Hello U."), *edit_rules(dashed / "notes.txt"), *plan_rules()])
    u.ask("hi U", "Hello U.")
    u.ask("edit it", "Edited.")
    u.terminal.type("/approval-mode plan")
    u.ask("make a plan", "Would you like to proceed?")
    u.terminal.keys("Enter")  # the plan's first choice: approved
    u.terminal.wait("Planned.")
    u.delete("doomed D")
    u.quit()
    ids["U"] = u.id
    live = q.tui(dotted, [say("hi L", "Hello L.")])
    live.ask("hi L", "Hello L.")
    ids["L"] = live.id
    assert len(set(ids.values())) == len(ids), "SETUP INVALID: sessions share an id"
    _check_setup(q, ids)
    return Driven(q.home, q, dotted, dashed, ids, live)


def _check_setup(q: Qwen, ids: dict[str, str]) -> None:
    """Each session wrote what it is for, else the test proves nothing."""
    runtime = q.runtime
    assert list(runtime.glob(f"projects/*/subagents/{ids['S']}/*.jsonl")), "SETUP INVALID"
    assert len(list(runtime.glob("tmp/*/*.output"))) >= 2, "SETUP INVALID: no truncated output"
    assert (q.root / "file-history" / ids["U"]).is_dir(), "SETUP INVALID: no file history"
    assert (q.root / "plans" / f"{ids['U']}.md").is_file(), "SETUP INVALID: no plan"
    assert list(runtime.glob(f"projects/*/chats/{ids['U']}.runtime.json")), "SETUP INVALID"
    assert not list(runtime.glob(f"projects/*/chats/{ids['D']}.jsonl")), "SETUP INVALID: D"
    assert (runtime / "debug" / f"{ids['D']}.txt").is_file(), "SETUP INVALID: /delete took all"
    assert ids["L"] in q.registry(), "SETUP INVALID: the open session is not registered"
    keys = {p.name for p in runtime.glob("projects/*") if p.is_dir()}
    assert len(keys) == 1, f"SETUP INVALID: the workspaces' keys differ: {keys}"


def _shown(d: Driven) -> dict[str, dict[str, Any]]:
    return {name: d.cli("show", "qwen", sid) for name, sid in d.ids.items()}


def _artifacts(shown: dict[str, object]) -> set[str]:
    return {a["path"] for a in shown["artifacts"]}  # type: ignore[attr-defined]


def _kinds(shown: dict[str, object]) -> set[str]:
    return {a["kind"] for a in shown["artifacts"]}  # type: ignore[attr-defined]


def test_every_session_and_every_artifact_is_found(driven: Driven) -> None:
    d = driven
    listed = {s["id"]: s for s in d.cli("ls", "--agent", "qwen")}
    assert set(listed) == set(d.ids.values())
    for name, sid in d.ids.items():
        want = d.workspace(name)
        assert listed[sid]["workspace"] == (str(want) if want else None), name
        assert listed[sid]["parent"] == (d.ids["T"] if name == "F" else None), name
    shown = _shown(d)
    assert listed[d.ids["L"]]["state"] == "live"
    assert [h["kind"] for h in shown["L"]["holders"]] == ["registry"]
    assert _kinds(shown["D"]) == {"debug-log"}, "what /delete left is the session's"
    assert {"tool-output", "debug-log"} <= _kinds(shown["T"])
    assert {"subagents", "tool-output"} <= _kinds(shown["S"])
    assert {"file-history", "plan", "runtime-status"} <= _kinds(shown["U"])
    # The fork's copied records name T's output: it stays T's.
    assert "tool-output" not in _kinds(shown["F"])

    truth = d.naming()
    everything = {p for s in shown.values() for p in _artifacts(s)}
    shared = d.shared()
    found, expected = 0, 0
    for name, sid in d.ids.items():
        own = _artifacts(shown[name])
        # A fork's transcript names its parent throughout: it is the fork's.
        missing = {
            p
            for p in truth[sid].everything()
            if not covered(p, own) and p not in shared and not covered(p, everything)
        }
        assert not missing, (name, missing)
        unnamed_own = {p for p in truth[sid].names if not covered(p, own)}
        assert not unnamed_own, (name, unnamed_own)
        expected += len(truth[sid].names)
        found += len(truth[sid].names) - len(unnamed_own)
    print(f"\nqwen: sessions {len(listed)}/{len(d.ids)}, names found {found}/{expected}")


def test_prune_and_purge_leave_nothing_and_qwen_agrees(driven: Driven) -> None:
    d, q = driven, driven.qwen
    shown = _shown(d)
    truth = d.naming()
    for name in (*GONE, "L"):
        paths = _artifacts(shown[name]) | truth[d.ids[name]].names
        age([Path(p) for p in sorted(paths)], 60 * DAY)
    before = groundtruth.digests(sorted(d.shared()))
    kept = {name: _artifacts(shown[name]) for name in ("C", "N", "L")}

    report = d.cli("prune", "--older-than", "30d")
    removed = [r["id"] for r in report["removed"]]
    assert set(removed) == {d.ids[n] for n in GONE}, report
    assert report["failed"] == [], report
    assert [(k["id"], k["reason"]) for k in report["kept"]] == [(d.ids["L"], "live")]
    purged = d.cli("purge", "qwen", d.ids["T"])
    assert [r["id"] for r in purged["removed"]] == [d.ids["T"]], purged
    residual = {r["path"] for r in [*report["residual"], *purged["residual"]]}
    assert residual <= d.shared(), residual - d.shared()

    gone = [*GONE, "T"]
    after = d.naming()
    leftovers = {n: after[d.ids[n]].everything() - residual for n in gone}
    assert all(not left for left in leftovers.values()), leftovers
    for name in gone:  # the outputs only a transcript named
        assert not any(Path(p).exists() for p in _artifacts(shown[name])), name
    assert groundtruth.digests(sorted(before)) == before, "a shared file changed"
    for name, paths in kept.items():
        assert all(Path(p).exists() for p in paths), name
    print(f"\nqwen: leftovers outside residual 0, residual {len(residual)}")

    # Qwen itself: lists and resumes what stays, refuses what went.
    d.live.quit()
    listed = set(q.listed(d.dashed)) | set(q.listed(d.dotted))
    assert {d.ids[n] for n in ("C", "N", "L")} <= listed
    assert not listed & {d.ids[n] for n in gone}
    for name in ("C", "N", "L"):
        assert q.resume(d.workspace(name) or d.dotted, d.ids[name]) == d.ids[name], name
    for name in gone:
        assert q.refused(d.workspace(name) or d.dashed, d.ids[name]), name
    print("qwen: after the prune it lists and resumes C, N and L, refuses P, S, F, U, D and T")

    # A pruned session restored from the trash is Qwen's to resume again.
    restored = d.cli("restore", "qwen", d.ids["S"])
    assert [r["id"] for r in restored["restored"]] == [d.ids["S"]], restored
    assert d.ids["S"] in q.listed(d.dotted)
    assert q.resume(d.dotted, d.ids["S"]) == d.ids["S"]
