"""The verdict words `show` and the `ui` share (verdict.py), read off plain
reports: every retention shape (age, keep_last's `recent`, max_size's
removal for size, a purge), every keep reason, the sessions in no list;
and ids said by a prefix only where it tells them apart (Names)."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from agentkeep.model import rfc3339
from agentkeep.verdict import Fate, Names, Plans

NOW = 1_800_000_000.0
DAY = 86400.0
A = "0b7c3a52-5d0e-4c1e-9a57-2f6b1c9e4d01"
B = "1f2e3d4c-6b5a-4978-8e6f-0a1b2c3d4e02"
# pi's UUIDv7 ids, made 50 seconds apart: their first 9 characters agree.
PI_1 = "019aa4f2-0c31-7e4a-9b21-3c4d5e6f7a81"
PI_2 = "019aa4f2-cf81-7a19-8c55-0d1e2f3a4b92"


def session(sid: str, idle_days: float, agent: str = "claude") -> dict[str, Any]:
    return {"agent": agent, "id": sid, "last_activity": rfc3339(NOW - idle_days * DAY)}


def report(
    removed: list[tuple[str, str]] = (),  # type: ignore[assignment]
    kept: list[tuple[str, str, str]] = (),  # type: ignore[assignment]
    cutoffs: dict[str, float | None] | None = None,
    trash: dict[str, Any] | None = None,
    agent: str = "claude",
) -> dict[str, Any]:
    """A dry run's report: `removed` (id, why), `kept` (id, reason, detail),
    `cutoffs` retention in days by agent (None: a size cap alone)."""
    cutoffs = {agent: 30.0} if cutoffs is None else cutoffs
    return {
        "cutoffs": {
            a: None if days is None else rfc3339(NOW - days * DAY) for a, days in cutoffs.items()
        },
        "removed": [{"agent": agent, "id": sid, "why": why} for sid, why in removed],
        "kept": [
            {"agent": agent, "id": sid, "reason": reason, "detail": detail}
            for sid, reason, detail in kept
        ],
        "failed": [],
        "trash": trash,
    }


TRASH = {"until": rfc3339(NOW + 7 * DAY)}


def test_removed_for_age_says_the_retention() -> None:
    plans = Plans(report([(A, "age")], trash=TRASH), None, NOW, [session(A, 45)])
    verdict = plans.of("claude", A)
    assert verdict.fate == Fate.GOES
    assert verdict.words == (
        "goes: moves to the trash at the next prune (idle 45 days, past the retention (30d))"
    )
    assert (verdict.label, verdict.cause) == ("goes", "past the retention (30d)")


def test_removed_for_size_says_max_size() -> None:
    plans = Plans(report([(A, "size")], cutoffs={"claude": None}), None, NOW, [session(A, 3)])
    verdict = plans.of("claude", A)
    assert verdict.fate == Fate.GOES and verdict.why == "size"
    assert verdict.words == (
        "goes: is removed at the next prune (over max_size: the longest idle go first; idle 3 days)"
    )
    assert (verdict.label, verdict.cause) == (
        "goes: size",
        "over max_size: the longest idle go first",
    )


def test_a_purge_goes_by_name() -> None:
    plans = Plans(report([(A, "purge")], cutoffs={}, trash=TRASH), None, NOW, [session(A, 1)])
    assert plans.of("claude", A).words == (
        "goes: moves to the trash (purged by name, whatever its age)"
    )


@pytest.mark.parametrize(("trash", "where"), [({}, "moves to the trash"), (None, "is removed")])
def test_an_empty_trash_object_means_the_trash_is_on(trash: Any, where: str) -> None:
    """`show`'s plan of the index says "trash on" with an empty object."""
    plans = Plans(report([(A, "age")], trash=trash), None, NOW, [session(A, 45)])
    assert plans.of("claude", A).words.startswith(f"goes: {where} ")


def test_keep_last_says_recent() -> None:
    detail = "one of the 3 most recently active in /home/you/webapp"
    plans = Plans(report(kept=[(A, "recent", detail)]), None, NOW, [session(A, 90)])
    verdict = plans.of("claude", A)
    assert verdict.words == f"kept: {detail} (keep_last)"
    assert (verdict.fate, verdict.label) == (Fate.KEPT, "kept: recent")


