"""A session's line of the plan, in words: what `show` and the `ui` say.

The plan is the configured retention's dry run (the UI's), or the plan of
the sessions as indexed (`show`, as `du` reads it): every session old
enough to go is in its report, removed (it would go, and why: age or
size), kept with a reason, or failed (invariant 9). A session in none of
them is not old enough, and its agent's cutoff says by how much. Nothing
here decides: it only reads the report, so neither can disagree with
`agentkeep prune`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agentkeep.model import parse_rfc3339
from agentkeep.render import age

SHORT_ID = 8


class Fate(StrEnum):
    GOES = "goes"
    KEPT = "kept"
    WAITS = "waits"  # capped: a later run takes it
    FAILS = "fails"
    STAYS = "stays"  # not old enough, or no retention applies
    UNKNOWN = "?"  # not in the plan although old enough: the plan is older than the listing


@dataclass(frozen=True)
class Verdict:
    fate: Fate
    words: str
    # The report's reason for a kept session (model.Reason's value).
    reason: str | None = None

    @property
    def label(self) -> str:
        """A cell's worth: "goes", "kept: ancestor", "stays"."""
        return f"{self.fate.value}: {self.reason}" if self.reason else self.fate.value


def short(sid: str) -> str:
    return sid if len(sid) <= SHORT_ID else sid[:SHORT_ID]


class Plans:
    """One plan's report, indexed for looking sessions up."""

    def __init__(
        self,
        report: dict[str, Any] | None,
        error: str | None,
        taken_at: float,
        sessions: list[dict[str, Any]],
    ) -> None:
        self.report = report
        self.error = error
        self.taken_at = taken_at
        self._sessions = {(s["agent"], s["id"]): s for s in sessions}
        self._removed: dict[tuple[str, str], dict[str, Any]] = {}
        self._kept: dict[tuple[str, str], dict[str, Any]] = {}
        self._failed: dict[tuple[str, str], dict[str, Any]] = {}
        if report is not None:
            for name, table in (
                ("removed", self._removed),
                ("kept", self._kept),
                ("failed", self._failed),
            ):
                for entry in report[name]:
                    table[(entry["agent"], entry["id"])] = entry

    def of(self, agent: str, sid: str) -> Verdict:
        return self._of(agent, sid, depth=0)

    def _of(self, agent: str, sid: str, depth: int) -> Verdict:
        key = (agent, sid)
        if self.report is None:
            return Verdict(Fate.STAYS, f"stays: {self.error or 'no plan'}")
        if key in self._removed:
            where = "moves to the trash" if self.report.get("trash") else "is removed"
            if self._removed[key].get("why") == "size":
                return Verdict(Fate.GOES, f"goes: {where} at the next prune (over max_size)")
            return Verdict(Fate.GOES, f"goes: {where} at the next prune ({self._idle(key)})")
        if key in self._failed:
            return Verdict(Fate.FAILS, f"would fail: {self._failed[key]['reason']}")
        if key in self._kept:
            kept = self._kept[key]
            return self._kept_words(agent, kept["reason"], kept.get("detail") or "", depth)
        return self._young(agent, sid)

    def _idle(self, key: tuple[str, str]) -> str:
        s = self._sessions.get(key)
        cutoff = self._retention(key[0])
        idle = f"idle {age(s['last_activity'], self.taken_at)}" if s else "idle"
        return f"{idle}, past the retention ({cutoff})" if cutoff else idle

    def _retention(self, agent: str) -> str | None:
        """The agent's retention: its cutoff seen from the plan's time."""
        cutoff = (self.report or {}).get("cutoffs", {}).get(agent)
        return None if cutoff is None else retention_label(self.taken_at - parse_rfc3339(cutoff))

    def _young(self, agent: str, sid: str) -> Verdict:
        retention = self._retention(agent)
        if retention is None:
            return Verdict(Fate.STAYS, f"stays: no retention applies to {agent}")
        s = self._sessions.get((agent, sid))
        cutoff = parse_rfc3339((self.report or {})["cutoffs"][agent])
        activity = None if s is None else s["last_activity"]
        if activity is not None and parse_rfc3339(activity) >= cutoff:
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
            why = self._of(agent, child, depth + 1).words.removeprefix("kept: ")
            return f"parent of {short(child)}, which is kept: {why}"
        if s is not None and s["last_activity"] is not None:
            used = age(s["last_activity"], self.taken_at)
            return f"parent of a session used {used} ago ({short(child)})"
        return f"parent of {short(child)}, which stays"


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
