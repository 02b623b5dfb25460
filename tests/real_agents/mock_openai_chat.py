"""The OpenAI chat-completions wire protocol, streamed (what opencode's
bundled `@ai-sdk/openai-compatible` provider speaks).

    POST /v1/chat/completions {"model", "messages", "stream": true, "tools"}

is answered with server-sent `chat.completion.chunk` events and a final
`[DONE]`. A rule's reply is one step or a list of steps, each either

    {"text": "..."}                         the assistant says this
    {"tool": "<name>", "args": {...}}       the assistant calls a tool

(several tool steps in one reply are parallel calls; a request that offers
no tools, such as opencode's title generator, gets only the text steps,
else "ok"). The text a rule's
`when` is looked for in is the last message's: a user's words, or for a
tool's result `TOOL RESULT <tool name>: <output>`, so a script can answer a
tool's result differently from the prompt that asked for it.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from mockmodel import Protocol as Base
from mockmodel import Request, Response

_calls = itertools.count(1)


def _text(content: object) -> str:
    """A message's content as text (a string, or a list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return ""


def _tool_name(messages: list[dict[str, Any]], call_id: object) -> str:
    for message in messages:
        for call in message.get("tool_calls") or ():
            if call.get("id") == call_id:
                return str(call.get("function", {}).get("name", "?"))
    return "?"


def _steps(reply: Any) -> list[dict[str, Any]]:
    if reply is None:
        return [{"text": "ok"}]
    return reply if isinstance(reply, list) else [reply]


class Protocol(Base):
    def latest(self, request: Request) -> str:
        body = request.body if isinstance(request.body, dict) else {}
        messages = body.get("messages") or []
        if not messages:
            return ""
        last = messages[-1]
        if last.get("role") == "tool":
            name = _tool_name(messages, last.get("tool_call_id"))
            return f"TOOL RESULT {name}: {_text(last.get('content'))}"
        return _text(last.get("content"))

    def handle(self, request: Request) -> Response:
        if request.method == "GET" and request.path.rstrip("/").endswith("/models"):
            body = {"object": "list", "data": [{"id": "mock-model", "object": "model"}]}
            return Response(body=json.dumps(body).encode(), headers=_JSON)
        if request.method != "POST" or not request.path.endswith("/chat/completions"):
            return Response(404, body=b'{"error": {"message": "not here"}}', headers=_JSON)
        body = request.body if isinstance(request.body, dict) else {}
        model = str(body.get("model", "mock-model"))
        steps = _steps(self.reply_for(request))
        if not body.get("tools"):
            steps = [s for s in steps if "tool" not in s] or [{"text": "ok"}]
        chunks = _chunks(model, steps)
        if not body.get("stream"):
            return Response(body=json.dumps(_whole(model, steps)).encode(), headers=_JSON)
        return Response(events=[(None, c) for c in chunks] + [(None, "[DONE]")])


_JSON = {"Content-Type": "application/json"}


def _base(model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }


def _chunks(model: str, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def delta(d: dict[str, Any], finish: str | None = None) -> None:
        out.append({**_base(model), "choices": [{"index": 0, "delta": d, "finish_reason": finish}]})

    delta({"role": "assistant", "content": ""})
    calls = 0
    for step in steps:
        if "tool" in step:
            call = {
                "index": calls,
                "id": f"call_mock_{next(_calls)}",
                "type": "function",
                "function": {"name": step["tool"], "arguments": json.dumps(step.get("args", {}))},
            }
            delta({"tool_calls": [call]})
            calls += 1
        else:
            delta({"content": str(step.get("text", ""))})
    delta({}, "tool_calls" if calls else "stop")
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    out.append({**_base(model), "choices": [], "usage": usage})
    return out


def _whole(model: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    text = "".join(str(s.get("text", "")) for s in steps if "tool" not in s)
    calls = [
        {
            "id": f"call_mock_{next(_calls)}",
            "type": "function",
            "function": {"name": s["tool"], "arguments": json.dumps(s.get("args", {}))},
        }
        for s in steps
        if "tool" in s
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