@pytest.mark.parametrize(
    ("reason", "detail", "words"),
    [
        ("live", "pid 4242", "kept: in use (pid 4242)"),
        ("held", "", "kept: its lease is held"),
        ("pinned", "", "kept: pinned (unpin it to let it go)"),
        ("undated", "", "kept: its last activity cannot be read"),
        ("unsafe", "behind a link", "kept: unsafe: behind a link"),
        ("capped", "", "waits: over max_removals; a later run takes it"),
    ],
)
def test_each_keep_reason_in_words(reason: str, detail: str, words: str) -> None:
    plans = Plans(report(kept=[(A, reason, detail)]), None, NOW, [session(A, 90)])
    assert plans.of("claude", A).words == words


def test_a_parent_names_its_child_by_what_tells_it_apart() -> None:
    """The child's id shares 9 characters with another session's: it is
    said by 10."""
    sessions = [session(PI_1, 40, "pi"), session(PI_2, 3, "pi")]
    kept = [(PI_1, "ancestor", f"parent of {PI_2}")]
    plans = Plans(report(kept=kept, agent="pi"), None, NOW, sessions)
    assert plans.of("pi", PI_1).words == "kept: parent of a session used 3 days ago (019aa4f2-c)"


def test_a_child_not_listed_is_named_whole() -> None:
    """`show` knows one session: nothing says which prefix of another id
    would be unique."""
    plans = Plans(report(kept=[(A, "ancestor", f"parent of {B}")]), None, NOW, [session(A, 40)])
    assert plans.of("claude", A).words == f"kept: parent of {B}, which stays"


def test_sessions_in_no_list() -> None:
    young, old = session(A, 3), session(B, 45)
    plans = Plans(report(), None, NOW, [young, old, session(PI_1, 60, "pi")])
    assert plans.of("claude", A).words == "stays: idle 3 days, under the retention (30d)"
    # Old enough, yet in no list: the listing is newer than the plan.
    assert plans.of("claude", B).fate == Fate.UNKNOWN
    assert plans.of("pi", PI_1).words == "stays: no retention applies to pi"
    size_only = Plans(report(cutoffs={"claude": None}), None, NOW, [old])
    assert size_only.of("claude", B).words == (
        "stays: claude has no retention, and max_size does not take it now"
    )
    assert Plans(None, "a bad config", NOW, [old]).of("claude", B).words == "stays: a bad config"


def test_names_tell_ids_apart() -> None:
    names = Names([A, B, PI_1, PI_2, "fix-ci", "fix", "grok-notes"])
    assert [names(x) for x in (A, B, PI_1, PI_2)] == [A[:8], B[:8], PI_1[:10], PI_2[:10]]
    # Short ids, and one that begins another, are said whole.
    assert (names("fix"), names("fix-ci"), names("grok-notes")) == ("fix", "fix-ci", "grok-not")
    # An id it was not given is said whole; one given twice is one id.
    assert names("2a9d8c7b-3e4f-4a5b-9c6d-7e8f9a0b1c03") == "2a9d8c7b-3e4f-4a5b-9c6d-7e8f9a0b1c03"
    assert Names([A, A, B])(A) == A[:8]


def test_names_of_ids_made_seconds_apart_are_unique() -> None:
    """UUIDv7 ids made within minutes of each other: every name is a prefix
    of its id that starts no other."""
    rng = random.Random(7)
    start = 1_767_600_000_000
    ids = []
    for n in range(300):
        ms = start + n * rng.randrange(1, 120_000)
        ids.append(str(uuid.UUID(int=ms << 80 | 0x7 << 76 | rng.getrandbits(76))))
    names = Names(ids)
    assert any(len(names(x)) > 8 for x in ids), "SETUP INVALID: no two ids share 8 characters"
    for sid in ids:
        name = names(sid)
        assert sid.startswith(name) and len(name) >= 8
        assert [other for other in ids if other.startswith(name)] == [sid], name
