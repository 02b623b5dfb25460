"""Names that are not UTF-8 are carried, never a crash.

A directory named with bytes that are not UTF-8 (`claude-<uid>/\\xff/<id>/`,
`projects/\\xfe.../`) used to stop `scan`, `ls`, `du`, `show` and `prune`
for every agent with a UnicodeEncodeError from the index, and the daemon
showed 0 sessions. Such names now travel as the OS gives them through the
adapters, the index (stored so that they read back the same) and JSON
(escaped), and the odd session is listed and removed like any other.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from build_claude import make_session, new_id, project_key
from fakehome import FakeHome
from test_daemon_serve import start_daemon, stop_daemons  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

OLD = time.time() - 50 * 86400


def odd_tmp_tree(fh: FakeHome, sid: str) -> Path:
    """The session's scratch dir under a key dir whose name is not UTF-8."""
    root = os.fsencode(fh.system_tmp / f"claude-{os.getuid()}")
    os.makedirs(root, mode=0o700, exist_ok=True)
    leaf = os.path.join(root, b"-home-\xff-proj", sid.encode())
    os.makedirs(leaf)
    output = os.path.join(leaf, b"task.output")
    Path(os.fsdecode(output)).write_text("scratch")
    for path in (output, leaf):
        os.utime(path, (OLD, OLD))
    return Path(os.fsdecode(leaf))


def odd_project(fh: FakeHome) -> tuple[str, Path]:
    """A transcript in a key dir whose name is not UTF-8."""
    sid = new_id()
    key = os.path.join(os.fsencode(fh.claude / "projects"), b"-home-\xfe-x")
    os.makedirs(key)
    transcript = Path(os.fsdecode(os.path.join(key, f"{sid}.jsonl".encode())))
    transcript.write_text(json.dumps({"sessionId": sid, "cwd": "/home/u/x"}) + "\n")
    os.utime(transcript, (OLD, OLD))
    return sid, transcript


def test_every_command_carries_names_that_are_not_utf8(fake_home: FakeHome) -> None:
    plain = make_session(fake_home, age_days=50)
    tmp_owner = make_session(fake_home, age_days=50)
    leaf = odd_tmp_tree(fake_home, tmp_owner.id)
    odd_sid, transcript = odd_project(fake_home)

    scan = fake_home.cli("scan", "--json")
    assert scan.returncode == 0, scan.stderr
    assert json.loads(scan.stdout)["sessions"]["claude"] == 3
    for args in (["ls"], ["du"], ["du", "--by", "workspace"], ["show", "claude", tmp_owner.id]):
        proc = fake_home.cli(*args)
        assert proc.returncode == 0, f"{args}: {proc.stderr}"
        assert "Traceback" not in proc.stderr
    shown = json.loads(fake_home.cli("show", "claude", tmp_owner.id, "--json", check=True).stdout)
    assert str(leaf) in {a["path"] for a in shown["artifacts"]}, "the odd path reads back the same"
    ids = {r["id"] for r in json.loads(fake_home.cli("ls", "--json", check=True).stdout)}
    assert ids == {plain.id, tmp_owner.id, odd_sid}

    report = json.loads(fake_home.cli("prune", "--older-than", "30d", "--json", check=True).stdout)
    assert {r["id"] for r in report["removed"]} == {plain.id, tmp_owner.id, odd_sid}
    assert report["failed"] == []
    assert not os.path.lexists(leaf) and not os.path.lexists(transcript)
    # And the trash gives it back, odd name and all.
    assert fake_home.cli("restore", "claude", tmp_owner.id).returncode == 0
    assert (leaf / "task.output").read_text() == "scratch"


def test_the_daemon_indexes_and_serves_them(fake_home: FakeHome) -> None:
    make_session(fake_home, age_days=50)
    owner = make_session(fake_home, age_days=50)
    odd_tmp_tree(fake_home, owner.id)
    odd_project(fake_home)
    daemon = start_daemon(fake_home)
    assert daemon.status()["sessions"] == 3
    listed = fake_home.cli("ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == 3


def test_a_workspace_that_is_not_utf8_is_listed(fake_home: FakeHome) -> None:
    """A cwd written with escapes of lone surrogates (JSON allows them)."""
    sid = new_id()
    key = fake_home.claude / "projects" / project_key("/home/u/odd")
    key.mkdir(parents=True)
    transcript = key / f"{sid}.jsonl"
    record = '{"sessionId": "' + sid + '", "cwd": "/home/u/\\udcff\\ud800"}\n'
    transcript.write_text(record)
    listed = fake_home.cli("ls", "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["workspace"] == "/home/u/\udcff\ud800"
    assert fake_home.cli("ls").returncode == 0
    assert fake_home.cli("du", "--by", "workspace").returncode == 0
