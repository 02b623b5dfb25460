"""A mock model server on 127.0.0.1 that the real agents talk to.

One HTTP server; each agent's wire protocol is a module of its own
(`mock_<protocol>.py`) with a `Protocol` class that turns a request into a
response. What the model "says" comes from a script, a JSON file of rules:

    [{"when": "write a file", "reply": [...]}, ...]

A protocol computes one text for each request (`Protocol.latest`: the last
user message, or a marker for a tool result) and answers with the reply of
the first rule whose `when` occurs in it (a rule without `when` matches
everything); what a reply holds is the protocol's to read (text, tool calls).
Every request is appended to a log (JSON lines: method, path, body) that a
test reads afterwards.

Run inside a network namespace by netns_run.py, so nothing but loopback
exists for the agent it serves.
"""

from __future__ import annotations

import importlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PORT = 18765  # inside a fresh network namespace every port is free


@dataclass
class Response:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    # A body, or server-sent events (each a (event name or None, JSON data) pair).
    body: bytes = b""
    events: list[tuple[str | None, Any]] | None = None


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class Protocol:
    """One agent's wire protocol. Subclasses answer requests."""

    def __init__(self, rules: list[dict[str, Any]]) -> None:
        self.rules = rules

    def latest(self, request: Request) -> str:
        raise NotImplementedError

    def reply_for(self, request: Request) -> Any:
        latest = self.latest(request)
        for rule in self.rules:
            when = rule.get("when")
            if when is None or when in latest:
                return rule.get("reply")
        return None

    def handle(self, request: Request) -> Response:
        raise NotImplementedError


def load_protocol(name: str, rules: list[dict[str, Any]]) -> Protocol:
    module = importlib.import_module(f"mock_{name}")
    protocol: Protocol = module.Protocol(rules)
    return protocol


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return  # the request log is the record

    def _request(self) -> Request:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        return Request(self.command, self.path, dict(self.headers.items()), body)

    def _serve(self) -> None:
        request = self._request()
        try:
            response = self.server.protocol.handle(request)
        except Exception as exc:  # a bug in a protocol: answer, and record it
            response = Response(500, body=f"mock error: {exc!r}".encode())
        self.server.record(request, response)
        if response.events is None:
            self.send_response(response.status)
            for key, value in response.headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            self.wfile.write(response.body)
            return
        self.send_response(response.status)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        for key, value in response.headers.items():
            self.send_header(key, value)
        self.end_headers()
        for event, data in response.events:
            chunk = f"event: {event}\n" if event else ""
            text = data if isinstance(data, str) else json.dumps(data)
            chunk += f"data: {text}\n\n"
            self.wfile.write(chunk.encode())
            self.wfile.flush()
        self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _serve


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, protocol: Protocol, log: Path) -> None:
        super().__init__(("127.0.0.1", PORT), _Handler)
        self.protocol = protocol
        self.log = log
        self._lock = threading.Lock()

    def record(self, request: Request, response: Response) -> None:
        line = {
            "method": request.method,
            "path": request.path,
            "body": request.body,
            "status": response.status,
        }
        with self._lock, self.log.open("a") as f:
            f.write(json.dumps(line) + "\n")


def serve(protocol_name: str, script: Path, log: Path) -> ThreadingHTTPServer:
    """Start serving on 127.0.0.1:PORT in a thread; the caller stops it."""
    rules = json.loads(script.read_text()) if script.exists() else []
    server = _Server(load_protocol(protocol_name, rules), log)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def requests(log: Path) -> list[dict[str, Any]]:
    """What the agent asked, in order."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line]
