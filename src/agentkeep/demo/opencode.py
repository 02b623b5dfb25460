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


def session_info(sid: str, directory: str, updated_ms: int) -> dict[str, object]:
    """A session's `storage/session/<project>/<id>.json`, of the global project."""
    return {
        "id": sid,
        "slug": "brave-otter",
        "version": "1.1.20",
        "projectID": "global",
        "directory": directory,
        "title": "a session",
        "time": {"created": updated_ms - 60_000, "updated": updated_ms},
    }


def write_session(data: Path, *, directory: str, days: float) -> str:
    """A session in the data dir `data`, in `directory` and last updated
    `days` ago, with two messages of two parts each. Returns its id."""
    sid = new_id()
    storage = data / "storage"
    updated_ms = int((time.time() - days * DAY) * 1000)
    info = json.dumps(session_info(sid, directory, updated_ms), indent=2)
    made = [write(storage / "session" / "global" / f"{sid}.json", info), storage / "message" / sid]
    for msgid in (new_id("msg"), new_id("msg")):
        write(made[1] / f"{msgid}.json", json.dumps({"id": msgid, "sessionID": sid}))
        for prt in (new_id("prt"), new_id("prt")):
            part = {"id": prt, "text": "x" * 100}
            write(storage / "part" / msgid / f"{prt}.json", json.dumps(part))
        made.append(storage / "part" / msgid)
    for path in made:
        age(path, days)
    return sid
