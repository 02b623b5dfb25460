"""pi session trees as pi 0.73 writes them, for the adapter's tests.

`PiTree(root, tmp)` writes one file per session,
`<root>/--<cwd, / as ->--/<ISO time>_<id>.jsonl` (or flat in `root` when
pi is given a session dir): the header `{"type": "session", "version": 3,
"id", "timestamp", "cwd"}` (a fork's adds `parentSession`, the path of its
parent's file, and copies the parent's entries), then the entries. A bash
command's big output goes to `<tmp>/pi-bash-<hex>.log`, which the
tool result names by its full path.
"""

from __future__ import annotations

import json
import os
import secrets
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from agentkeep.demo.agents import write


def uuid7(ms: int | None = None) -> str:
    """A UUIDv7 as pi makes them: 48 bits of milliseconds first, so ids
    made close together share their first 8+ hex digits."""
    ms = int(time.time() * 1000) if ms is None else ms
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & (2**48 - 1)) << 80 | 0x7 << 76 | (rand >> 68) << 64 | 0b10 << 62
    value |= rand & (2**62 - 1)
    return str(uuid.UUID(int=value))


def stamp(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(when)) + ".000Z"


def entries(when: float, log: str = "") -> list[dict[str, object]]:
    """A prompt, a bash call, its result (naming a full output's path when
    `log` is given) and the answer, each linked to the one before."""
    found: list[dict[str, object]] = []
    parent: str | None = None
    bodies: list[dict[str, object]] = [
        {"role": "user", "content": [{"type": "text", "text": "run it"}]},
        {"role": "assistant", "content": [{"type": "toolCall", "id": "c1", "name": "bash"}]},
        {
            "role": "toolResult",
            "toolCallId": "c1",
            "toolName": "bash",
            "content": [{"type": "text", "text": "1\n2\n3"}],
            "details": {"truncation": {"truncated": bool(log)}, "fullOutputPath": log or None},
        },
        {"role": "assistant", "content": [{"type": "text", "text": "All done."}]},
    ]
    for n, message in enumerate(bodies):
        entry_id = secrets.token_hex(4)
        found.append(
            {
                "type": "message",
                "id": entry_id,
                "parentId": parent,
                "timestamp": stamp(when + n),
                "message": message,
            }
        )
        parent = entry_id
    return found


@dataclass
class PiSession:
    id: str
    cwd: str
    file: Path
    logs: list[Path] = field(default_factory=list)

    @property
    def artifacts(self) -> list[Path]:
        return [self.file, *self.logs]


class PiTree:
    def __init__(self, root: Path, tmp: Path, *, flat: bool = False) -> None:
        self.root = root
        self.tmp = tmp
        self.flat = flat

    def directory(self, cwd: str) -> Path:
        if self.flat:
            return self.root
        return self.root / ("--" + cwd.lstrip("/").replace("/", "-") + "--")

    def session(
        self,
        cwd: str,
        *,
        sid: str | None = None,
        days: float = 0.0,
        parent: PiSession | None = None,
        log: bool = False,
        header: str | None = None,
    ) -> PiSession:
        """A session of `cwd`; `parent`: a fork of it (`pi --fork`), with its
        entries copied; `log`: a bash output saved to the tmp dir;
        `header`: the first line as given instead of a header."""
        when = time.time() - days * 86400
        sid = sid or uuid7(int(when * 1000))
        name = stamp(when).replace(":", "-").replace(".", "-") + f"_{sid}.jsonl"
        path = self.directory(cwd) / name
        first: dict[str, object] = {
            "type": "session",
            "version": 3,
            "id": sid,
            "timestamp": stamp(when),
            "cwd": cwd,
        }
        lines: list[dict[str, object]] = []
        if parent is not None:
            first["parentSession"] = str(parent.file)
            lines += [json.loads(x) for x in parent.file.read_text().splitlines()[1:]]
        s = PiSession(sid, cwd, path)
        output = self.tmp / f"pi-bash-{secrets.token_hex(8)}.log"
        lines += entries(when, str(output) if log else "")
        head = header if header is not None else json.dumps(first)
        write(path, head + "\n" + "".join(json.dumps(x) + "\n" for x in lines))
        if log:
            write(output, "1\n2\n3\n" * 20000)
            s.logs.append(output)
        for p in s.artifacts:
            os.utime(p, (when, when))
        return s
