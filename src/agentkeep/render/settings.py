"""An agent's own setting changed by `adopt` (or put back by `--undo`), as
a person reads it: the file, then the change as a diff-like line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentkeep.render.table import YELLOW, Out, printable

if TYPE_CHECKING:
    from agentkeep.adopt import Change


def change(out: Out, c: Change) -> None:
    """What adopt does (said before it is done)."""
    out.line(f"{c.setting.agent}: {printable(str(c.file))}")
    name = c.setting.name
    if c.changes:
        out.line(f"  {name}: {c.before.words()} -> {c.after.words()}")
    elif c.undo:
        out.line(f"  {name}: {c.before.words()}, as before adopt")
    else:
        out.line(f"  {name}: {c.before.words()} (already leaves sessions to agentkeep)")


def changed(out: Out, c: Change, dry_run: bool, note: str | None) -> None:
    """What came of it."""
    product, agent = c.setting.product, c.setting.agent
    if dry_run:
        out.say("dry run: nothing written" if c.changes else "dry run: nothing to write")
    elif c.undo:
        out.say("put back as it was before adopt" if c.changes else "nothing to put back")
    elif c.changes:
        out.say(
            f"{product}'s own clean-up leaves sessions to agentkeep now"
            f" (`agentkeep adopt {agent} --undo` puts it back)"
        )
    if note and not c.undo:
        out.say(f"{out.style('note:', YELLOW)} {note}")
