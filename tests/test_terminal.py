"""The terminal as a person sees it, in real pseudo-terminals.

Tables run in tmux at 80 and 200 columns (every table fits, one line per
row); the progress bar is read frame by frame from a pty that stderr is on
(it appears on a terminal, never in a pipe, and never moves backwards); `du`
counts what du(1) counts; -q and -v; a reader that goes away; shell
completion; the man page; and deploy/install.sh putting both in place.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentkeep import disk
from agentkeep.agents import AGENTS
from build_agents import (
    gemini_root,
    make_gemini_session,
    make_store_session,
    make_zero_session,
    zero_root,
)
from build_claude import make_session
from fakehome import FakeHome, make_fake_home
from waiting import wait_until

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
TMUX = shutil.which("tmux")
needs_tmux = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")
LONG = "/home/you/src/github.com/an-organisation/a-project-with-quite-a-long-name"
STORE = "issue-stores"


def _short_root(prefix: str) -> Path:
    """A fake home at a short path, so that the one line agentkeep prints
    that is a path of its own (the config file) fits 80 columns."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def _cli(fh: FakeHome, *args: str) -> dict | list:  # type: ignore[type-arg]
    done = fh.cli(*args, "--json", check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@dataclass
class Home:
    fh: FakeHome
    sessions: dict[str, str] = field(default_factory=dict)  # name -> "agent id"


@pytest.fixture(scope="module")
def home() -> Iterator[Home]:
    """Sessions of four kinds of agent, with long workspaces, a fork, a pin
    and one in the trash."""
    fh = make_fake_home(_short_root("akt-"))
    store_root = fh.home / "stores" / "issues"
    fh.write_config(f'[[stores]]\nname = "{STORE}"\nroot = "{store_root}"\ndepth = 2\n')
    h = Home(fh)
    old = make_session(fh, cwd=LONG, age_days=75.5)
    h.sessions["old"] = f"claude {old.id}"
    fork = make_session(fh, cwd=LONG, age_days=3.5, parent=old.id)
    h.sessions["fork"] = f"claude {fork.id}"
    big = make_session(fh, cwd="/home/you/cli-tool", age_days=45.5, pad=40_000)
    h.sessions["big"] = f"claude {big.id}"
    pinned = make_session(fh, cwd=LONG + "/sub/folder", age_days=40.5)
    h.sessions["pinned"] = f"claude {pinned.id}"
    h.sessions["recent"] = f"claude {make_session(fh, cwd=LONG, age_days=0.25).id}"
    gone = make_session(fh, cwd="/home/you/old-thing", age_days=50.5)
    sid = "4b1d2c3e-5f60-4718-9a2b-3c4d5e6f7081"
    make_gemini_session(gemini_root(fh.home), sid, project_root=LONG, days=40)
    h.sessions["gemini"] = f"gemini {sid}"
    make_zero_session(zero_root(fh.data), "z-0001", days=35)
    h.sessions["zero"] = "zero z-0001"
    make_store_session(store_root, "team-alpha/issue-12345", days=33)
    h.sessions["store"] = f"{STORE} team-alpha/issue-12345"
    fh.cli("pin", "claude", pinned.id, check=True)
    fh.cli("purge", "claude", gone.id, check=True)
    yield h
    subprocess.run(["rm", "-rf", str(fh.root), fh.environ["XDG_RUNTIME_DIR"]], check=False)


# -- tmux ---------------------------------------------------------------------


def on_screen(
    fh: FakeHome, args: list[str], width: int, height: int = 60, code: int = 0
) -> list[str]:
    """Run `agentkeep ARGS` in a tmux pane `width` columns wide (it must exit
    `code`) and return what it printed there, each wrapped line joined again
    (-J): a line wider than the pane shows as one long line, not as two."""
    assert TMUX is not None
    where = Path(tempfile.mkdtemp(prefix="aktx-", dir="/tmp"))
    sock, done = where / "s", where / "rc"
    command = " ".join([sys.executable, "-m", "agentkeep", *map(_quote, args)])
    # `read` keeps the pane open (and its text) once the command is done.
    script = f"{command}; echo $? > {done}; read _"
    tmux = [TMUX, "-S", str(sock), "-f", "/dev/null"]
    try:
        subprocess.run(
            [*tmux, "new-session", "-d", "-x", str(width), "-y", str(height), "sh", "-c", script],
            env=fh.environ,
            check=True,
            timeout=30,
        )
        wait_until(lambda: done.exists() and done.read_text().strip(), f"{args} to finish", 60)
        assert done.read_text().strip() == str(code), f"agentkeep {args} exited {done.read_text()}"
        shown = subprocess.run(
            [*tmux, "capture-pane", "-p", "-J", "-S", "-"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)
        shutil.rmtree(where, ignore_errors=True)
    lines = [line.rstrip() for line in shown.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


TABLES = [
    ["ls"],
    ["ls", "--agent", "claude"],
    ["du"],
    ["du", "--by", "workspace"],
    ["show", "@old"],
    ["show", "@store"],
    ["prune", "--dry-run", "--older-than", "30d"],
    ["trash"],
    ["scan"],
    ["status"],
]


def _args(h: Home, args: list[str]) -> list[str]:
    out: list[str] = []
    for arg in args:
        out += h.sessions[arg[1:]].split(" ", 1) if arg.startswith("@") else [arg]
    return out


@needs_tmux
@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("args", TABLES, ids=lambda a: "-".join(a).replace("@", ""))
def test_every_table_fits_the_terminal_one_line_per_row(
    home: Home, width: int, args: list[str]
) -> None:
    # status exits 1 when no daemon runs.
    lines = on_screen(home.fh, _args(home, args), width, code=1 if args == ["status"] else 0)

    assert lines, "nothing was shown"
    too_wide = [line for line in lines if len(line) > width]
    assert not too_wide, f"wider than {width} columns:\n" + "\n".join(too_wide)
    # No Python value ever reaches a person.
    assert not re.search(r"\b(None|True|False)\b|[{}]", "\n".join(lines)), "\n".join(lines)
    if args[0] in ("ls", "prune"):
        ids = [s.split(" ", 1)[1] for s in home.sessions.values()]
        for sid in ids:
            assert len([line for line in lines if sid in line]) <= 1, (sid, lines)


@needs_tmux
@pytest.mark.parametrize("width", [80, 200])
def test_ls_is_one_line_per_session_with_whole_ids(home: Home, width: int) -> None:
    lines = on_screen(home.fh, ["ls"], width)

    listed = _cli(home.fh, "ls")
    assert isinstance(listed, list)
    header, rows = lines[0], lines[1 : 1 + len(listed)]
    assert header.split() == ["AGENT", "ID", "IDLE", "SIZE", "STATE", "WORKSPACE"]
    assert lines[1 + len(listed)].startswith(f"{len(listed)} sessions"), lines
    for row, session in zip(rows, listed, strict=True):
        # Whole ids at 80 columns too: what show, purge and restore take.
        assert row.split()[:2] == [session["agent"], session["id"]], row
    long = [row for row, s in zip(rows, listed, strict=True) if s["workspace"] == LONG]
    assert len(long) >= 3, "SETUP INVALID: sessions in the long workspace"
    for row in long:
        shown = row.split()[-1]
        if width == 80:
            # Cut, keeping the end of the path (the project, as far as it fits).
            assert shown.startswith("…") and LONG.endswith(shown[1:]) and len(shown) >= 9, row
        else:
            assert shown == LONG, row


@needs_tmux
def test_wide_prints_everything_whole(home: Home) -> None:
    lines = on_screen(home.fh, ["ls", "--wide"], 80)
    assert any(LONG in line for line in lines)
    assert any(len(line) > 80 for line in lines), "--wide cut something"
    (old_agent, old_id) = home.sessions["old"].split()
    shown = on_screen(home.fh, ["show", "--wide", old_agent, old_id], 80)
    assert any(str(home.fh.claude) in line for line in shown), shown


def test_piped_text_is_whole_one_line_per_row(home: Home) -> None:
    environ = {k: v for k, v in home.fh.environ.items() if k != "COLUMNS"}
    done = home.fh.cli("ls", env=environ)
    listed = _cli(home.fh, "ls")
    rows = done.stdout.splitlines()[1 : 1 + len(listed)]
    assert len(rows) == len(listed)
    assert any(LONG in row for row in rows) and "…" not in done.stdout
    assert "\x1b[" not in done.stdout, "colour in a pipe"


# -- the progress bar ------------------------------------------------------------

FRAME = re.compile(
    r"^(?P<what>[a-z]+) (?:(?P<bar>\S+) (?P<done>[\d,]+)/(?P<total>[\d,]+)"
    r"|\S+(?: (?P<count>[\d,]+) sessions)?) \d+:\d\d$"
)


@dataclass
class Drawn:
    code: int
    stdout: str
    terminal: str  # everything written to the terminal stderr was on

    def frames(self) -> list[re.Match[str]]:
        pieces = (p.strip() for p in self.terminal.replace("\n", "\r").split("\r"))
        return [m for m in map(FRAME.match, pieces) if m]


# The CLI with the bar's seam set: a frame for every update, however fast
# the work goes.
EVERY_FRAME = (
    "from agentkeep.render import bar\n"
    "bar._frame_each_update = True\n"
    "from agentkeep.__main__ import main\n"
    "main(prog_name='agentkeep')\n"
)


def on_a_terminal(
    environ: dict[str, str], *args: str, cols: int = 80, every_frame: bool = False
) -> Drawn:
    """`agentkeep ARGS` with stderr on a pseudo-terminal `cols` wide and
    stdout to a file; every byte written to the terminal is kept, so every
    frame the bar drew can be read back. With `every_frame`, the bar draws
    a frame at each update instead of every tenth of a second."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    program = ["-c", EVERY_FRAME] if every_frame else ["-m", "agentkeep"]
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            [sys.executable, *program, *args],
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        seen = b""
        deadline = time.monotonic() + 120
        try:
            while time.monotonic() < deadline:
                ready, _, _ = select.select([master], [], [], 0.5)
                if ready:
                    try:
                        chunk = os.read(master, 65536)
                    except OSError:  # EIO: the process is gone and the pty with it
                        break
                    if not chunk:
                        break
                    seen += chunk
                elif proc.poll() is not None:
                    break
            code = proc.wait(timeout=30)
        finally:
            os.close(master)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out.seek(0)
        return Drawn(code, out.read().decode(), seen.decode(errors="replace"))


def assert_never_backwards(frames: list[re.Match[str]]) -> None:
    """Per phase: one total, once one is shown; a count that never goes down."""
    done: dict[str, int] = {}
    totals: dict[str, set[int]] = {}
    for m in frames:
        what = m["what"]
        count = m["done"] or m["count"]
        if count is not None:
            n = int(count.replace(",", ""))
            assert n >= done.get(what, 0), f"{what} went back to {n}: {[f[0] for f in frames]}"
            done[what] = n
        if m["total"] is not None:
            totals.setdefault(what, set()).add(int(m["total"].replace(",", "")))
    for what, seen in totals.items():
        assert len(seen) == 1, f"the {what} total changed: {sorted(seen)}"


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeHome]:
    """4,000 sessions of every agent, enough for a scan to take a while:
    bench/homes.py builds them in seconds (the tests' builders take
    minutes), on tmpfs where there is one (32,000 files on this disk take
    longer to remove than the tests take to run)."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import homes
    finally:
        sys.path.remove(str(REPO / "bench"))
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        root = Path(tempfile.mkdtemp(prefix="akt-big-", dir=shm))
    else:
        root = tmp_path_factory.mktemp("big")
    bh = homes.make_home(root, 4000)
    yield bh.fake
    subprocess.run(["rm", "-rf", str(root), bh.fake.environ["XDG_RUNTIME_DIR"]], check=False)


def _fresh(fh: FakeHome, name: str) -> dict[str, str]:
    """The fake user's environment with a state dir of its own (no index yet)."""
    return dict(fh.environ, XDG_STATE_HOME=str(fh.root / f"state-{name}"), COLUMNS="")


def test_the_first_ls_shows_a_bar_that_never_moves_backwards(big: FakeHome) -> None:
    drawn = on_a_terminal(_fresh(big, "first-ls"), "ls", every_frame=True)

    assert drawn.code == 0, drawn.terminal
    frames = drawn.frames()
    counted = [m for m in frames if m["done"] or m["count"]]
    if len({m["done"] or m["count"] for m in counted}) < 3:
        pytest.fail(
            f"SETUP INVALID: the scan was over in {len(counted)} frames: {drawn.terminal!r}"
        )
    assert {m["what"] for m in frames} <= {"indexing", "scanning"}
    assert any(m["total"] == "4,000" for m in frames), "the total is known before the end"
    assert_never_backwards(frames)
    assert all(len(m[0]) < 80 for m in frames)
    # Erased when done: the last thing on the line is blanks.
    assert drawn.terminal.rstrip("\r").split("\r")[-1].strip() == ""
    # The table went to stdout (a pipe here), untouched by the bar.
    assert "\r" not in drawn.stdout and drawn.stdout.startswith("AGENT")
    assert len(drawn.stdout.splitlines()) > 4000


def test_scan_and_a_capped_dry_run_count_toward_totals_known_before(big: FakeHome) -> None:
    environ = _fresh(big, "prune")
    config = Path(big.root / "capped.toml")
    config.write_text("max_removals = 300\n")
    environ["AGENTKEEP_CONFIG"] = str(config)
    scanned = on_a_terminal(environ, "scan", every_frame=True)
    assert scanned.code == 0, scanned.terminal
    assert_never_backwards(scanned.frames())
    assert {m["what"] for m in scanned.frames()} == {"scanning"}

    drawn = on_a_terminal(environ, "prune", "--dry-run", "--older-than", "30d", every_frame=True)

    assert drawn.code == 0, drawn.terminal
    frames = drawn.frames()
    totals = {m["what"]: int(m["total"].replace(",", "")) for m in frames if m["total"]}
    if "checking" not in totals:
        pytest.fail(f"SETUP INVALID: the dry run was over too soon: {drawn.terminal!r}")
    # Listing counts toward what the index held; checking toward the cap,
    # not toward every one of the candidates.
    assert totals == {"listing": 4000, "checking": 300} or totals == {"checking": 300}
    assert_never_backwards(frames)
    assert "300 would move to the trash" in drawn.stdout


def test_nothing_is_drawn_off_a_terminal(big: FakeHome) -> None:
    environ = _fresh(big, "piped")
    done = subprocess.run(
        [sys.executable, "-m", "agentkeep", "scan"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr


def test_quiet_draws_no_bar(big: FakeHome) -> None:
    drawn = on_a_terminal(_fresh(big, "quiet"), "-q", "scan")
    assert drawn.code == 0
    assert drawn.terminal == "", drawn.terminal


def test_a_reader_that_goes_away_is_not_an_error(big: FakeHome) -> None:
    """`agentkeep ls | head -1`: ls (400 kB of text) exits 0 and says nothing."""
    for args in (["ls"], ["ls", "--json"]):
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentkeep", *args],
            env=big.environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()
        code = proc.wait(timeout=120)
        err = proc.stderr.read().decode()
        proc.stderr.close()
        assert first, "SETUP INVALID: nothing was printed"
        assert (code, err) == (0, ""), (args, code, err)


# -- du counts what du(1) counts ---------------------------------------------


def test_du_counts_allocated_blocks_each_inode_once_as_du_does(fake_home: FakeHome) -> None:
    sessions = [make_session(fake_home, age_days=40 + n) for n in range(3)]
    history = fake_home.claude / "file-history" / sessions[0].id
    assert history.is_dir(), "SETUP INVALID: no file-history dir"
    with open(history / "sparse.bin", "wb") as f:
        f.truncate(8_000_000)  # 8 MB of size, next to nothing on disk
    (history / "data.bin").write_bytes(os.urandom(300_000))
    os.link(history / "data.bin", history / "same-data.bin")  # one inode, two names
    assert fake_home.cli("scan").returncode == 0

    doc = _cli(fake_home, "du")
    assert isinstance(doc, dict)
    (group,) = doc["groups"]
    paths = [
        a["path"]
        for s in sessions
        for a in _cli(fake_home, "show", "claude", s.id)["artifacts"]  # type: ignore[call-overload]
    ]
    du = subprocess.run(["du", "-s", "-c", "-B1", "--", *paths], capture_output=True, text=True)
    assert du.returncode == 0, du.stderr
    total = int(du.stdout.splitlines()[-1].split()[0])

    assert group["disk_bytes"] == total
    # The apparent size stays st_size, the hard link once: 8 MB of it is a hole.
    assert 8_300_000 < group["bytes"] < 8_400_000
    assert group["disk_bytes"] < 1_000_000
    text = fake_home.cli("du", env=dict(fake_home.environ, COLUMNS="80")).stdout
    assert f"{group['disk_bytes'] / 1000:.1f} kB" in text.splitlines()[1], text


def _du(path: Path) -> int:
    done = subprocess.run(["du", "-s", "-B1", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[0])


def test_both_walks_count_blocks_as_du_does(tmp_path: Path) -> None:
    """measure() walks by path, and by directory descriptors where a path
    grows past PATH_MAX: both count what du(1) counts."""
    root = tmp_path / "tree"
    (root / "a" / "b").mkdir(parents=True)
    (root / "one").write_bytes(os.urandom(5000))
    (root / "a" / "two").write_bytes(os.urandom(70_000))
    os.link(root / "a" / "two", root / "a" / "b" / "again")
    with open(root / "a" / "b" / "hole", "wb") as f:
        f.truncate(3_000_000)
    (root / "a" / "link").symlink_to("one")
    st = os.lstat(root)

    by_path = disk._measure_by_path(str(root), st, set())
    by_fd = disk._measure_by_fd(str(root), st, set())

    assert by_path is not None and by_path == by_fd
    assert by_path.disk_bytes == _du(root)
    assert by_path.bytes == 5000 + 70_000 + 3_000_000 + len("one")
    deep = tmp_path / "deep"
    deep.mkdir()
    fd = os.open(deep, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(20):
            os.mkdir("d" * 250, dir_fd=fd)
            child = os.open("d" * 250, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        with open(os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "wb") as f:
            f.write(os.urandom(9000))
    finally:
        os.close(fd)
    assert len(str(deep)) + 20 * 251 > 4096, "SETUP INVALID: not past PATH_MAX"
    measured = disk.measure(deep)
    assert measured is not None and measured.complete
    assert measured.disk_bytes == _du(deep) and measured.bytes == 9000


# -- -q and -v ------------------------------------------------------------------


def test_quiet_and_verbose_set_what_stderr_says(fake_home: FakeHome) -> None:
    make_session(fake_home, age_days=40)
    # An index that cannot be written is a warning (it is kept in memory).
    (fake_home.state / "index.sqlite").mkdir(parents=True)
    warning = "the index cannot be written"
    debug = "working in-process"

    plain = fake_home.cli("ls")
    assert plain.returncode == 0 and warning in plain.stderr and debug not in plain.stderr
    for args in (["-q", "ls"], ["ls", "-q"], ["ls", "--quiet"]):
        quiet = fake_home.cli(*args)
        assert (quiet.returncode, quiet.stderr) == (0, ""), (args, quiet.stderr)
        assert quiet.stdout == plain.stdout
    verbose = fake_home.cli("-v", "ls")
    assert warning in verbose.stderr and debug not in verbose.stderr
    for args in (["-vv", "ls"], ["-v", "ls", "-v"]):
        assert debug in fake_home.cli(*args).stderr, args
    both = fake_home.cli("-q", "ls", "-v")
    assert both.returncode == 2 and "-q and -v" in both.stderr


# -- status and show read well -------------------------------------------------


def test_status_and_show_say_no_python_values(home: Home, spawn: object) -> None:
    environ = dict(home.fh.environ, COLUMNS="80")
    status = home.fh.cli("status", env=environ)
    assert status.returncode == 1, status.stderr  # no daemon
    assert "watch" not in status.stdout and "None" not in status.stdout
    agent, sid = home.sessions["pinned"].split()
    shown = home.fh.cli("show", agent, sid, env=environ).stdout
    assert "  state          pinned\n" in shown and "pinned pinned" not in shown
    report = home.fh.cli("prune", "--dry-run", "--older-than", "30d", env=environ).stdout
    (kept,) = [line for line in report.splitlines() if sid in line]
    assert kept.split() == ["claude", sid, "pinned"], kept


def test_status_of_a_running_daemon_says_how_it_watches(fake_home: FakeHome, spawn) -> None:  # type: ignore[no-untyped-def]
    make_session(fake_home, age_days=3)
    daemon = spawn([sys.executable, "-m", "agentkeep", "serve"])
    wait_until(lambda: fake_home.cli("status").returncode == 0, "the daemon to answer", 60)
    status = fake_home.cli("status", env=dict(fake_home.environ, COLUMNS="80"))

    lines = status.stdout.splitlines()
    assert re.match(r"agentkeep daemon: pid \d+, up \d+ s$", lines[0]), lines
    assert any(re.match(r"  watch +(inotify|polling|mixed) \(\d+ roots?\)$", x) for x in lines)
    assert not re.search(r"\b(None|True|False)\b", status.stdout), status.stdout
    assert daemon.poll() is None


# -- completion and the man page ------------------------------------------------


def _complete(fh: FakeHome, shell: str, words: str, cword: str) -> list[str]:
    environ = dict(
        fh.environ, COMP_WORDS=words, COMP_CWORD=cword, _AGENTKEEP_COMPLETE=f"{shell}_complete"
    )
    done = subprocess.run(
        [sys.executable, "-m", "agentkeep"], env=environ, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _source(fh: FakeHome, shell: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "agentkeep"],
        env=dict(fh.environ, _AGENTKEEP_COMPLETE=f"{shell}_source"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _state_files(fh: FakeHome) -> list[tuple[str, int, int]]:
    """The state dir's files, but SQLite's own -wal and -shm (which even a
    read-only reader of a WAL database may make)."""
    return sorted(
        (p.name, p.stat().st_mtime_ns, p.stat().st_size)
        for p in fh.state.iterdir()
        if not p.name.endswith(("-wal", "-shm"))
    )


def test_bash_completes_commands_agents_and_indexed_ids_without_a_scan(
    fake_home: FakeHome,
) -> None:
    a, b = (make_session(fake_home, age_days=40 + n) for n in range(2))
    assert fake_home.cli("scan").returncode == 0
    later = make_session(fake_home, age_days=1)  # on disk, not in the index
    before = _state_files(fake_home)
    script = _source(fake_home, "bash")
    assert "complete -o nosort -F _agentkeep_completion agentkeep" in script
    # The script runs `agentkeep` by name, as a person's shell would.
    environ = dict(fake_home.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")

    def tab(line: str) -> list[str]:
        """What bash completes for `line`, the cursor at its end, through
        the script agentkeep wrote for it."""
        run = f"""{script}
read -ra COMP_WORDS <<< "$LINE"
[[ "$LINE" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
_agentkeep_completion agentkeep
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
        done = subprocess.run(
            ["bash", "-c", run], env=dict(environ, LINE=line), capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return [x for x in done.stdout.splitlines() if x]

    assert {"ls", "show", "prune", "purge", "du", "trash"} <= set(tab("agentkeep "))
    assert tab("agentkeep sh") == ["show"]
    assert set(tab("agentkeep show ")) == set(AGENTS)
    # Newest first; only what the index holds (the session made since the
    # scan is not offered: nothing was scanned).
    assert tab("agentkeep show claude ") == [a.id, b.id]
    assert tab(f"agentkeep purge claude {b.id[:8]}") == [b.id]
    assert later.id not in tab("agentkeep pin claude ")
    assert tab("agentkeep ls --agent cl") == ["claude"]
    # Completion wrote nothing: no index, journal or lock file moved.
    assert _state_files(fake_home) == before


def test_zsh_and_fish_get_their_scripts_and_the_same_ids(fake_home: FakeHome) -> None:
    s = make_session(fake_home, cwd="/home/you/proj", age_days=40)
    assert fake_home.cli("scan").returncode == 0
    assert _source(fake_home, "zsh").startswith("#compdef agentkeep")
    assert "complete --no-files --command agentkeep" in _source(fake_home, "fish")
    # What each script reads back: zsh type, value and help (the
    # workspace) a line each; fish the value, a tab, the help.
    assert _complete(fake_home, "zsh", "agentkeep show claude ", "3") == [
        "plain",
        s.id,
        "/home/you/proj",
    ]
    assert _complete(fake_home, "fish", "agentkeep show claude ", "") == [
        f"plain,{s.id}\t/home/you/proj"
    ]


def test_the_man_page_has_every_command_and_option(fake_home: FakeHome) -> None:
    import click

    from agentkeep.cli import main

    page = subprocess.run(
        [sys.executable, "-m", "agentkeep.manpage"],
        env=fake_home.environ,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    checked = subprocess.run(
        ["groff", "-man", "-Tutf8", "-ww", "-z"], input=page, capture_output=True, text=True
    )
    assert checked.returncode == 0 and checked.stderr == "", checked.stderr
    shown = subprocess.run(
        ["groff", "-man", "-Tascii", "-P", "-cbou"],
        input=page,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    ctx = click.Context(main, info_name="agentkeep")
    for name in main.list_commands(ctx):
        command = main.get_command(ctx, name)
        assert command is not None
        groups = (
            [command]
            if not isinstance(command, click.Group)
            else [command.get_command(ctx, sub) for sub in command.list_commands(ctx)]
        )
        for leaf in groups:
            assert leaf is not None
            assert re.search(rf"^   {name}\b", shown, re.M), f"no section for {name}"
            for param in leaf.params:
                for opt in getattr(param, "opts", []):
                    if opt.startswith("--") and param.help:  # type: ignore[attr-defined]
                        assert opt in shown, f"{name} {opt} is not in the man page"
    for section in ("EXIT STATUS", "ENVIRONMENT", "FILES", "GLOBAL OPTIONS"):
        assert section in shown


# -- deploy/install.sh puts them in place, --uninstall takes them back -----------


def test_install_sh_installs_completions_and_the_man_page_and_takes_them_back(
    fake_home: FakeHome,
) -> None:
    """A real install into the fake home (pip builds this tree: ~20 s)."""
    environ = dict(fake_home.environ, PATH=f"{fake_home.home}/.local/bin:{os.environ['PATH']}")
    data = Path(environ["XDG_DATA_HOME"])
    files = {
        "bash": data / "bash-completion" / "completions" / "agentkeep",
        "zsh": data / "zsh" / "site-functions" / "_agentkeep",
        "fish": Path(environ["XDG_CONFIG_HOME"]) / "fish" / "completions" / "agentkeep.fish",
        "man": fake_home.home / ".local" / "share" / "man" / "man1" / "agentkeep.1",
    }
    mine = files["fish"].parent / "other.fish"
    mine.parent.mkdir(parents=True)
    mine.write_text("# the user's own\n")
    install = [str(REPO / "deploy" / "install.sh")]
    done = subprocess.run(
        ["sh", *install, "--no-service"], env=environ, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr

    assert "_AGENTKEEP_COMPLETE=bash_complete" in files["bash"].read_text()
    assert files["zsh"].read_text().startswith("#compdef agentkeep")
    assert "complete --no-files --command agentkeep" in files["fish"].read_text()
    assert files["man"].read_text().startswith('.\\" Generated by agentkeep')
    # man finds it for a command in ~/.local/bin, as the user's man would.
    man = subprocess.run(
        ["man", "-w", "agentkeep"], env=environ, capture_output=True, text=True, timeout=60
    )
    assert man.stdout.strip() == str(files["man"]), man.stdout + man.stderr

    gone = subprocess.run(
        ["sh", *install, "--uninstall"], env=environ, capture_output=True, text=True, timeout=120
    )
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert not any(f.exists() for f in files.values()), [f for f in files.values() if f.exists()]
    assert mine.read_text() == "# the user's own\n"
