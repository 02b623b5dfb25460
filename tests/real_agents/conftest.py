"""Fixtures of the conformance suite against the real agents.

Each test gets a whole fake user (fakehome) with the agents on PATH (the
pinned ones, or npm's newest with AGENTKEEP_AGENTS=newest: install.py); the
agent runs isolated (isolation.run) against the mock model. When no network
namespace can be made, or the agents are not installed and cannot be, the
suite is skipped, saying why: the first test to find out tries once, and
every later one skips at once with the same reason. An install that failed
before (install.py remembers it) is not tried again here.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, TypeVar

import install
import isolation
import pytest
from driver import Driver
from pins import Pin

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

SKIPPED = "REAL AGENT SKIPPED"
D = TypeVar("D", bound=Driver)

# The one verdict of this run: the agents (by name), or why they cannot run.
_verdict: list[dict[str, Pin] | str] = []


def _check() -> dict[str, Pin] | str:
    problem = isolation.isolation_problem()
    if problem is not None:
        return problem
    failed = install.failure()
    if failed is not None:
        return f"the last install failed ({failed}); run tests/real_agents/install.py again"
    try:
        return install.ensure()
    except install.InstallFailed as exc:
        install.remember(exc)
        return f"the agents could not be installed from npm: {exc}"


def agents() -> dict[str, Pin]:
    """The agents of this run, installed; skips the test (loudly) when they
    cannot run here, at once once that is known."""
    if not _verdict:
        _verdict.append(_check())
    verdict = _verdict[0]
    if isinstance(verdict, str):
        pytest.skip(f"{SKIPPED}: {verdict}")
    return verdict


def agent_binary(agent: str) -> Path:
    """The agent's command; skips the test (loudly) when it cannot run here."""
    return install.binary(agents()[agent])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Which agents ran, or, loudly, why none did."""
    if not _verdict:
        return
    verdict = _verdict[0]
    if isinstance(verdict, str):
        terminalreporter.write_sep("!", f"{SKIPPED}: {verdict}", red=True)
    else:
        specs = ", ".join(pin.spec for pin in verdict.values())
        terminalreporter.write_line(f"real agents ({install.mode()}): {specs}")


@pytest.fixture
def agent_home(tmp_path: Path) -> FakeHome:
    """A fake user whose PATH has every agent of this run and node."""
    return make_agent_home(tmp_path)


def make_agent_home(root: Path) -> FakeHome:
    """agent_home in `root` (for a fixture of a wider scope)."""
    bins = [str(install.binary(pin).parent) for pin in agents().values()]
    fh = make_fake_home(root)
    node = shutil.which("node")
    system = [os.path.dirname(node)] if node else []
    fh.environ["PATH"] = os.pathsep.join(
        [*dict.fromkeys(bins), *system, fh.environ.get("PATH", os.defpath)]
    )
    fh.environ.update(QUIET)
    return fh


def agent_driver(driver: type[D], root: Path) -> D:
    """`driver` set up for a fresh agent_home in `root`; skips the test
    (loudly) when its agent cannot run here."""
    binary = agent_binary(driver.AGENT)
    return driver.setup(make_agent_home(root), binary)


def agentkeep(home: FakeHome, *args: str) -> Any:
    """What `agentkeep ARGS --json` printed for `home` (exit 1, a partial
    failure, is a report too)."""
    done = home.cli(*args, "--json", timeout=300)
    assert done.returncode in (0, 1), f"agentkeep {args}: {done.returncode}\n{done.stderr}"
    return json.loads(done.stdout)
