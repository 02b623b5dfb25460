"""The Anthropic Messages API as Claude Code speaks it, for the mock model.

Claude Code sends `POST /v1/messages?beta=true` with `stream: true` and reads
server-sent events (message_start, content_block_start / _delta / _stop,
message_delta, message_stop); its side requests are answered too:
`/v1/messages/count_tokens`, the `max_tokens: 1` quota and key probes, and the
small calls without tools it makes for a title or a topic (answered with a
short text, whatever the rules say, so a rule's tool call never lands in one).

A rule's reply is a list of content blocks:

    {"text": "..."}                               a text block
    {"tool": "Write", "input": {...}}             a tool_use block

What a request is matched on (`latest`): the last user message's text; when
that message carries tool results, `tool_result <ToolName> <result text>` for
each, so a rule can answer what a tool gave back. A subagent's conversation
starts with the prompt its parent gave the Task/Agent tool, so its rules
match on that.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from mockmodel import Protocol as BaseProtocol
from mockmodel import Request, Response

MODEL_FALLBACK = "claude-sonnet-4-5"
_ids = itertools.count(1)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(_text_of(block) for block in content)
    if isinstance(content, dict):
        if content.get("type") == "text":
            return str(content.get("text", ""))
        if content.get("type") == "tool_result":
            return _text_of(content.get("content", ""))
    return ""


def _tool_names(messages: list[Any]) -> dict[str, str]:
    """tool_use id -> tool name, over the assistant messages."""
    names: dict[str, str] = {}
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                names[str(block.get("id"))] = str(block.get("name"))
    return names


class Protocol(BaseProtocol):
    def latest(self, request: Request) -> str:
        body = request.body if isinstance(request.body, dict) else {}
        messages = body.get("messages") or []
        users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        if not users:
            return ""
        content = users[-1].get("content")
        blocks = content if isinstance(content, list) else []
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            names = _tool_names(messages)
            return " ".join(
                f"tool_result {names.get(str(b.get('tool_use_id')), '?')} {_text_of(b)}"
                for b in results
            )
        return _text_of(content)

    def handle(self, request: Request) -> Response:
        path = request.path.split("?", 1)[0]
        body = request.body if isinstance(request.body, dict) else {}
        if request.method != "POST":
            return _json(404, {"type": "error", "error": {"type": "not_found_error"}})
        if path.endswith("/count_tokens"):
            return _json(200, {"input_tokens": 1 + len(json.dumps(body)) // 4})
        if path.endswith("/v1/messages"):
            return self._message(body, request)
        return _json(404, {"type": "error", "error": {"type": "not_found_error"}})

    def _message(self, body: dict[str, Any], request: Request) -> Response:
        if self._side_request(body):
            blocks: list[dict[str, Any]] = [{"type": "text", "text": "A mock session"}]
        else:
            reply = self.reply_for(request)
            blocks = _blocks(reply if isinstance(reply, list) else [{"text": "ok"}])
        model = str(body.get("model") or MODEL_FALLBACK)
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        message = {
            "id": f"msg_mock{next(_ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
        if not body.get("stream"):
            return _json(200, message)
        return Response(events=_events(message))

    @staticmethod
    def _side_request(body: dict[str, Any]) -> bool:
        """A probe (max_tokens 1) or a call without tools (a title, a topic,
        a summary): never the conversation the rules script."""
        if body.get("max_tokens") == 1:
            return True
        return not body.get("tools")


def _blocks(reply: list[dict[str, Any]]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for item in reply:
        if "tool" in item:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_mock{next(_ids):06d}",
                    "name": item["tool"],
                    "input": item.get("input", {}),
                }
            )
        else:
            blocks.append({"type": "text", "text": str(item.get("text", ""))})
    return blocks or [{"type": "text", "text": "ok"}]


def _events(message: dict[str, Any]) -> list[tuple[str | None, Any]]:
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            opening = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            opening = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opening},
            ),
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]
    events += [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return events


def _json(status: int, value: Any) -> Response:
    return Response(status, {"Content-Type": "application/json"}, json.dumps(value).encode())
