"""Fixtures of the conformance suite against the real agents.

Each test gets a whole fake user (fakehome) with the pinned agent on PATH;
the agent runs isolated (isolation.run) against the mock model. When the
agent is not installed and npm's registry cannot be reached, or no network
namespace can be made, the test is skipped, saying why.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import install
import isolation
import pytest
from pins import PINS

from fakehome import FakeHome, make_fake_home

# Off switches the agents document for traffic that is not the model's. The
# network namespace is what guarantees it; these keep the agents quiet.
QUIET = {
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "NO_UPDATE_NOTIFIER": "1",
    "npm_config_update_notifier": "false",
}

_checked: dict[str, str | None] = {}


def _problem(agent: str) -> str | None:
    if agent not in _checked:
        pin = PINS[agent]
        problem = isolation.isolation_problem()
        if problem is None and not install.installed(pin) and install.main([agent]) != 0:
            problem = f"{pin.spec} is not installed and could not be installed from npm"
        _checked[agent] = problem
    return _checked[agent]


def agent_binary(agent: str) -> Path:
    """The pinned agent's command; skips the test (loudly) when it cannot run here."""
    problem = _problem(agent)
    if problem is not None:
        pytest.skip(f"REAL AGENT SKIPPED: {problem}")
    return install.binary(PINS[agent])


@pytest.fixture
def agent_home(tmp_path: Path) -> FakeHome:
    """A fake user whose PATH has every installed pinned agent and node."""
    return make_agent_home(tmp_path)


def make_agent_home(root: Path) -> FakeHome:
    """agent_home in `root` (for a fixture of a wider scope)."""
    fh = make_fake_home(root)
    bins = [str(install.binary(pin).parent) for pin in PINS.values() if install.installed(pin)]
    node = shutil.which("node")
    system = [os.path.dirname(node)] if node else []
    fh.environ["PATH"] = os.pathsep.join(
        [*dict.fromkeys(bins), *system, fh.environ.get("PATH", os.defpath)]
    )
    fh.environ.update(QUIET)
    return fh
