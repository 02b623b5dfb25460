"""The OpenAI Responses API as Codex CLI speaks it (a custom model provider
with `wire_api = "responses"`), for the mock model server.

Codex POSTs `/v1/responses` with `stream: true` and the whole conversation
in `input`; the answer is server-sent events: `response.created`, for each
output item `response.output_item.added` and `response.output_item.done`
(text also as `response.output_text.delta`), then `response.completed` with
the response id and its usage. Anything else it asks (`/v1/models`) gets an
empty list.

A rule's `reply` is a list of steps, each one output item:

    {"text": "..."}                        an assistant message
    {"call": "exec_command", "arguments": {...}}   a function call
    {"custom": "apply_patch", "input": "..."}      a freeform tool call

What a request "says" (`latest`) is the text of the last user message, or,
when the last input item is a tool's output, `TOOL OUTPUT <call name>: ` and
that output, so a script can answer a tool result differently from the
prompt that asked for the tool.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from mockmodel import Protocol as Base
from mockmodel import Request, Response

_OUTPUTS = ("function_call_output", "custom_tool_call_output")
_CALLS = ("function_call", "custom_tool_call")
_counter = itertools.count(1)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        return str(output.get("content") or output.get("output") or json.dumps(output))
    return _text(output)


class Protocol(Base):
    def latest(self, request: Request) -> str:
        body = request.body if isinstance(request.body, dict) else {}
        items = [i for i in body.get("input") or [] if isinstance(i, dict)]
        if not items:
            return ""
        last = items[-1]
        if last.get("type") in _OUTPUTS:
            names = {i.get("call_id"): i.get("name") for i in items if i.get("type") in _CALLS}
            name = names.get(last.get("call_id"), "?")
            return f"TOOL OUTPUT {name}: {_output_text(last.get('output'))}"
        for item in reversed(items):
            if item.get("role") == "user":
                return _text(item.get("content"))
        return ""

    def handle(self, request: Request) -> Response:
        path = request.path.split("?")[0]
        if request.method == "POST" and path.endswith("/responses"):
            return self._respond(request)
        if path.endswith("/models"):
            body = json.dumps({"object": "list", "data": [], "models": []})
            return Response(200, {"Content-Type": "application/json"}, body.encode())
        return Response(404, body=b'{"error": {"message": "not mocked"}}')

    def _respond(self, request: Request) -> Response:
        steps = self.reply_for(request)
        if steps is None:
            steps = [{"text": "ok"}]
        n = next(_counter)
        rid = f"resp_mock_{n}"
        events: list[tuple[str | None, Any]] = [
            ("response.created", {"type": "response.created", "response": {"id": rid}})
        ]
        for index, step in enumerate(steps):
            item = _item(step, f"{n}_{index}")
            added = {"type": "response.output_item.added", "output_index": index, "item": item}
            events.append(("response.output_item.added", added))
            if item["type"] == "message":
                delta = {
                    "type": "response.output_text.delta",
                    "item_id": item["id"],
                    "output_index": index,
                    "content_index": 0,
                    "delta": item["content"][0]["text"],
                }
                events.append(("response.output_text.delta", delta))
            done = {"type": "response.output_item.done", "output_index": index, "item": item}
            events.append(("response.output_item.done", done))
        usage = {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        }
        completed = {
            "type": "response.completed",
            "response": {"id": rid, "usage": usage, "output": []},
        }
        events.append(("response.completed", completed))
        return Response(200, events=events)


def _item(step: dict[str, Any], suffix: str) -> dict[str, Any]:
    if "text" in step:
        return {
            "type": "message",
            "role": "assistant",
            "id": f"msg_{suffix}",
            "status": "completed",
            "content": [{"type": "output_text", "text": step["text"], "annotations": []}],
        }
    if "call" in step:
        item = {
            "type": "function_call",
            "id": f"fc_{suffix}",
            "call_id": f"call_{suffix}",
            "name": step["call"],
            "arguments": json.dumps(step.get("arguments", {})),
            "status": "completed",
        }
        if "namespace" in step:
            item["namespace"] = step["namespace"]
        return item
    if "custom" in step:
        return {
            "type": "custom_tool_call",
            "id": f"ctc_{suffix}",
            "call_id": f"call_{suffix}",
            "name": step["custom"],
            "input": step.get("input", ""),
            "status": "completed",
        }
    raise ValueError(f"a reply step must be text, call or custom: {step!r}")
