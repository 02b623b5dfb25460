"""Qwen Code trees as Qwen Code 0.24 writes them, for the adapter's tests.

`QwenTree(home, runtime)` lays sessions out in the two roots: the chat
records (`uuid`, `parentUuid`, `sessionId`, `timestamp`, `type`, `cwd`,
`version`, and `forkedFrom` on every record a fork copied), the sidecars,
the subagents' dir named by the parent, file history, plans, debug logs, the
truncated tool outputs that only a transcript names, the live-session
registry, and the shared files naming every session (usage records, a
project's meta.json and extract-cursor.json, a project's logs.json).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from agentkeep.demo.agents import write

VERSION = "0.24.4"


def project_key(cwd: str) -> str:
    """Qwen's key of a workspace: every character but [A-Za-z0-9] a `-`."""
    return re.sub(r"[^A-Za-z0-9]", "-", cwd)


def project_hash(cwd: str) -> str:
    return hashlib.sha256(cwd.encode()).hexdigest()


def iso(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(when)) + ".000Z"


def proc_start(pid: int) -> str:
    """What Qwen writes as `procStart`: `<boot id>:<start ticks>`."""
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return f"{boot}:{fields[19]}"


def records(
    sid: str, cwd: str, when: float, *, forked_from: str | None = None, output: str = ""
) -> list[dict[str, object]]:
    """A user prompt, the model's tool call and its result (naming a
    truncated output's path when `output` is given), the model's answer."""
    texts = ["do it", "calling a tool", f"saved to: {output}" if output else "done", "All done."]
    kinds = ["user", "assistant", "tool_result", "assistant"]
    found: list[dict[str, object]] = []
    parent: str | None = None
    for n, (kind, text) in enumerate(zip(kinds, texts, strict=True)):
        record: dict[str, object] = {
            "uuid": str(uuid.uuid4()),
            "parentUuid": parent,
            "sessionId": sid,
            "timestamp": iso(when + n),
            "type": kind,
            "cwd": cwd,
            "version": VERSION,
            "message": {"role": "user" if kind == "user" else "model", "parts": [{"text": text}]},
        }
        if forked_from is not None:
            record["forkedFrom"] = {"sessionId": forked_from, "messageUuid": record["uuid"]}
        found.append(record)
        parent = str(record["uuid"])
    return found


def jsonl(items: list[dict[str, object]]) -> str:
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in items)


@dataclass
class QwenSession:
    id: str
    cwd: str
    chat: Path
    # Every artifact, the chat first, then as the adapter lists them.
    artifacts: list[Path] = field(default_factory=list)
    # The shared files it was written into (meta.json and
    # extract-cursor.json name only a project's last session).
    shared: list[Path] = field(default_factory=list)
    outputs: list[Path] = field(default_factory=list)

    def naming(self) -> list[Path]:
        """The shared files that name it now (reported as residual)."""
        return [p for p in self.shared if self.id.encode() in p.read_bytes()]


