"""The `demo` fixture: the UI tests' demo home (uihome) in the fake user."""

from __future__ import annotations

import pytest
from uihome import Demo, build_demo

from fakehome import FakeHome


@pytest.fixture
def demo(fake_home: FakeHome) -> Demo:
    return build_demo(fake_home)
