"""install.py: npm runs with the user's and the machine's config in force,
and an install that fails skips the whole suite at once, loudly."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import install
import isolation
import pytest
from pins import PINS, SWITCH

from conftest import SKIPPED

pytestmark = pytest.mark.slow

CHECKOUT = install.CHECKOUT


@pytest.fixture
def npm() -> str:
    found = shutil.which("npm")
    if found is None:
        pytest.skip(f"{SKIPPED}: npm is not installed")
    return found


def test_npm_runs_in_the_agents_folder_with_the_users_and_the_machines_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, npm: str
) -> None:
    """A `--prefix` would move npm's global config to `<prefix>/etc/npmrc`:
    the machine's proxy or CA file would be lost."""
    home, machine = tmp_path / "home", tmp_path / "machine"
    (machine / "etc").mkdir(parents=True)
    home.mkdir()
    (machine / "etc" / "npmrc").write_text("maxsockets=13\n")
    (home / ".npmrc").write_text("fetch-retries=7\n")
    monkeypatch.setenv("HOME", str(home))
    # npm's own prefix, where its global config lives (as /usr is here).
    monkeypatch.setenv("npm_config_prefix", str(machine))
    monkeypatch.setenv("AGENTKEEP_AGENT_CACHE", str(tmp_path / "cache"))
    where = install.folder(PINS["claude"])
    said = install.npm(["config", "get", "maxsockets", "fetch-retries", "globalconfig"], where)
    assert said.splitlines() == [
        "maxsockets=13",
        "fetch-retries=7",
        f"globalconfig={machine / 'etc' / 'npmrc'}",
    ]
    assert install.npm(["prefix"], where) == str(where), "the folder is npm's local prefix"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _suite(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The rest of the conformance suite, as a developer runs it."""
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"]
    argv += ["tests/real_agents", f"--ignore={Path(__file__).relative_to(CHECKOUT)}"]
    return subprocess.run(argv, cwd=CHECKOUT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.timeout(900)
def test_a_failed_install_skips_every_test_at_once_and_is_not_tried_again(
    tmp_path: Path, npm: str
) -> None:
    problem = isolation.isolation_problem()
    if problem is not None:
        pytest.skip(f"{SKIPPED}: {problem}")
    calls = tmp_path / "npm-calls"
    wrapper = tmp_path / "bin" / "npm"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {npm} "$@"\n')
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != SWITCH}
    (tmp_path / "home").mkdir()
    env.update(
        HOME=str(tmp_path / "home"),
        PATH=os.pathsep.join([str(wrapper.parent), env.get("PATH", os.defpath)]),
        AGENTKEEP_AGENT_CACHE=str(tmp_path / "cache"),
        # A registry nobody answers at: refused at once.
        npm_config_registry=f"http://127.0.0.1:{_closed_port()}/",
    )

    first = _suite(env)
    out = first.stdout + first.stderr
    assert first.returncode == 0, out
    summary = out.strip().splitlines()[-1]
    assert re.fullmatch(r"=* ?\d+ skipped in [\d.]+s.*", summary), summary
    assert "REAL AGENT SKIPPED: the agents could not be installed from npm" in out
    assert calls.read_text().splitlines() == ["ping --fetch-retries=0"], "one try, for all"
    assert (tmp_path / "cache" / install.failed_marker().name).is_file()

    again = _suite(env)
    out = again.stdout + again.stderr
    assert again.returncode == 0, out
    assert "REAL AGENT SKIPPED: the last install failed" in out
    assert calls.read_text().splitlines() == ["ping --fetch-retries=0"], "not tried again"


def test_a_wrong_switch_or_agent_is_said_and_not_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTKEEP_AGENT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(SWITCH, "latest")
    assert install.main([]) == 2
    assert f"{SWITCH}='latest': say 'pinned' or 'newest'" in capsys.readouterr().err
    monkeypatch.delenv(SWITCH)
    assert install.main(["claude", "cursor"]) == 2
    assert "no such agent: cursor" in capsys.readouterr().err
    assert install.failure() is None