class QwenTree:
    def __init__(self, home: Path, runtime: Path | None = None) -> None:
        self.home = home
        self.runtime = runtime or home

    def project(self, cwd: str) -> Path:
        return self.runtime / "projects" / project_key(cwd)

    def tmp(self, cwd: str) -> Path:
        return self.runtime / "tmp" / project_hash(cwd)

    def session(
        self,
        cwd: str,
        *,
        sid: str | None = None,
        days: float = 0.0,
        forked_from: str | None = None,
        copy_output_of: QwenSession | None = None,
        output: bool = False,
        subagent: bool = False,
        extras: bool = False,
        archived: bool = False,
    ) -> QwenSession:
        """A session of `cwd`. `output`: a truncated tool output its
        transcript names; `copy_output_of`: a fork's copied records name the
        parent's output; `subagent`: a subagent dir named by it; `extras`:
        its sidecars, file history, plan and debug log."""
        sid = sid or str(uuid.uuid4())
        when = time.time() - days * 86400
        chats = self.project(cwd) / "chats"
        chat = (chats / "archive" if archived else chats) / f"{sid}.jsonl"
        out = self.tmp(cwd) / f"run_shell_command_{secrets.token_hex(6)}.output"
        lines = []
        if copy_output_of is not None:
            named = copy_output_of.outputs[0] if copy_output_of.outputs else ""
            lines += records(sid, cwd, when, forked_from=forked_from, output=str(named))
        elif forked_from is not None:
            lines += records(sid, cwd, when, forked_from=forked_from)
        lines += records(sid, cwd, when, output=str(out) if output else "")
        write(chat, jsonl(lines))
        s = QwenSession(sid, cwd, chat, [chat])
        if extras:
            s.artifacts += self.extras(sid, cwd, chats)
        if subagent:
            agents = self.project(cwd) / "subagents" / sid
            write(agents / "agent-general-purpose-call_1.jsonl", jsonl(records(sid, cwd, when)))
            write(agents / "agent-general-purpose-call_1.meta.json", json.dumps({"parent": sid}))
            s.artifacts.append(agents)
        if output:
            write(out, "1\n2\n3\n" * 1000)
            s.outputs.append(out)
            s.artifacts.append(out)
        s.shared = self.shared(sid, cwd)
        return s

    def extras(self, sid: str, cwd: str, chats: Path) -> list[Path]:
        status = {"schema_version": 1, "pid": 1, "session_id": sid, "work_dir": cwd}
        return [
            write(chats / f"{sid}.runtime.json", json.dumps(status)),
            write(self.home / "file-history" / sid / "d2a04fb71bb4fbcf@v2", "old\n").parent,
            write(self.home / "plans" / f"{sid}.md", "1. do it\n"),
            write(self.runtime / "debug" / f"{sid}.txt", "[DEBUG] started\n"),
        ]

    def shared(self, sid: str, cwd: str) -> list[Path]:
        """The shared files, each now naming `sid` among the others."""
        usage = {"version": 1, "sessionId": sid, "project": cwd, "durationMs": 10}
        with (self.home / "usage_record.jsonl").open("a") as f:
            f.write(json.dumps(usage) + "\n")
        month = self.runtime / "usage" / "token-usage-2026-12.jsonl"
        month.parent.mkdir(parents=True, exist_ok=True)
        with month.open("a") as f:
            f.write(json.dumps({"sessionId": sid, "totalTokens": 15}) + "\n")
        project = self.project(cwd)
        cursor = {"sessionId": sid, "processedOffset": 0, "updatedAt": iso(time.time())}
        write(project / "extract-cursor.json", json.dumps(cursor))
        write(project / "meta.json", json.dumps({"version": 1, "lastDreamSessionId": sid}))
        logs = self.tmp(cwd) / "logs.json"
        prompts = json.loads(logs.read_text()) if logs.exists() else []
        prompts.append({"sessionId": sid, "messageId": 0, "type": "user", "message": "hi"})
        write(logs, json.dumps(prompts))
        return [
            self.home / "usage_record.jsonl",
            month,
            project / "extract-cursor.json",
            project / "meta.json",
            logs,
        ]

    def register(self, sid: str, cwd: str, pid: int, *, started_ms: float, start: str) -> Path:
        """`sessions/<pid>.json` as a running TUI writes it."""
        record = {
            "schemaVersion": 1,
            "pid": pid,
            "procStart": start,
            "pidNs": os.stat("/proc/self/ns/pid").st_ino,
            "sessionId": sid,
            "cwd": cwd,
            "name": "work-f8",
            "startedAt": started_ms,
            "qwenVersion": VERSION,
            "kind": "tui",
        }
        return write(self.home / "sessions" / f"{pid}.json", json.dumps(record, indent=2))

    def writer_lock(self, sid: str, pid: int, start: str) -> Path:
        record = {
            "schema_version": 1,
            "state": "active",
            "session_id": sid,
            "owner_id": str(uuid.uuid4()),
            "pid": pid,
            "process_start_identity": f"linux:{start}",
            "process_kind": "acp",
        }
        locks = self.runtime / "tmp" / "session-writer-locks"
        return write(locks / f"{sid}.lock", json.dumps(record))
