"""What a prune, a purge or the trash did, as a person reads it: `prune`,
`purge`, `trash`, `trash --empty` and `history`."""

from __future__ import annotations

import time
from typing import Any

from agentkeep.render.table import AGENT, ID, RED, START, YELLOW, Col, Out, printable, table
from agentkeep.render.words import count, idle, size, when

# The total's verb and the table's title, by (dry run, trash).
_SAID = {
    (True, True): ("would move to the trash", "WOULD TRASH"),
    (False, True): ("moved to the trash", "TRASHED"),
    (True, False): ("would remove", "WOULD REMOVE"),
    (False, False): ("removed", "REMOVED"),
}


def report(out: Out, doc: dict[str, Any]) -> None:
    """A prune's or a purge's report."""
    trash = doc.get("trash")
    verb, title = _SAID[bool(doc["dry_run"]), bool(trash)]
    if doc.get("paused"):
        out.say(f"{out.style('paused:', YELLOW)} {doc['paused']}")
    now = time.time()
    if doc["removed"]:
        cols = (Col(title), ID, Col("SIZE", right=True), Col("IDLE", right=True))
        rows = [
            (r["agent"], r["id"], size(r["bytes"]), idle(r["last_activity"], now))
            for r in doc["removed"]
        ]
        table(out, cols, rows)
    # Sessions over max_removals are one line, not thousands of rows.
    capped = [k for k in doc["kept"] if k["reason"] == "capped"]
    listed = [k for k in doc["kept"] if k["reason"] != "capped"]
    if listed:
        cols = (Col("KEPT"), ID, Col("REASON"), Col("DETAIL", cut=START, least=12))
        table(out, cols, [(k["agent"], k["id"], k["reason"], _detail(k)) for k in listed])
    if capped:
        why = sorted({k.get("detail") or "over max_removals" for k in capped})
        waits = "waits" if len(capped) == 1 else "wait"
        out.say(
            f"{count(len(capped), 'more old session')} {waits} for the next run"
            f" (capped: {'; '.join(why)})"
        )
    for f in doc["failed"]:
        out.say(f"{out.style('failed', RED)} {f['agent']} {f['id']}: {printable(f['reason'])}")
    for r in doc["residual"]:
        out.say(f"residual {r['agent']} {r['id']}: {printable(r['path'])}")
    reclaimed = sum(r["bytes"] for r in doc["removed"])
    out.say(
        f"{len(doc['removed'])} {verb} ({size(reclaimed)}), {len(doc['kept'])} kept, "
        f"{len(doc['failed'])} failed"
    )
    _beside_sessions(out, doc)
    if trash and doc["removed"]:
        freed = trash["freed_bytes"]
        out.say(
            f"They wait in the trash until it expires {when(trash['until'])}:"
            f" {'that frees' if doc['dry_run'] else 'this freed'} {size(freed)} now,"
            f" and {size(trash['bytes'])} then"
            " (`agentkeep trash --empty` frees it at once; `agentkeep restore` brings one back)."
        )


def _beside_sessions(out: Out, doc: dict[str, Any]) -> None:
    """The runtime leftovers removed and the databases compacted."""
    left = doc.get("leftovers") or []
    if left:
        verb = "would remove" if doc["dry_run"] else "removed"
        total = size(sum(f["bytes"] for f in left))
        out.say(f"runtime leftovers: {verb} {count(len(left), 'file')} ({total})")
    for c in doc.get("compacted") or []:
        out.say(
            f"compacted {printable(c['database'])}:"
            f" {size(c['bytes_before'])} -> {size(c['bytes_after'])}"
        )


def _detail(kept: dict[str, Any]) -> str:
    """A kept session's detail, unless it only says its reason again."""
    detail = kept.get("detail") or ""
    return "" if detail == kept["reason"] else detail


def emptied(out: Out, doc: dict[str, Any]) -> None:
    """What `trash --empty` freed, and what it left because it is held."""
    out.say(
        f"emptied {count(len(doc['emptied']), 'session')} from the trash:"
        f" {size(doc['bytes'])} freed"
    )
    for e in doc["held"]:
        out.say(f"kept {e['agent']} {e['id']}: its lease is held (in use); try again later")


def trash_entries(out: Out, entries: list[dict[str, Any]]) -> None:
    """The trash's sessions, and what they take."""
    now = time.time()
    cols = (
        AGENT,
        ID,
        Col("SIZE", right=True),
        Col("PACKED", right=True),  # its size compressed ("-": not yet)
        Col("TRASHED", right=True),
        Col("EXPIRES", right=True),
    )
    rows = [
        (
            e["agent"],
            e["id"],
            size(e["bytes"]) + ("*" if e["partial"] else ""),
            "-" if e["compressed_bytes"] is None else size(e["compressed_bytes"]),
            when(e["trashed_at"], now),
            when(e["expires_at"], now),
        )
        for e in entries
    ]
    table(out, cols, rows)
    total = size(sum(e["bytes"] for e in entries))
    line = f"{count(len(entries), 'session')} in the trash, {total}"
    waiting = sum(1 for e in entries if e["compressed_bytes"] is None)
    if waiting < len(entries):
        kept = size(sum(e["compressed_bytes"] or e["bytes"] for e in entries))
        line += f", kept compressed in {kept}"
        line += f" ({count(waiting, 'session')} not compressed yet)" if waiting else ""
    out.line(line)
    if any(e["partial"] for e in entries):
        out.say(
            "* partly: some of it was removed at once (it lay on another file system,"
            " or an agent's own command removed it), and cannot come back."
        )


def history(out: Out, lines: list[dict[str, Any]]) -> None:
    """The record of what went, newest last: how long ago, why, whether it
    can be restored now (BACK) and what a person knows it by (sizes and
    workspaces are in --json; a whole id leaves a title little room)."""
    now = time.time()
    cols = (Col("AGO", right=True), AGENT, ID, Col("WHY"), Col("BACK"), Col("TITLE", cut=START))
    rows = [
        (
            idle(g["time"], now),
            g["agent"],
            g["id"],
            g["why"],
            "yes" if g["restorable"] else "-",
            g["title"] or "-",
        )
        for g in lines
    ]
    table(out, cols, rows)
    back = sum(1 for g in lines if g["restorable"])
    out.line(f"{count(len(lines), 'line')}; {back} can be restored (agentkeep restore AGENT ID)")
