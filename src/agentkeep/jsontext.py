"""JSON as text: documents encoded once and passed along (the index writes
each session as `ls` prints it, the daemon sends that text, the CLI prints
it undecoded), and the CLI's indented output. A socket answer is one line,
so the text travels *folded*, its line breaks written as tabs: JSON escapes
both inside strings, so folding is exact, and a folded text is still valid
JSON to any other client.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Any

# Real newlines in encoder output come only from separators, so ",\n    "
# before a "{" can only stand between two objects of the list: within an
# object a key, a string, follows it.
_ITEM = ",\n    "
_BETWEEN = "},\n    {"
_SCALARS = frozenset({str, int, float, bool, type(None)})
_NOTHING = object()


class JSONText:
    """A JSON document already encoded on one line: sent as it is. Given
    whole, or as the parts it is written in (read once, in order), which the
    daemon sends as they come, so that a big answer is never held whole."""

    def __init__(self, text: str | Iterable[str]) -> None:
        self._parts: Iterable[str] = (text,) if isinstance(text, str) else text

    def parts(self) -> Iterator[str]:
        """The document's text, part after part (once: parts may be read
        from the index as they are asked for)."""
        return iter(self._parts)

    @property
    def text(self) -> str:
        """The whole document."""
        return "".join(self.parts())


def indented(doc: Any) -> str:
    """Exactly `json.dumps(doc, indent=2)`; fast for a list of non-empty
    objects whose values are all scalars, which the C encoder can write."""
    if not isinstance(doc, list) or not doc or not all(doc):
        return json.dumps(doc, indent=2)
    try:
        types = set(map(type, chain.from_iterable(map(dict.values, doc))))
    except TypeError:  # an item that is not an object
        return json.dumps(doc, indent=2)
    if not types <= _SCALARS:
        return json.dumps(doc, indent=2)
    flat = json.dumps(doc, separators=(_ITEM, ": "))
    return "[\n  {\n    " + flat[2:-2].replace(_BETWEEN, "\n  },\n  {\n    ") + "\n  }\n]"


def indented_parts(doc: Any) -> Iterator[str]:
    """`indented(doc)` in parts, which join to exactly that: an object's
    members one by one, and a list among them an item at a time, so that a
    big report is written as it goes, never held as one string. A member's
    value may be an iterator, written as the list of its items (read once)."""
    if not isinstance(doc, dict) or not doc or not all(isinstance(k, str) for k in doc):
        yield indented(doc)
        return
    yield "{"
    for n, (key, value) in enumerate(doc.items()):
        head = ("," if n else "") + "\n  " + json.dumps(key) + ": "
        items = iter(value) if isinstance(value, list | Iterator) else None
        first = next(items, _NOTHING) if items is not None else _NOTHING
        if first is _NOTHING:
            whole = [] if isinstance(value, Iterator) else value
            yield head + json.dumps(whole, indent=2).replace("\n", "\n  ")
            continue
        yield head + "["
        assert items is not None
        for m, item in enumerate(chain((first,), items)):
            yield ("," if m else "") + "\n    " + json.dumps(item, indent=2).replace("\n", "\n    ")
        yield "\n  ]"
    yield "\n}"


def folded_parts(parts: Iterable[str]) -> Iterator[str]:
    """Indented parts (indented_parts()) folded, as a socket answer sends them."""
    return (part.replace("\n", "\t") for part in parts)


def folded_item(doc: Any) -> str:
    """`doc` as `json.dumps(items, indent=2)` writes an item of a list, folded."""
    return ("  " + json.dumps(doc, indent=2).replace("\n", "\n  ")).replace("\n", "\t")


def folded_list(batches: Iterable[list[str]]) -> Iterator[str]:
    """The list of the items in `batches` (each folded_item() or written the
    same way), folded, a part per batch: joined, the parts are the list."""
    opening = "[\t"
    for items in batches:
        if items:
            yield opening + ",\t".join(items)
            opening = ",\t"
    yield "[]" if opening == "[\t" else "\t]"


def unfolded(text: str) -> str:
    """`json.dumps(json.loads(text), indent=2)`: a folded list unfolded, any
    other JSON text decoded and indented."""
    if text == "[]" or (text.startswith("[\t") and text.endswith("\t]")):
        return text.replace("\t", "\n")
    return indented(json.loads(text))
