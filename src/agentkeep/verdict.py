"""A session's line of the plan, in words: what `show` and the `ui` say.

It only reads a plan's report (a dry run's, or the plan of the sessions as
indexed), so it cannot disagree with `agentkeep prune`: every session old
enough to go is removed, kept or failed there (invariant 9); one in none of
them is not old enough. Ids are said by a prefix only where it tells them
apart (Names).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from enum import StrEnum
from typing import Any, NamedTuple

from agentkeep.model import parse_rfc3339
from agentkeep.render import age

SHORT_ID = 8


class Fate(StrEnum):
    """What becomes of a session at the next prune."""

    GOES = "goes"
    KEPT = "kept"
    WAITS = "waits"  # capped: a later run takes it
    FAILS = "fails"
    STAYS = "stays"  # not old enough, or no retention applies
    UNKNOWN = "?"  # not in the plan although old enough: the plan is older than the listing


class Verdict(NamedTuple):
    """A session's fate, in words; `reason`: a kept one's (model.Reason's
    value); `why`: a removed one's ("age", "size", "purge"); `brief`: a
    column's worth of why, where the words say more."""

    fate: Fate
    words: str
    reason: str | None = None
    why: str | None = None
    brief: str = ""

    @property
    def label(self) -> str:
        """A cell's worth: "goes", "goes: size", "kept: ancestor", "stays"."""
        if self.reason:
            return f"{self.fate.value}: {self.reason}"
        if self.why and self.why != "age":
            return f"{self.fate.value}: {self.why}"
        return self.fate.value

    @property
    def cause(self) -> str:
        """Why it goes or stays, for a column (the words after the fate)."""
        return self.brief or self.words.split(": ", 1)[-1]


class Names:
    """Session ids as a person reads them: each by its shortest prefix of at
    least SHORT_ID characters that no other id here starts with (pi's UUIDv7
    ids share their first 8 hex digits); an id not here is said whole."""

    def __init__(self, ids: Iterable[str]) -> None:
        ordered = sorted(set(ids))
        self._needed: dict[str, int] = {}
        for n, sid in enumerate(ordered):
            near = (o for o in ordered[max(0, n - 1) : n + 2] if o != sid)
            shared = max((len(os.path.commonprefix([sid, o])) for o in near), default=0)
            self._needed[sid] = max(SHORT_ID, shared + 1)

    def needed(self, sid: str) -> int:
        """How many characters of `sid` tell it apart (all of them: whole)."""
        return min(len(sid), self._needed.get(sid, len(sid)))

    def __call__(self, sid: str) -> str:
        """`sid` as a person reads it."""
        return sid[: self.needed(sid)]


