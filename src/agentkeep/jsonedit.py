"""A JSON document as the text a person wrote: read with the place of every
value, and changed by one splice that leaves every other character (key
order, indentation, comments, unknown settings) as it was. The text means
what the agent reads: `Dialect` says whether comments and a leading byte
order mark are allowed; the rest is JSON's, and of two equal keys the last
counts, as in JavaScript's JSON.parse.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_BOM = "\ufeff"
# Settings files are shallow: deeper is refused, never a RecursionError.
MAX_DEPTH = 200
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_LITERALS = {"true": True, "false": False, "null": None}
_WHITESPACE = " \t\n\r"


@dataclass(frozen=True)
class Dialect:
    """What the agent reading the file accepts besides plain JSON, and its
    name for messages (`comments` need an agent that strips them)."""

    reader: str
    comments: bool = False
    bom: bool = False


class JSONTextError(ValueError):
    """The text is no document the agent can read: says what and where."""


@dataclass
class Member:
    """An object's member: its key, where the key's text starts, its value."""

    key: str
    key_start: int
    value: Node


@dataclass
class Node:
    """A value and where its text stands: [start, end). An object's members
    are in the order written (a repeated key twice, the last one counting)."""

    start: int
    end: int
    value: Any
    members: list[Member] | None = None

    def member(self, key: str) -> tuple[int, Member] | None:
        """The member that counts for `key` (the last of that name), and its place."""
        found = None
        for n, m in enumerate(self.members or ()):
            if m.key == key:
                found = (n, m)
        return found

    def repeats(self, key: str) -> bool:
        """Whether `key` is written more than once."""
        return sum(m.key == key for m in self.members or ()) > 1


@dataclass
class Document:
    """A parsed text, its root value and where its comments stand."""

    text: str
    root: Node
    # Where each comment stands: a change never takes one away.
    comments: list[tuple[int, int]] = field(default_factory=list)

    def has_comment(self, start: int, end: int) -> bool:
        """Whether a comment stands in text[start:end]."""
        return any(s < end and start < e for s, e in self.comments)

    def newline(self) -> str:
        """The text's line break."""
        return "\r\n" if "\r\n" in self.text else "\n"


@dataclass(frozen=True)
class Splice:
    """Replace text[start:end] with `new`."""

    start: int
    end: int
    new: str

    def apply(self, text: str) -> str:
        """The text with the splice made."""
        return text[: self.start] + self.new + text[self.end :]


def parse(text: str, dialect: Dialect) -> Document:
    """The document in `text`, read as the agent reads it; JSONTextError
    saying what stops it otherwise."""
    return _Parser(text, dialect).document()


class _Parser:
    def __init__(self, text: str, dialect: Dialect) -> None:
        self.text = text
        self.dialect = dialect
        self.comments: list[tuple[int, int]] = []

    def fail(self, at: int, what: str) -> JSONTextError:
        """The error saying `what`, at the line and column of `at`."""
        line = self.text.count("\n", 0, at) + 1
        column = at - (self.text.rfind("\n", 0, at) + 1) + 1
        return JSONTextError(f"{what} at line {line}, column {column}")

    def document(self) -> Document:
        """The whole text as one document."""
        start = 0
        if self.text.startswith(_BOM):
            if not self.dialect.bom:
                raise JSONTextError(
                    f"it starts with a byte order mark, which {self.dialect.reader} cannot read"
                )
            start = 1
        root = self.value(self.skip(start), 0)
        end = self.skip(root.end)
        if end < len(self.text):
            raise self.fail(end, "more text after the document")
        return Document(self.text, root, self.comments)

    def skip(self, i: int) -> int:
        """Past whitespace (and comments, where the dialect has them)."""
        text = self.text
        while i < len(text):
            if text[i] in _WHITESPACE:
                i += 1
            elif text.startswith("//", i) or text.startswith("/*", i):
                if not self.dialect.comments:
                    raise self.fail(i, f"a comment, which {self.dialect.reader} cannot read")
                line = text.startswith("//", i)
                close = text.find("\n" if line else "*/", i + 2)
                if close < 0 and not line:
                    raise self.fail(i, "a comment that never ends")
                end = len(text) if close < 0 else close + (0 if line else 2)
                self.comments.append((i, end))
                i = end
            else:
                break
        return i

    def value(self, i: int, depth: int) -> Node:
        """The value starting at `i`."""
        if depth > MAX_DEPTH:
            raise self.fail(i, f"values nested deeper than {MAX_DEPTH}")
        if i >= len(self.text):
            raise self.fail(i, "the end of the text where a value belongs")
        c = self.text[i]
        if c == "{":
            return self.object(i, depth)
        if c == "[":
            return self.array(i, depth)
        if c == '"':
            return self.string(i)
        for word, literal in _LITERALS.items():
            if self.text.startswith(word, i):
                return Node(i, i + len(word), literal)
        number = _NUMBER.match(self.text, i)
        if number is None:
            raise self.fail(i, f"{self.text[i]!r} where a value belongs")
        return Node(i, number.end(), json.loads(number[0]))

    def string(self, i: int) -> Node:
        """The string starting at `i`."""
        j = i + 1
        while True:
            j = self._string_end(i, j)
            if self.text[j] == '"':
                break
            j += 2  # a backslash and what it escapes
        try:
            return Node(i, j + 1, json.loads(self.text[i : j + 1]))
        except ValueError as exc:  # a bad escape, a control character
            why = exc.args[0].split(":")[0]
            raise self.fail(i, f"a string JSON does not allow ({why})") from None

    def _string_end(self, start: int, j: int) -> int:
        """The next quote or backslash from j on."""
        quote, backslash = self.text.find('"', j), self.text.find("\\", j)
        if quote < 0:
            raise self.fail(start, "a string that never ends")
        return quote if backslash < 0 or quote < backslash else backslash

    def object(self, i: int, depth: int) -> Node:
        """The object starting at `i`."""
        members: list[Member] = []
        j = self.skip(i + 1)
        if self.text.startswith("}", j):
            return Node(i, j + 1, {}, members)
        while True:
            if not self.text.startswith('"', j):
                raise self.fail(j, "a member name (in double quotes) expected")
            key = self.string(j)
            colon = self.skip(key.end)
            if not self.text.startswith(":", colon):
                raise self.fail(colon, "':' expected after a member name")
            value = self.value(self.skip(colon + 1), depth + 1)
            members.append(Member(key.value, j, value))
            j = self.skip(value.end)
            if self.text.startswith("}", j):
                # Of two equal keys the last counts, as in JSON.parse.
                return Node(i, j + 1, {m.key: m.value.value for m in members}, members)
            if not self.text.startswith(",", j):
                raise self.fail(j, "',' or '}' expected")
            j = self.skip(j + 1)
            if self.text.startswith("}", j):
                raise self.fail(j, "a comma before '}'")

    def array(self, i: int, depth: int) -> Node:
        """The array starting at `i`."""
        items: list[Any] = []
        j = self.skip(i + 1)
        if self.text.startswith("]", j):
            return Node(i, j + 1, items)
        while True:
            item = self.value(j, depth + 1)
            items.append(item.value)
            j = self.skip(item.end)
            if self.text.startswith("]", j):
                return Node(i, j + 1, items)
            if not self.text.startswith(",", j):
                raise self.fail(j, "',' or ']' expected")
            j = self.skip(j + 1)
            if self.text.startswith("]", j):
                raise self.fail(j, "a comma before ']'")


