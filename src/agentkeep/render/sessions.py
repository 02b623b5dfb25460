"""The sessions as a person reads them: `ls`, `show`, `du` and `scan`, and
the hint a missing retention earns."""

from __future__ import annotations

import time
from typing import Any

from agentkeep.render.table import AGENT, BOLD, END, ID, YELLOW, Col, Out, printable, table
from agentkeep.render.words import count, idle, size, when


def sessions(out: Out, rows: list[dict[str, Any]], hint: dict[str, Any] | None) -> None:
    """`ls`: a session a row, and their total."""
    now = time.time()
    cols = (
        AGENT,
        ID,
        Col("IDLE", right=True),
        Col("SIZE", right=True),
        Col("STATE"),
        Col("WORKSPACE", cut=END),
    )
    table(
        out,
        cols,
        [
            (
                r["agent"],
                r["id"],
                idle(r["last_activity"], now),
                size(r["bytes"]),
                r["state"],
                r["workspace"] or "-",
            )
            for r in rows
        ],
    )
    total = sum(r["bytes"] for r in rows)
    out.line(f"{count(len(rows), 'session')}, {size(total)}")
    if partly := sum(bool(r.get("unreadable")) for r in rows):
        out.say(f"{count(partly, 'session')} not listed whole, kept: see `agentkeep doctor`")
    retention_hint(out, hint)


def retention_hint(out: Out, hint: dict[str, Any] | None) -> None:
    """With no retention: what a 30-day one would reclaim, and how to set it."""
    if not hint:
        return
    sessions = count(hint["sessions"], "session")
    out.say(
        f"No retention is set, so nothing is ever pruned. A {hint['retention']} retention would "
        f"reclaim {size(hint['bytes'])} from {sessions}; to turn it on, add this line to "
        f"{hint['config_path']}:"
    )
    out.line(f"  {hint['config_line']}")


def show(out: Out, doc: dict[str, Any]) -> None:
    """One session: its state, verdict, holders and artifacts."""
    out.line(out.style(f"{doc['agent']} {doc['id']}", BOLD))
    state = doc["state"]
    if doc.get("pinned") and state != "pinned":
        state += ", pinned"  # live or held wins the state; the pin still counts
    for label, value in (
        ("state", state),
        ("workspace", doc["workspace"] or "-"),
        ("last activity", when(doc["last_activity"]) if doc["last_activity"] else "undated"),
        ("size", size(doc["bytes"])),
        ("parent", doc["parent"] or "-"),
        ("children", ", ".join(doc["children"]) or "-"),
    ):
        out.say(f"{label:<14} {printable(value)}", indent="  ")
    if doc.get("unsafe"):
        out.say(f"{out.style('unsafe:', YELLOW)} {printable(doc['unsafe'])}", indent="  ")
    verdict = doc.get("verdict")
    if verdict:
        out.say(f"{'verdict':<14} {printable(verdict['words'])}", indent="  ")
        if verdict.get("do"):
            out.say(f"{'':<14} {printable(verdict['do'])}", indent="  ")
    for h in doc["holders"]:
        pid = h["pid"] if h["pid"] is not None else "-"
        out.say(f"held by {h['kind']} {pid} {printable(h.get('detail', ''))}".rstrip(), "  ")
    cols = [Col("KIND"), Col("SIZE", right=True), Col("PATH", cut=END)]
    rows = [[a["kind"], size(a["bytes"]), a["path"]] for a in doc["artifacts"]]
    if any(a.get("linked") for a in doc["artifacts"]):
        cols.append(Col("NOTE"))
        for row, a in zip(rows, doc["artifacts"], strict=True):
            row.append("behind a link: never removed" if a.get("linked") else "")
    table(out, cols, rows)


def du(
    out: Out, doc: dict[str, Any], hint: dict[str, Any] | None, held: dict[str, int] | None = None
) -> None:
    """Disk use as `du` counts it (allocated blocks), largest first; `held`:
    what the trash holds (disk use too, until it expires)."""
    groups = sorted(doc["groups"], key=lambda g: (-g["disk_bytes"], g["key"]))
    cols = (
        Col(doc["by"].upper(), cut=END),
        Col("DISK", right=True),
        Col("SESSIONS", right=True),
        Col("RECLAIMABLE", right=True),
    )
    table(
        out,
        cols,
        [
            (g["key"], size(g["disk_bytes"]), str(g["sessions"]), size(g["reclaimable_disk_bytes"]))
            for g in groups
        ],
    )
    disk = sum(g["disk_bytes"] for g in groups)
    apparent = sum(g["bytes"] for g in groups)
    reclaim = sum(g["reclaimable_disk_bytes"] for g in groups)
    out.say(
        f"total {size(disk)} on disk ({size(apparent)} of data), reclaimable now {size(reclaim)}"
    )
    if held and held["sessions"]:
        out.say(
            f"the trash holds {size(held['bytes'])} more ({count(held['sessions'], 'session')}):"
            " freed when it expires, or now by `agentkeep trash --empty`"
        )
    retention_hint(out, hint)


def scan(out: Out, doc: dict[str, Any]) -> None:
    """What a scan found, by agent."""
    cols = (AGENT, Col("SESSIONS", right=True))
    table(out, cols, [(agent, str(n)) for agent, n in doc["sessions"].items()])
    out.line(f"{doc['artifacts']} artifacts, {size(doc['bytes'])}, in {doc['seconds']:.2f} s")
    for line in unreadable(doc):
        out.say(f"{out.style('cannot list', YELLOW)} {line}")


def unreadable(doc: dict[str, Any]) -> list[str]:
    """`unreadable` of a scan or status, a line a place: their sessions are kept."""
    places = (doc.get("unreadable") or {}).items()
    return [f"{printable(p)} ({a}): its sessions are kept" for a, ps in places for p in ps]
