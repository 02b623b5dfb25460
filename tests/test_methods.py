"""The one table of the socket's methods (agentkeep.methods) and the
daemon's dispatch built from it: an answer for each method, no other."""

from __future__ import annotations

import pytest

from agentkeep.daemon import answers
from agentkeep.methods import METHODS


def test_the_daemon_answers_every_method_of_the_table_and_no_other() -> None:
    assert list(answers.ANSWERS) == list(METHODS)


def test_a_dispatch_that_differs_from_the_table_is_refused() -> None:
    table = dict(answers.ANSWERS)
    status = table.pop("status")

    with pytest.raises(RuntimeError, match=r"unanswered \['status'\], unknown \[\]"):
        answers._answering(table)
    with pytest.raises(RuntimeError, match=r"unanswered \[\], unknown \['extra'\]"):
        answers._answering({**answers.ANSWERS, "extra": status})
