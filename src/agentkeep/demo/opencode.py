"""opencode sessions for the demo home, in the 1.x JSON storage
(FIELD-NOTES "opencode"): the session's file, with the shape the tests'
builders use too, and its messages, each with a part dir.
"""

from __future__ import annotations

import json
import secrets
import string
import time
from pathlib import Path

from agentkeep.demo.agents import DAY, age, write

_ALNUM = string.ascii_letters + string.digits


def new_id(prefix: str = "ses") -> str:
    """An id shaped like opencode's: prefix, underscore, 26 base62 characters."""
    return f"{prefix}_{''.join(secrets.choice(_ALNUM) for _ in range(26))}"


def session_info(
    sid: str,
    *,
    directory: str,
    updated_ms: int,
    project: str = "global",
    parent: str | None = None,
) -> dict[str, object]:
    """A session's `storage/session/<project>/<id>.json`."""
    info: dict[str, object] = {
        "id": sid,
        "slug": "brave-otter",
        "version": "1.1.20",
        "projectID": project,
        "directory": directory,
        "title": "a session",
        "time": {"created": updated_ms - 60_000, "updated": updated_ms},
    }
    if parent:
        info["parentID"] = parent
    return info


def write_session(data: Path, *, directory: str, days: float) -> str:
    """A session in the data dir `data`, in `directory` and last updated
    `days` ago, with two messages of two parts each. Returns its id."""
    sid = new_id()
    storage = data / "storage"
    updated_ms = int((time.time() - days * DAY) * 1000)
    info = session_info(sid, directory=directory, updated_ms=updated_ms)
    write(storage / "session" / "global" / f"{sid}.json", json.dumps(info, indent=2))
    made = [storage / "session" / "global" / f"{sid}.json", storage / "message" / sid]
    for _ in range(2):
        msgid = new_id("msg")
        message = {"id": msgid, "sessionID": sid}
        write(storage / "message" / sid / f"{msgid}.json", json.dumps(message))
        for _ in range(2):
            prt = new_id("prt")
            part = {"id": prt, "text": "x" * 100}
            write(storage / "part" / msgid / f"{prt}.json", json.dumps(part))
        made.append(storage / "part" / msgid)
    for path in made:
        age(path, days)
    return sid
