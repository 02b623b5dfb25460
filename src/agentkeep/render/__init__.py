"""Text for a person: human sizes and ages (words), tables fitted to the
terminal (table), each command's output (sessions, reports, status) and the
progress bar (bar). `--json` output never comes through here."""

from __future__ import annotations

from agentkeep.render.bar import Bar
from agentkeep.render.reports import emptied, report, trash_entries
from agentkeep.render.sessions import du, scan, sessions, show
from agentkeep.render.settings import change, changed
from agentkeep.render.status import status
from agentkeep.render.table import Col, Out, table
from agentkeep.render.words import age, count, duration, idle, size, when