class Plans:
    """One plan's report, indexed for looking sessions up."""

    def __init__(
        self,
        report: dict[str, Any] | None,
        error: str | None,
        taken_at: float,
        sessions: list[dict[str, Any]],
        names: Names | None = None,
    ) -> None:
        """`names`: how ids are said (default: among these sessions and entries)."""
        self.report = report
        self.error = error
        self.taken_at = taken_at
        self._sessions = {(s["agent"], s["id"]): s for s in sessions}
        self._removed, self._kept, self._failed = (
            {(e["agent"], e["id"]): e for e in (report or {}).get(name, ())}
            for name in ("removed", "kept", "failed")
        )
        if names is None:
            entries = (*self._sessions, *self._removed, *self._kept, *self._failed)
            names = Names(sid for _, sid in entries)
        self.name = names

    def of(self, agent: str, sid: str, depth: int = 0) -> Verdict:
        """What the plan says of one session (`depth`: of its parent's words)."""
        key = (agent, sid)
        if self.report is None:
            return Verdict(Fate.STAYS, f"stays: {self.error or 'no plan'}")
        if key in self._removed:
            return self._goes(key, self._removed[key].get("why") or "age")
        if key in self._failed:
            return Verdict(Fate.FAILS, f"would fail: {self._failed[key]['reason']}")
        if key in self._kept:
            kept = self._kept[key]
            return self._kept_words(agent, kept["reason"], kept.get("detail") or "", depth)
        return self._young(agent, sid)

    def _goes(self, key: tuple[str, str], why: str) -> Verdict:
        """Removed for its age, for the size cap, or purged by name. The
        report's `trash` is null when the trash is off."""
        trash = (self.report or {}).get("trash")
        where = "is removed" if trash is None else "moves to the trash"
        s = self._sessions.get(key)
        idle = f"idle {age(s['last_activity'], self.taken_at)}" if s else "idle"
        if why == "purge":
            words = f"goes: {where} (purged by name, whatever its age)"
            return Verdict(Fate.GOES, words, why=why, brief="purged by name")
        if why == "size":
            brief = "over max_size: the longest idle go first"
            cause = f"{brief}; {idle}"
        else:
            cutoff = self._retention(key[0])
            brief = f"past the retention ({cutoff})" if cutoff else "past the cutoff"
            cause = f"{idle}, {brief}"
        return Verdict(
            Fate.GOES, f"goes: {where} at the next prune ({cause})", why=why, brief=brief
        )

    def _retention(self, agent: str) -> str | None:
        """The agent's retention: its cutoff seen from the plan's time."""
        cutoff = (self.report or {}).get("cutoffs", {}).get(agent)
        return None if cutoff is None else retention_label(self.taken_at - parse_rfc3339(cutoff))

    def _young(self, agent: str, sid: str) -> Verdict:
        """In no list of the report: not old enough to go. The report's
        cutoffs name every agent the prune looked at; a null one has a size
        cap and no retention."""
        cutoffs = (self.report or {}).get("cutoffs", {})
        if agent not in cutoffs:
            return Verdict(Fate.STAYS, f"stays: no retention applies to {agent}")
        retention = self._retention(agent)
        if retention is None:
            return Verdict(
                Fate.STAYS, f"stays: {agent} has no retention, and max_size does not take it now"
            )
        s = self._sessions.get((agent, sid))
        activity = None if s is None else s["last_activity"]
        if activity is not None and parse_rfc3339(activity) >= parse_rfc3339(cutoffs[agent]):
            idle = age(activity, self.taken_at)
            return Verdict(Fate.STAYS, f"stays: idle {idle}, under the retention ({retention})")
        return Verdict(Fate.UNKNOWN, "not in the plan (it is older than this listing): press r")

    def _kept_words(self, agent: str, reason: str, detail: str, depth: int) -> Verdict:
        words = {
            "live": f"in use ({detail})" if detail else "in use",
            "held": f"its lease is held ({detail})" if detail else "its lease is held",
            "pinned": "pinned (unpin it to let it go)",
            "updated": f"written since the plan was made ({detail})",
            "undated": "its last activity cannot be read",
            "unsafe": f"unsafe: {detail}" if detail else "unsafe",
            "recent": f"{detail} (keep_last)" if detail else "one of the most recent (keep_last)",
        }
        if reason == "capped":
            return Verdict(
                Fate.WAITS, f"waits: {detail or 'over max_removals'}; a later run takes it", reason
            )
        if reason == "ancestor":
            return Verdict(Fate.KEPT, f"kept: {self._parent_words(agent, detail, depth)}", reason)
        return Verdict(Fate.KEPT, f"kept: {words.get(reason, detail or reason)}", reason)

    def _parent_words(self, agent: str, detail: str, depth: int) -> str:
        """ "parent of a session used 2 days ago (1f2e3d4c)", or of one kept
        for its own reason; the report's detail names the child."""
        prefix = "parent of "
        child = detail[len(prefix) :] if detail.startswith(prefix) else ""
        if not child:
            return f"an ancestor of a session that stays ({detail})"
        s = self._sessions.get((agent, child))
        if (agent, child) in self._kept and depth < 3:
            why = self.of(agent, child, depth + 1).words.removeprefix("kept: ")
            return f"parent of {self.name(child)}, which is kept: {why}"
        if s is not None and s["last_activity"] is not None:
            used = age(s["last_activity"], self.taken_at)
            return f"parent of a session used {used} ago ({self.name(child)})"
        return f"parent of {self.name(child)}, which stays"


def days_label(days: float) -> str:
    """A retention or a bin edge in days, as a person writes it: 30d, 2w, 6mo, 1y."""
    if days >= 365 and days % 365 == 0:
        return f"{int(days // 365)}y"
    if days >= 60 and days % 30 == 0:
        return f"{int(days // 30)}mo"
    if 7 <= days < 30 and days % 7 == 0:
        return f"{int(days // 7)}w"
    if days >= 1:
        return f"{days:g}d"
    return f"{days * 24:g}h"


def retention_label(seconds: float) -> str:
    """A retention seen as the distance of its cutoff from a moment a little
    later (the report's cutoff, the plan's time): to the minute."""
    return days_label(round(seconds / 60) / 1440)
