"""jsonedit: a settings file read as its agent reads it, and changed by one
splice that leaves every other character where it was."""

from __future__ import annotations

import json

import pytest

from agentkeep.jsonedit import Dialect, JSONTextError, insertion, parse, removal

PLAIN = Dialect("Plain", comments=False, bom=False)
COMMENTED = Dialect("Commented", comments=True, bom=True)

DOCUMENTS = [
    "{}",
    "{}\n",
    '{"a": 1}',
    '{"a":1,"b":[1,2,{"c":null}]}',
    '{\n  "a": 1,\n  "b": {\n    "c": "x"\n  }\n}\n',
    '{\r\n    "a": true,\r\n    "b": "\\u00e9\\"q\\\\"\r\n}\r\n',
    '  {"a": -0.5e+3, "é": "ü", "emoji": "\U0001f600"}  ',
]


@pytest.mark.parametrize("text", DOCUMENTS)
def test_plain_json_means_what_json_means(text: str) -> None:
    doc = parse(text, PLAIN)
    assert doc.root.value == json.loads(text)
    assert doc.text[doc.root.start : doc.root.end] == text.strip()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "the end of the text"),
        ("{", "a member name"),
        ('{"a": 1,}', "a comma before '}'"),
        ("[1,]", "a comma before ']'"),
        ('{"a": NaN}', "'N' where a value belongs"),
        ('{"a": 01}', "',' or '}' expected"),
        ('{"a": "\\x"}', "a string JSON does not allow"),
        ('{"a": "tab\there"}', "a string JSON does not allow"),
        ('{"a": "open}', "a string that never ends"),
        ("{} {}", "more text after the document"),
        ("{'a': 1}", "a member name (in double quotes)"),
        ('{"a" 1}', "':' expected"),
        ("[" * 300 + "]" * 300, "nested deeper than"),
    ],
)
def test_what_no_agent_reads_is_refused_with_where(text: str, why: str) -> None:
    with pytest.raises(JSONTextError, match="line 1, column") as caught:
        parse(text, COMMENTED)
    assert why in str(caught.value)


def test_comments_and_a_byte_order_mark_only_where_the_agent_reads_them() -> None:
    text = '\ufeff{\n  // a "quoted" note\n  "url": "http://x//y /* no */", /* b */ "n": 2\n}'
    doc = parse(text, COMMENTED)
    assert doc.root.value == {"url": "http://x//y /* no */", "n": 2}
    assert [text[s:e] for s, e in doc.comments] == ['// a "quoted" note', "/* b */"]
    with pytest.raises(JSONTextError, match="byte order mark, which Plain cannot read"):
        parse(text, PLAIN)
    with pytest.raises(JSONTextError, match="a comment, which Plain cannot read at line 2"):
        parse(text[1:], PLAIN)
    with pytest.raises(JSONTextError, match="a comment that never ends"):
        parse('{"a": 1} /* open', COMMENTED)
    assert parse('{"a": 1} // to the end', COMMENTED).root.value == {"a": 1}


def test_of_two_equal_keys_the_last_counts_and_is_found() -> None:
    doc = parse('{"a": 1, "a": 2}', PLAIN)
    assert doc.root.value == {"a": 2}
    assert doc.root.repeats("a")
    found = doc.root.member("a")
    assert found is not None and found[0] == 1 and found[1].value.value == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{}", '{\n  "k": {\n    "x": 1\n  }\n}'),
        ('{"a": 1}', '{"a": 1, "k": {"x": 1}}'),
        ('{"a":1,"b":2}', '{"a":1,"b":2,"k":{"x":1}}'),
        ('{"a":1}', '{"a":1,"k":{"x":1}}'),
        ('{\n  "a": 1\n}', '{\n  "a": 1,\n  "k": {\n    "x": 1\n  }\n}'),
        (
            '{\n    "a": 1,\n    "b": 2\n}',
            '{\n    "a": 1,\n    "b": 2,\n    "k": {\n        "x": 1\n    }\n}',
        ),
        ('{\r\n  "a": 1\r\n}', '{\r\n  "a": 1,\r\n  "k": {\r\n    "x": 1\r\n  }\r\n}'),
        ("{ // none yet\n}", '{\n  "k": {\n    "x": 1\n  } // none yet\n}'),
        ('{"a": 1 // last\n}', '{"a": 1, "k": {"x": 1} // last\n}'),
    ],
)
def test_a_new_member_is_written_as_the_others_are(text: str, expected: str) -> None:
    doc = parse(text, COMMENTED)
    splice = insertion(doc, doc.root, "k", {"x": 1})
    changed = splice.apply(text)
    assert changed == expected
    assert parse(changed, COMMENTED).root.value == {**doc.root.value, "k": {"x": 1}}


@pytest.mark.parametrize(
    ("text", "index", "expected"),
    [
        ('{"a": 1, "b": 2, "c": 3}', 1, '{"a": 1, "c": 3}'),
        ('{"a": 1, "b": 2}', 0, '{"b": 2}'),
        ('{\n  "a": 1\n}', 0, "{}"),
        ('{\n  "a": 1,\n  "b": 2\n}', 1, '{\n  "a": 1\n}'),
    ],
)
def test_a_member_taken_out_leaves_valid_json(text: str, index: int, expected: str) -> None:
    doc = parse(text, COMMENTED)
    assert removal(doc, doc.root, index).apply(text) == expected


def test_a_member_is_not_taken_out_with_a_comment_beside_it() -> None:
    doc = parse('{"a": 1, // about b\n "b": 2}', COMMENTED)
    with pytest.raises(JSONTextError, match="a comment stands beside 'b'"):
        removal(doc, doc.root, 1)
