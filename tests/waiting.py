"""Waiting on a condition with a deadline: never sleep-and-hope."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_until(
    condition: Callable[[], Any], what: str, timeout: float = 20.0, *, setup: bool = True
) -> Any:
    """Poll `condition` until it is truthy and return its value. When it never
    is, the test fails: as SETUP INVALID when `setup` (the situation the test
    needs did not arise), else as the failed expectation it waited for."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            if setup:
                pytest.fail(f"SETUP INVALID: {what} did not happen within {timeout:g} s")
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.01)
