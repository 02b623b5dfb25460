"""The errors a request ends in: each kind's exit code is the contract's, and
an error answer is read back as the very kind the daemon raised."""

from __future__ import annotations

import pytest

from agentkeep import protocol
from agentkeep.errors import (
    ANSWERED,
    BadParams,
    ConfigInvalid,
    EnvMismatch,
    Failed,
    Failure,
    NotFound,
    Refused,
)


def test_each_kind_exits_as_the_contract_says() -> None:
    assert (Failed.exit, BadParams.exit, ConfigInvalid.exit) == (1, 2, 2)
    assert (Refused.exit, NotFound.exit) == (4, 5)
    assert BadParams.code == protocol.INVALID_PARAMS
    assert EnvMismatch.code == protocol.ENV_MISMATCH
    numbers = [(kind.exit, kind.code) for kind in ANSWERED]
    assert len(set(numbers)) == len(numbers), "two kinds an answer cannot tell apart"


@pytest.mark.parametrize("kind", ANSWERED, ids=lambda k: k.__name__)
def test_an_answer_is_read_back_as_the_kind_that_was_raised(kind: type[Failure]) -> None:
    raised = kind("no such session: claude x", report={"removed": []}, data={"daemon": {"a": 1}})
    answer = raised.answer()
    assert answer["data"]["exit"] == kind.exit and answer["code"] == kind.code

    back = Failure.from_answer(answer)

    assert type(back) is kind
    assert (back.exit, back.code, back.message) == (kind.exit, kind.code, raised.message)
    assert back.report == {"removed": []} and back.data == {"daemon": {"a": 1}}


def test_numbers_no_kind_has_are_kept_as_they_came() -> None:
    back = Failure.from_answer({"code": -32099, "message": "new", "data": {"exit": 3}})
    assert type(back) is Failure and (back.exit, back.code, back.message) == (3, -32099, "new")


@pytest.mark.parametrize(
    "error",
    ["kaboom", {"code": True, "message": "m", "data": {"exit": True}}, {"data": "x"}],
)
def test_a_malformed_answer_is_a_failure_exiting_1(error: object) -> None:
    back = Failure.from_answer(error)
    assert back.exit == 1 and back.code == protocol.SERVER_ERROR
