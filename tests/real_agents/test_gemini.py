"""Conformance against the real Gemini CLI (pins.py) driven against the mock
model: what it writes is what agentkeep finds, prunes and purges, and Gemini
itself agrees afterwards.

One fake user, two workspaces of the same base name (`work/alpha` and
`other/alpha`: Gemini names their project dirs `alpha` and `alpha-1`), and
these sessions:

- P: plain, then resumed in a later minute (its chat renamed to an earlier
  minute first): the resume leaves a second, startup-only chat of P;
- T: tool use (a file write, a shell command whose output is truncated into
  `tool-outputs/session-<T>/`, plan mode: `<T>/plans/`);
- S: a subagent (`chats/<S>/<sub>.jsonl`; the subagent's truncated output
  lands in `tool-outputs/session-<S>/`);
- X: `--session-id` with a name that is not a UUID;
- I: `--session-file` of P's chat: an imported copy (no parent recorded);
- Q: plain in the other workspace, then `--resume latest`.

Known shared files (never a session's, never changed by a prune): the
settings, `projects.json`, and each project's `.project_root` in `tmp/` and
`history/`. None of them names a session: every file that names one is one
of its artifacts.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import groundtruth
import pytest
from drive_gemini import REFUSED, Gemini, age, last_updated
from groundtruth import covered

from conftest import agent_binary, agent_driver, agentkeep
from fakehome import FakeHome

DAY = 86400.0
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@dataclass
class Driven:
    home: FakeHome
    gemini: Gemini
    alpha: Path
    other: Path
    ids: dict[str, str]
    subs: list[str]

    def roots(self) -> list[Path]:
        return [self.gemini.root]

    def naming(self) -> dict[str, groundtruth.Naming]:
        return groundtruth.naming(self.roots(), [*self.ids.values(), *self.subs])

    def shared(self) -> list[Path]:
        root = self.gemini.root
        return [
            root / "settings.json",
            root / "projects.json",
            *sorted(root.glob("tmp/*/.project_root")),
            *sorted(root.glob("history/*/.project_root")),
        ]

    def cli(self, *args: str) -> Any:
        return agentkeep(self.home, *args)


@pytest.fixture(scope="module")
def driven(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driven]:
    g = agent_driver(Gemini, tmp_path_factory.mktemp("gemini"))
    home = g.home
    alpha, other = g.workspace("work", "alpha"), g.workspace("other", "alpha")
    ids: dict[str, str] = {}
    ids["P"] = g.plain(alpha)
    # A resume in a later minute than the chat's own: Gemini names the chat
    # it starts with by the minute, so this one gets a second file.
    (chat,) = g.chats(ids["P"])
    chat.rename(chat.with_name("session-2026-01-01T00-00-" + ids["P"][:8] + ".jsonl"))
    assert g.resume(alpha, ids["P"], late=2) == ids["P"]
    ids["T"] = g.tools(alpha)
    ids["S"] = g.subagent(alpha)
    ids["X"] = g.session(alpha, "a named one", "--session-id", "my-named_session-1")
    ids["I"] = g.import_session(alpha, g.chats(ids["P"])[0])
    ids["Q"] = g.plain(other, "hello other")
    assert g.resume(other, "latest") == ids["Q"]
    subs = g.subagents(ids["S"])
    assert len(set(ids.values())) == len(ids) and subs, "SETUP INVALID: sessions were not made"
    assert len(g.chats(ids["P"])) == 2, "SETUP INVALID: the resume left no second chat"
    assert (g.root / "tmp" / "alpha" / ids["T"] / "plans").is_dir()
    assert list(g.root.glob(f"tmp/alpha/tool-outputs/session-{ids['T']}/*.txt"))
    assert list(g.root.glob(f"tmp/alpha/tool-outputs/session-{ids['S']}/*{subs[0]}*.txt"))
    assert (g.root / "tmp" / "alpha-1").is_dir(), "SETUP INVALID: no second project dir"
    yield Driven(home, g, alpha, other, ids, subs)
    runtime = Path(home.environ["XDG_RUNTIME_DIR"])
    for path in sorted(runtime.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    runtime.rmdir()


def test_every_session_and_every_artifact_is_found(driven: Driven) -> None:
    d = driven
    listed = {s["id"]: s for s in d.cli("ls", "--agent", "gemini")}
    assert set(listed) == set(d.ids.values())  # subagents belong to their parent
    for name, sid in d.ids.items():
        want = str(d.other if name == "Q" else d.alpha)
        assert listed[sid]["workspace"] == want, name
        assert listed[sid]["parent"] is None, name  # Gemini records no parent
    truth = d.naming()
    found, expected = 0, 0
    for name, sid in d.ids.items():
        shown = d.cli("show", "gemini", sid)
        artifacts = {a["path"] for a in shown["artifacts"]}
        everything = truth[sid].everything()
        if name == "S":
            for sub in d.subs:
                everything |= truth[sub].everything()
        missing = {p for p in everything if not covered(p, artifacts)}
        assert not missing, (name, missing)
        expected += len(everything)
        found += len(everything) - len(missing)
        if name == "P":  # both of P's chats are what Gemini lists it by
            primary = {a["path"] for a in shown["artifacts"] if a["kind"] == "chat"}
            assert primary == {str(c) for c in d.gemini.chats(sid)}
    print(f"\ngemini: sessions {len(listed)}/{len(d.ids)}, ground truth {found}/{expected}")


def test_activity_is_the_last_last_updated_of_the_chats(driven: Driven) -> None:
    """With its files' mtimes set back, a session is as recent as the last
    `{"$set": {"lastUpdated"}}` Gemini appended, not as its first record."""
    d = driven
    sid = d.ids["P"]
    chats = d.gemini.chats(sid)
    first = max(last_updated(c, first=True) for c in chats)
    last = max(last_updated(c) for c in chats)
    assert last - first > 1.5, "SETUP INVALID: the resume answered at once"
    old = time.time() - 60 * DAY
    for chat in chats:
        os.utime(chat, (old, old))
    d.cli("scan")  # an mtime set back is not news to the index: look afresh
    shown = d.cli("show", "gemini", sid)
    assert shown["last_activity"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(last))


def test_prune_and_purge_leave_nothing_and_gemini_agrees(driven: Driven) -> None:
    d, g = driven, driven.gemini
    truth = d.naming()
    gone = ["P", "S", "I"]  # aged and pruned; T purged; X and Q stay
    for name in gone:
        sid = d.ids[name]
        paths = truth[sid].everything() | {str(c) for c in g.chats(sid)}
        age([Path(p) for p in sorted(paths)], 60 * DAY)
    before = {str(k): v for k, v in groundtruth.digests(d.shared()).items()}
    kept_before = {n: d.cli("show", "gemini", d.ids[n]) for n in ("X", "Q")}

    report = d.cli("prune", "--older-than", "30d")
    removed = {r["id"] for r in report["removed"]}
    assert removed == {d.ids[n] for n in gone}, report
    assert report["failed"] == [] and report["kept"] == [], report
    purged = d.cli("purge", "gemini", d.ids["T"])
    assert [r["id"] for r in purged["removed"]] == [d.ids["T"]], purged
    residual = {r["path"] for r in [*report["residual"], *purged["residual"]]}

    after = d.naming()
    leftovers = {name: after[d.ids[name]].everything() - residual for name in [*gone, "T"]}
    for sub in d.subs:
        leftovers["S"] |= after[sub].everything() - residual
    assert all(not left for left in leftovers.values()), leftovers
    assert {str(k): v for k, v in groundtruth.digests(d.shared()).items()} == before
    for name, shown in kept_before.items():
        for artifact in shown["artifacts"]:
            assert os.path.lexists(artifact["path"]), (name, artifact)
    print(f"\ngemini: leftovers outside residual 0, residual {len(residual)}")

    # Gemini itself: lists and resumes what stays, refuses what went.
    alpha, other = g.listed(d.alpha), g.listed(d.other)
    assert d.ids["X"] in alpha and d.ids["Q"] in other
    for name in [*gone, "T"]:
        assert d.ids[name] not in alpha, name
    assert g.resume(d.alpha, d.ids["X"]) == d.ids["X"]
    assert g.resume(d.other, d.ids["Q"]) == d.ids["Q"]
    for name in [*gone, "T"]:
        refused = g.run(d.alpha, "--resume", d.ids[name], "-p", "back?")
        assert refused.returncode == REFUSED, (name, refused.stdout, refused.stderr)
        assert "Invalid session identifier" in refused.stderr, name
    print("gemini: after the prune it lists and resumes X and Q, refuses P, S, I and T")

    # A pruned session restored from the trash is Gemini's to resume again.
    restored = d.cli("restore", "gemini", d.ids["S"])
    assert [r["id"] for r in restored["restored"]] == [d.ids["S"]], restored
    assert d.ids["S"] in g.listed(d.alpha)
    assert g.resume(d.alpha, d.ids["S"]) == d.ids["S"]


def test_geminis_own_clean_up_is_on_by_default_and_takes_a_resumed_session(
    agent_home: FakeHome,
) -> None:
    """What doctor warns of, by the real agent: with no sessionRetention
    setting, Gemini deletes at its next start a session resumed in a later
    minute than it began (the resume leaves a chat with nothing to resume,
    which Gemini deletes with every chat of the same 8-character id)."""
    g = Gemini.setup(agent_home, agent_binary("gemini"))
    alpha = g.workspace("work", "alpha")
    sid = g.plain(alpha)
    (chat,) = g.chats(sid)
    chat.rename(chat.with_name(f"session-2026-01-01T00-00-{sid[:8]}.jsonl"))
    g.resume(alpha, sid)
    assert len(g.chats(sid)) == 2, "SETUP INVALID: the resume left no second chat"
    settings = json.loads((g.root / "settings.json").read_text())
    del settings["general"]["sessionRetention"]
    (g.root / "settings.json").write_text(json.dumps(settings))
    warned = agent_home.cli("doctor", "--json")
    gemini = next(c for c in json.loads(warned.stdout) if c["name"] == "gemini")
    assert not gemini["ok"] and "by default" in gemini["detail"], gemini

    g.plain(alpha, "a new day")

    assert g.chats(sid) == [], "Gemini kept the resumed session"
    assert sid not in g.listed(alpha)
