"""The Gemini API (v1beta) as Gemini CLI speaks it, for the mock model server.

Gemini CLI, given `GOOGLE_GEMINI_BASE_URL` and an API key, POSTs
`/v1beta/models/<model>:streamGenerateContent?alt=sse` with the whole
conversation in `contents`, and reads server-sent events (no event names),
each a `GenerateContentResponse`: `candidates[0].content.parts` (text or
`functionCall` parts), `finishReason` on the last, and `usageMetadata`.
Side questions (a session summary, the model router, next-speaker checks)
go to `:generateContent` with the same body and get one such response as
JSON; one that asks for JSON (`responseMimeType` application/json with a
schema: the router's classifier) is answered with the least value that
fits the schema, never by the rules. `:countTokens` gets a count.

A rule's `reply` is a list of parts, each one of:

    {"text": "..."}                          model text
    {"call": "write_file", "args": {...}}    a function call
    {"sleep": 2.0}                           answer that much later

What a request "says" (`latest`) is the text of the last user turn, or,
when that turn answers function calls, `TOOL RESULT <name>: ` and the
response, so a script can answer a tool result apart from the prompt that
asked for the tool. A request with no rule that matches is answered with
a short text, so the agent always finishes its turn.
"""

from __future__ import annotations

import json
import time
from typing import Any

from mockmodel import Protocol as Base
from mockmodel import Request, Response

_JSON = {"Content-Type": "application/json"}
_USAGE = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}


def _parts(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, dict):
        return []
    return [p for p in content.get("parts") or [] if isinstance(p, dict)]


def _result_text(response: Any) -> str:
    if isinstance(response, dict):
        inner = response.get("output", response.get("error", response))
        return inner if isinstance(inner, str) else json.dumps(inner)
    return str(response)


class Protocol(Base):
    def latest(self, request: Request) -> str:
        body = request.body if isinstance(request.body, dict) else {}
        turns = [c for c in body.get("contents") or [] if isinstance(c, dict)]
        for turn in reversed(turns):
            if turn.get("role", "user") != "user":
                continue
            parts = _parts(turn)
            answers = [p["functionResponse"] for p in parts if "functionResponse" in p]
            if answers:
                last = answers[-1] if isinstance(answers[-1], dict) else {}
                name = last.get("name", "?")
                return f"TOOL RESULT {name}: {_result_text(last.get('response'))}"
            return "".join(str(p.get("text", "")) for p in parts)
        return ""

    def handle(self, request: Request) -> Response:
        path = request.path.split("?")[0]
        if request.method == "POST" and path.endswith(":streamGenerateContent"):
            return Response(events=[(None, self._answer(request))])
        if request.method == "POST" and path.endswith(":generateContent"):
            schema = _json_schema(request.body)
            if schema is not None:
                text = json.dumps(_fill(schema))
                return Response(200, _JSON, json.dumps(_response([{"text": text}])).encode())
            return Response(200, _JSON, json.dumps(self._answer(request)).encode())
        if request.method == "POST" and path.endswith(":countTokens"):
            return Response(200, _JSON, json.dumps({"totalTokens": 10}).encode())
        if path.endswith("/models"):
            return Response(200, _JSON, json.dumps({"models": []}).encode())
        return Response(404, _JSON, b'{"error": {"code": 404, "message": "not mocked"}}')

    def _answer(self, request: Request) -> dict[str, Any]:
        reply = self.reply_for(request)
        steps = reply if isinstance(reply, list) else [{"text": "OK."}]
        parts: list[dict[str, Any]] = []
        for step in steps:
            if "sleep" in step:
                time.sleep(float(step["sleep"]))
            elif "call" in step:
                call = {"name": step["call"], "args": step.get("args") or {}}
                parts.append({"functionCall": call})
            else:
                parts.append({"text": str(step.get("text", ""))})
        return _response(parts)


def _response(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": parts},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": _USAGE,
        "modelVersion": "mock-model",
    }


def _json_schema(body: Any) -> dict[str, Any] | None:
    config = body.get("generationConfig") if isinstance(body, dict) else None
    if not isinstance(config, dict) or config.get("responseMimeType") != "application/json":
        return None
    schema = config.get("responseJsonSchema") or config.get("responseSchema") or {}
    return schema if isinstance(schema, dict) else {}


def _fill(schema: dict[str, Any]) -> Any:
    """The least value of a (Gemini or JSON Schema) schema."""
    if schema.get("enum"):
        return schema["enum"][0]
    kind = str(schema.get("type", "object")).lower()
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: _fill(v) for k, v in props.items() if isinstance(v, dict)}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return False
    return "mock"
