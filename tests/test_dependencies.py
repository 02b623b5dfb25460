"""The dependencies' versions, checked at start: a dependency missing or of
an untested version is named in words by `serve` (which refuses to start)
and by `doctor`, never met as a traceback in a thread.

A version is "installed" here the way Python finds it: a `.dist-info` on
PYTHONPATH, ahead of the venv's own, is what importlib.metadata reads."""

from __future__ import annotations

import json
from pathlib import Path

from agentkeep import dependencies
from fakehome import FakeHome


def _dist(where: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    info = where / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    return where


def test_an_untested_version_and_a_missing_one_are_named(tmp_path: Path, monkeypatch) -> None:
    site = _dist(
        tmp_path,
        "fake-app",
        "1.0",
        (
            "watchdog>=99,<100",
            "no-such-dependency>=1",
            "psutil>=1",
            'textual>=1,<2; extra == "ui"',
            'no-such-test-tool>=1; extra == "dev"',
        ),
    )
    monkeypatch.syspath_prepend(str(site))
    found = dependencies.problems("fake-app")
    assert any(p.startswith("watchdog ") and "tested with watchdog>=99,<100" in p for p in found)
    assert "no-such-dependency is missing (agentkeep needs no-such-dependency>=1)" in found
    assert any(p.startswith("textual ") and "textual>=1,<2" in p for p in found)
    assert len(found) == 3, found  # psutil is in range; the dev extra is not checked


def test_the_installed_dependencies_are_the_tested_ones() -> None:
    assert dependencies.problems() == []


def test_serve_refuses_an_untested_dependency_by_name(fake_home: FakeHome, tmp_path: Path) -> None:
    shadow = _dist(tmp_path / "shadow", "watchdog", "6.0.0")
    environ = dict(fake_home.environ, PYTHONPATH=str(shadow))
    done = fake_home.cli("serve", env=environ, timeout=30)
    assert done.returncode == 2, done
    assert "watchdog 6.0.0 is installed; agentkeep is tested with watchdog>=7.1.1,<8" in done.stderr
    assert "Traceback" not in done.stderr
    doctor = fake_home.cli("doctor", "--json", env=environ)
    (check,) = [c for c in json.loads(doctor.stdout) if c["name"] == "dependencies"]
    assert not check["ok"] and "watchdog 6.0.0" in check["detail"]