# -- changes ------------------------------------------------------------------
def insertion(doc: Document, obj: Node, key: str, value: Any) -> Splice:
    """A new last member `key` of the object `obj`, written as the object's
    other members are (on its own line at their indentation, or inline),
    `value` as JSON laid out the same way."""
    assert obj.members is not None
    text, nl = doc.text, doc.newline()
    if not obj.members:
        inner = text[obj.start + 1 : obj.end - 1]
        indent = _line_indent(text, obj.start)
        if obj is doc.root or nl in inner:
            child = indent + "  "
            member = _member(key, value, ": ", child, "  ", nl)
            if inner.strip(_WHITESPACE):  # comments in it stay, after the member
                return Splice(obj.start + 1, obj.start + 1, nl + child + member)
            return Splice(obj.start + 1, obj.end - 1, nl + child + member + nl + indent)
        member = _member(key, value, ": ", None, "", nl)
        return Splice(obj.start + 1, obj.start + 1, member)
    last = obj.members[-1]
    key_end = _key_end(text, last.key_start)
    colon = text[key_end : last.value.start]
    if colon.strip(_WHITESPACE) != ":":
        colon = ": "
    before_last = obj.members[-2].value.end if len(obj.members) > 1 else obj.start + 1
    gap = text[before_last : last.key_start]
    if len(obj.members) > 1 and gap.strip(_WHITESPACE) == ",":
        sep = gap
    elif nl in gap:
        sep = "," + nl + _line_indent(text, last.key_start)
    else:
        sep = "," if colon == ":" else ", "  # compact as the member before it
    inside = _line_indent(text, last.key_start) if nl in sep else None
    outside = _line_indent(text, obj.start)
    unit = "  "
    if inside is not None and inside.startswith(outside) and len(inside) > len(outside):
        unit = inside[len(outside) :]
    at = last.value.end
    return Splice(at, at, sep + _member(key, value, colon, inside, unit, nl))


def removal(doc: Document, obj: Node, index: int) -> Splice:
    """Take out the member at `index` of `obj` with one comma beside it.
    JSONTextError when a comment stands in what would go."""
    assert obj.members is not None
    members = obj.members
    m = members[index]
    if index > 0:
        start, end = members[index - 1].value.end, m.value.end
    elif len(members) > 1:
        start, end = m.key_start, members[1].key_start
    else:
        start, end = obj.start + 1, obj.end - 1
    if doc.has_comment(start, end):
        raise JSONTextError(f"a comment stands beside {m.key!r}: taking it out would lose it")
    return Splice(start, end, "")


def _member(key: str, value: Any, colon: str, indent: str | None, unit: str, nl: str) -> str:
    """`"key": value`; with `indent` (the member's own), an object value is
    laid out over lines, each level `unit` further in."""
    if indent is None or not isinstance(value, dict) or not value:
        body = json.dumps(value, separators=(", ", colon), ensure_ascii=False)
    else:
        body = json.dumps(value, indent=unit, ensure_ascii=False).replace("\n", nl + indent)
    return json.dumps(key, ensure_ascii=False) + colon + body


def _key_end(text: str, key_start: int) -> int:
    j = key_start + 1
    while text[j] != '"':
        j += 2 if text[j] == "\\" else 1
    return j + 1


def _line_indent(text: str, at: int) -> str:
    """The whitespace that opens the line `at` is on."""
    line = text.rfind("\n", 0, at) + 1
    end = line
    while end < at and text[end] in " \t":
        end += 1
    return text[line:end]
