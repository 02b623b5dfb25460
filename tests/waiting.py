"""Waiting on a condition with a deadline: never sleep-and-hope."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    """Poll `condition` until it is truthy and return its value; the test
    fails as SETUP INVALID when it never is (the situation did not arise)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"SETUP INVALID: {what} did not happen within {timeout:g} s")
        time.sleep(0.01)
