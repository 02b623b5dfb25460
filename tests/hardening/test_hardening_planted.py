"""A /tmp/claude-<uid> planted by another user: never removed from, and
what is fresh there is not the user's activity.

Another local user who creates `/tmp/claude-<uid>` before the user's Claude
does (after a reboot emptied /tmp) could otherwise keep the user's old
sessions from ever being pruned, by touching a `<key>/<id>/` there."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentkeep.model import rfc3339
from build_claude import make_session
from fakehome import FakeHome

pytestmark = pytest.mark.slow


@pytest.fixture
def sticky_tmp(fake_home: FakeHome) -> Iterator[Path]:
    """A world-writable sticky tmp like /tmp, as the fake user's system tmp."""
    base = Path(tempfile.mkdtemp(prefix="ak-systmp-", dir="/tmp"))
    os.chmod(base, 0o1777)
    fake_home.environ["AGENTKEEP_SYSTEM_TMP"] = str(base)
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False)


def plant(root: Path, rel: str, how: str) -> Path:
    """Another user's fresh `<key>/<id>/` under `root` (made by them when we
    are root, else a world-writable root of our own)."""
    leaf = root / rel
    if how == "other-user":
        if os.geteuid() != 0:
            pytest.skip("making a directory as another uid needs root")
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        subprocess.run([*as_nobody, "mkdir", "-p", str(leaf)], check=True)
        subprocess.run([*as_nobody, "touch", str(leaf / "fresh.output")], check=True)
        assert os.stat(root).st_uid == 65534, "SETUP INVALID: not planted by another uid"
    else:
        leaf.mkdir(parents=True)
        os.chmod(root, 0o777)
        (leaf / "fresh.output").write_text("touched just now")
    return leaf


@pytest.mark.parametrize("how", ["other-user", "world-writable"])
def test_fresh_entries_in_a_planted_root_do_not_keep_old_sessions(
    fake_home: FakeHome, sticky_tmp: Path, how: str
) -> None:
    s = make_session(fake_home, age_days=50, kinds=["transcript", "file-history"])
    root = sticky_tmp / f"claude-{os.getuid()}"
    leaf = plant(root, f"-home-user-project/{s.id}", how)
    shown = json.loads(fake_home.cli("show", "claude", s.id, "--json", check=True).stdout)
    assert str(leaf) in {a["path"] for a in shown["artifacts"]}, "SETUP INVALID: not found"
    assert shown["last_activity"] == rfc3339(s.mtime), "the planted entry's time is not its"

    report = json.loads(fake_home.cli("prune", "--older-than", "30d", "--json", check=True).stdout)
    assert [r["id"] for r in report["removed"]] == [s.id]
    assert (leaf / "fresh.output").exists(), "never removed from a root that is not ours"
    assert str(leaf) in {r["path"] for r in report["residual"]}
    assert not s.transcript.exists()
