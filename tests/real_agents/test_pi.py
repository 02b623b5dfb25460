"""Conformance against the real pi (pins.py) driven against the mock model:
what it writes is what agentkeep finds, prunes and purges, and pi itself
agrees afterwards.

One fake user, two workspaces whose session dir is the same (`w/a-b` and
`w/a/b`: pi turns `/` into `-`), one more (`w/live`), and these sessions
(drive_pi.py), all with UUIDv7 ids that share a long prefix:

- P: plain, then resumed by its whole id (`--session P`) and continued (`-c`);
- T: a bash command whose output pi saves whole to `$TMPDIR/pi-bash-*.log`,
  named only in the transcript;
- F: `pi --fork T`: T's entries copied (naming T's log), `parentSession` the
  path of T's file;
- Q: plain in `w/a/b`;
- D: deleted with pi's own picker (`pi -r`, Ctrl+D): nothing of it is left;
- L: in a terminal left open through the prune, and K, an old session of
  the same workspace: pi hides its arguments, so the process running there
  keeps both (when in doubt, live).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import groundtruth
import pytest
from drive_pi import Pi, age, say
from groundtruth import covered
from terminal import Terminal

from conftest import agent_driver, agentkeep
from fakehome import FakeHome

DAY = 86400.0
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
PROMPTS = {
    "P": "hello P",
    "T": "run bash T",
    "F": "forked F",
    "Q": "hello Q",
    "D": "doomed D",
    "L": "hi L",
    "K": "hello K",
}


@dataclass
class Driven:
    home: FakeHome
    pi: Pi
    workspaces: dict[str, Path]
    ids: dict[str, str]
    live: Terminal

    def roots(self) -> list[Path]:
        return [self.pi.root, self.pi.tmp]

    def naming(self) -> dict[str, groundtruth.Naming]:
        return groundtruth.naming(self.roots(), self.ids.values())

    def cli(self, *args: str) -> Any:
        return agentkeep(self.home, *args)


@pytest.fixture(scope="module")
def driven(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driven]:
    with agent_driver(Pi, tmp_path_factory.mktemp("pi")) as pi:
        yield _drive(pi)


def _drive(pi: Pi) -> Driven:
    w = {
        "P": pi.workspace("w", "a-b"),
        "Q": pi.workspace("w", "a", "b"),
        "L": pi.workspace("w", "live"),
    }
    for name in ("T", "F", "D"):
        w[name] = w["P"] if name != "D" else w["Q"]
    w["K"] = w["L"]
    ids: dict[str, str] = {}
    ids["P"] = pi.session(w["P"], PROMPTS["P"])
    assert pi.resume(w["P"], ids["P"]) == ids["P"]
    ids["T"] = pi.tools(w["T"], PROMPTS["T"])
    ids["F"] = pi.session(w["F"], PROMPTS["F"], "--fork", ids["T"])
    # `-c` continues the workspace's newest session: F.
    assert pi.session(w["P"], "go on", "-c", rules=[say("go on", "On.")]) == ids["F"]
    ids["Q"] = pi.session(w["Q"], PROMPTS["Q"])
    ids["D"] = pi.session(w["D"], PROMPTS["D"])
    pi.delete(w["D"], PROMPTS["D"])
    ids["K"] = pi.session(w["K"], PROMPTS["K"])
    live = pi.tui(w["L"], rules=[say(PROMPTS["L"], "Hello L.")])
    before = set(pi.files())
    live.type(PROMPTS["L"])
    live.wait("Hello L.")
    [ids["L"]] = set(pi.files()) - before
    assert len(set(ids.values())) == len(ids), "SETUP INVALID: sessions share an id"
    assert ids["D"] not in pi.files(), "SETUP INVALID: pi's own delete left the session"
    assert pi.files()[ids["P"]].parent == pi.files()[ids["Q"]].parent, "SETUP INVALID: dirs"
    assert list(pi.tmp.glob("pi-bash-*.log")), "SETUP INVALID: no bash log"
    assert len({sid[:8] for sid in ids.values()}) < len(ids), "SETUP INVALID: no shared prefix"
    return Driven(pi.home, pi, w, ids, live)


def _show(d: Driven, name: str) -> dict[str, Any]:
    return d.cli("show", "pi", d.ids[name])


def _artifacts(shown: dict[str, object]) -> list[tuple[str, str]]:
    return [(a["path"], a["kind"]) for a in shown["artifacts"]]  # type: ignore[attr-defined]


def test_every_session_and_every_artifact_is_found(driven: Driven) -> None:
    d = driven
    listed = {s["id"]: s for s in d.cli("ls", "--agent", "pi")}
    present = {n: sid for n, sid in d.ids.items() if n != "D"}
    assert set(listed) == set(present.values()), "pi's own delete leaves nothing"
    for name, sid in present.items():
        assert listed[sid]["workspace"] == str(d.workspaces[name]), name
        assert listed[sid]["parent"] == (d.ids["T"] if name == "F" else None), name
    shown = {name: _show(d, name) for name in present}
    logs = {
        name: [p for p, kind in _artifacts(s) if kind == "bash-log"] for name, s in shown.items()
    }
    assert len(logs["T"]) == 1 and logs["F"] == [], "the fork's copied log stays T's"
    assert [(h["kind"]) for h in shown["L"]["holders"]] == ["process"]
    assert listed[d.ids["L"]]["state"] == "live" and listed[d.ids["K"]]["state"] == "live"
    assert listed[d.ids["Q"]]["state"] == "idle"

    truth = d.naming()
    everything = {p for s in shown.values() for p, _ in _artifacts(s)}
    for name, sid in present.items():
        own = {p for p, _ in _artifacts(shown[name])}
        assert {p for p in truth[sid].names if not covered(p, own)} == set(), name
        # F's header names T's file: it is F's own.
        assert {p for p in truth[sid].contents if not covered(p, everything)} == set(), name
    print(f"\npi: sessions {len(listed)}/{len(present)}, ground truth names all found")


def test_prune_and_purge_leave_nothing_and_pi_agrees(driven: Driven) -> None:
    d, pi = driven, driven.pi
    shown = {name: _show(d, name) for name in ("P", "T", "F", "L", "K", "Q")}
    for name in ("P", "F", "L", "K"):
        age([Path(p) for p, _ in _artifacts(shown[name])], 60 * DAY)

    report = d.cli("prune", "--older-than", "30d")
    assert {r["id"] for r in report["removed"]} == {d.ids["P"], d.ids["F"]}, report
    kept = {(k["id"], k["reason"]) for k in report["kept"]}
    assert kept == {(d.ids["L"], "live"), (d.ids["K"], "live")}, report
    assert report["failed"] == [] and report["residual"] == [], report
    purged = d.cli("purge", "pi", d.ids["T"])
    assert [r["id"] for r in purged["removed"]] == [d.ids["T"]], purged

    gone = ("P", "F", "T")
    after = d.naming()
    assert all(not after[d.ids[n]].everything() for n in gone), after
    for name in gone:
        assert not any(Path(p).exists() for p, _ in _artifacts(shown[name])), name
    for name in ("L", "K", "Q"):
        assert all(Path(p).exists() for p, _ in _artifacts(shown[name])), name

    # pi itself: lists and resumes what stays, refuses what went.
    d.live.type("/quit")
    d.live.wait_gone()
    assert PROMPTS["Q"] in pi.listed(d.workspaces["Q"], PROMPTS["Q"])
    in_live = pi.listed(d.workspaces["L"], PROMPTS["K"])
    assert PROMPTS["L"] in in_live
    for name in ("Q", "L", "K"):
        assert pi.resume(d.workspaces[name], d.ids[name]) == d.ids[name], name
    for name in (*gone, "D"):
        assert pi.refused(d.workspaces[name], d.ids[name]), name
    listed_p = pi.listed(d.workspaces["Q"], PROMPTS["Q"])
    assert not any(PROMPTS[n] in listed_p for n in (*gone, "D"))
    print("pi: after the prune it lists and resumes Q, L and K, refuses P, F, T and D")

    # A pruned fork restored from the trash comes back with its purged parent.
    restored = d.cli("restore", "pi", d.ids["F"])
    assert {r["id"] for r in restored["restored"]} == {d.ids["F"], d.ids["T"]}, restored
    assert pi.resume(d.workspaces["F"], d.ids["F"]) == d.ids["F"]
