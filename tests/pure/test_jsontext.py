"""JSON text passed through: the CLI's indented output is byte for byte
`json.dumps(doc, indent=2)`, a folded text unfolds to exactly that and
reads as the same document, and an answer the daemon sends as text reaches
the CLI as it was sent."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentkeep import client
from agentkeep.jsontext import (
    JSONText,
    folded_item,
    folded_list,
    folded_parts,
    indented,
    indented_parts,
    unfolded,
)
from agentkeep.protocol import encode

ROW = {
    "agent": "claude",
    "id": "0b7c",
    "workspace": "/home/u/proj",
    "parent": None,
    "last_activity": "2026-10-01T12:00:00Z",
    "bytes": 48213,
    "artifacts": 7,
    "state": "idle",
}
# Strings that look like the separators the fast path replaces.
TRICKY = [
    "},\n    {",
    '"},\\n    {"',
    "}, {",
    "ü ☃ \u2028 \x00 \x7f",
    '\\"',
    "",
]


@pytest.mark.parametrize(
    "doc",
    [
        [ROW],
        [ROW, {**ROW, "id": "second", "parent": "0b7c"}] * 3,
        [{**ROW, "workspace": text} for text in TRICKY],
        [{"a": 1.5, "b": True, "c": False, "d": -0.0, "e": 10**30}],
        [{"only": "one key"}, {"x": None}],
        [],
        [{}],
        [ROW, {}],
        [{"nested": {"a": 1, "b": [1, 2]}}],
        [{"list": []}],
        [ROW, "not an object", 3],
        [[1, 2], [3]],
        {"by": "agent", "groups": [{"key": "claude", "bytes": 1}]},
        "text",
        None,
    ],
)
def test_indented_is_json_dumps_indent_2(doc: Any) -> None:
    assert indented(doc) == json.dumps(doc, indent=2)
    assert "".join(indented_parts(doc)) == json.dumps(doc, indent=2)


# A prune's report, as core.prune gives it, with strings that look like
# the line breaks indented_parts() indents.
REPORT = {
    "cutoff": "2026-10-01T12:00:00Z",
    "cutoffs": {"claude": "2026-10-01T12:00:00Z", "codex": "2026-09-01T00:00:00Z"},
    "dry_run": False,
    "removed": [
        {
            "agent": "claude",
            "id": f"s{n}",
            "bytes": n,
            "last_activity": None,
            "paths": [f"/h/{text}/{n}" for text in TRICKY],
        }
        for n in range(3)
    ],
    "kept": [{"agent": "codex", "id": "k", "reason": "live", "detail": "pid 4242\n  }"}],
    "failed": [],
    "residual": [{"agent": "claude", "id": "s1", "path": "/h/\n    x"}],
    "trash": None,
    "nested": {"a": [], "b": {}, "c": [[], {}, [1, [2]]]},
}


@pytest.mark.parametrize(
    "doc",
    [REPORT, {"removed": []}, {"only": [ROW]}, {1: "a key that is no string"}, {}, {"": [1]}],
)
def test_indented_parts_join_to_json_dumps_indent_2(doc: Any) -> None:
    parts = list(indented_parts(doc))
    assert "".join(parts) == json.dumps(doc, indent=2)


@pytest.mark.parametrize("doc", [REPORT, {"removed": []}, {"a": [ROW], "b": [[]]}])
def test_a_member_given_as_an_iterator_is_written_as_its_list(doc: Any) -> None:
    lazy = {k: iter(v) if isinstance(v, list) else v for k, v in doc.items()}
    assert "".join(indented_parts(lazy)) == json.dumps(doc, indent=2)


def test_folded_parts_are_one_line_that_reads_as_the_document() -> None:
    line = encode(
        {"jsonrpc": "2.0", "id": 3, "result": JSONText(folded_parts(indented_parts(REPORT)))}
    )
    assert line.count(b"\n") == 1
    assert json.loads(line)["result"] == REPORT


def test_a_long_list_in_a_report_is_written_an_item_at_a_time() -> None:
    doc = {**REPORT, "removed": REPORT["removed"] * 1000}
    parts = list(indented_parts(doc))
    longest = max(map(len, parts))
    assert len(parts) > 3000
    assert longest < 1000, f"a part of {longest} characters"


def test_a_result_sent_as_text_reads_back_as_the_document() -> None:
    rows = [ROW, {**ROW, "workspace": "\n".join(TRICKY)}]
    text = JSONText(json.dumps(rows, separators=(",", ":"), ensure_ascii=False))

    line = encode({"jsonrpc": "2.0", "id": 7, "result": text})

    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {"jsonrpc": "2.0", "id": 7, "result": rows}
    assert json.loads(line) == json.loads(encode({"jsonrpc": "2.0", "id": 7, "result": rows}))


LISTS = [
    [],
    [ROW],
    [ROW, {**ROW, "id": "second", "parent": "0b7c"}] * 3,
    [{**ROW, "workspace": text} for text in TRICKY],
    [{"nested": {"a": [1, {"b": None}]}, "tab": "\t"}],
]


@pytest.mark.parametrize("docs", LISTS)
def test_a_folded_list_is_one_line_and_unfolds_to_json_dumps_indent_2(docs: Any) -> None:
    text = "".join(folded_list([[folded_item(d) for d in docs]]))

    assert "\n" not in text
    assert json.loads(text) == docs
    assert unfolded(text) == json.dumps(docs, indent=2)


@pytest.mark.parametrize("docs", LISTS)
def test_text_that_is_not_folded_is_decoded_and_indented(docs: Any) -> None:
    assert unfolded(json.dumps(docs)) == json.dumps(docs, indent=2)


@pytest.mark.parametrize("docs", LISTS)
def test_the_client_takes_a_folded_answer_as_it_was_sent(docs: Any) -> None:
    text = "".join(folded_list([[folded_item(d) for d in docs]]))
    line = encode({"jsonrpc": "2.0", "id": 12, "result": JSONText(text)})

    assert client._result_text(line.rstrip(b"\n"), 12) == text
    assert client._result(line) == docs
    # Any other answer is decoded and encoded again.
    plain = encode({"jsonrpc": "2.0", "id": 12, "result": docs}).rstrip(b"\n")
    assert json.loads(client._result_text(plain, 12)) == docs
    assert json.loads(client._result_text(line.rstrip(b"\n"), 13)) == docs
