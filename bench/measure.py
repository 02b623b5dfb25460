"""Measuring tools for the benchmark: a child process's wall time and its own
peak RSS (wait4 in a small launcher, so one child's figure never mixes with
another's or with the benchmark's own), a raw
JSON-RPC unix-socket client, a trivial echo server as the socket baseline,
and the daemon's memory from /proc.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Run:
    """One finished child process."""

    seconds: float
    maxrss_mb: float  # the child's own peak RSS (ru_maxrss of wait4)
    cpu_s: float  # user + system
    rc: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


# A child's ru_maxrss starts at its parent's peak RSS (Linux copies the
# high-water mark on fork and keeps it across exec), and the benchmark's own
# peak is the largest home it built. So children are started by this small
# launcher, which reports the child's own figures on a pipe.
_LAUNCHER = """
import json, os, sys, time
fd, argv = int(sys.argv[1]), sys.argv[2:]
started = time.perf_counter()
pid = os.posix_spawnp(argv[0], argv, os.environ)
_, status, usage = os.wait4(pid, 0)
seconds = time.perf_counter() - started
os.write(fd, json.dumps([seconds, usage.ru_maxrss, usage.ru_utime + usage.ru_stime]).encode())
sys.exit(min(max(os.waitstatus_to_exitcode(status), 0), 255) if os.WIFEXITED(status) else 128)
"""


def run(argv: list[str], env: dict[str, str]) -> Run:
    """Run argv to completion: wall time from just before its spawn to its
    reap, and its own peak RSS and CPU, as its launcher measured them."""
    read, write = os.pipe()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                [sys.executable, "-S", "-c", _LAUNCHER, str(write), *argv],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                pass_fds=(write,),
            )
            os.close(write)
            with os.fdopen(read, "rb") as report:
                figures = report.read()
            proc.wait()
        finally:
            for fd in (read, write):
                try:
                    os.close(fd)
                except OSError:
                    pass
        out.seek(0)
        err.seek(0)
        seconds, maxrss_kb, cpu_s = json.loads(figures)
        return Run(
            seconds=seconds,
            maxrss_mb=maxrss_kb / 1024,
            cpu_s=cpu_s,
            rc=proc.returncode,
            stdout=out.read().decode(errors="replace"),
            stderr=err.read().decode(errors="replace"),
        )


def agentkeep(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentkeep", *args]


@dataclass
class Import:
    """One line of `python -X importtime`: a module and what importing it
    took, in seconds, with (cumulative) and without (own) what it imported."""

    name: str
    own: float
    cumulative: float
    depth: int  # 0: imported by no module that -X importtime saw


@dataclass
class Imports:
    """What one command line imported, as `python -X importtime` saw it."""

    modules: list[Import]
    rc: int

    @property
    def total(self) -> float:
        """Seconds spent importing: the outermost imports' cumulative times."""
        return sum(i.cumulative for i in self.modules if i.depth == 0)

    def top(self, n: int) -> list[Import]:
        return sorted(self.modules, key=lambda i: i.cumulative, reverse=True)[:n]


def import_times(args: list[str], env: dict[str, str]) -> Imports:
    """`python -X importtime -m agentkeep ARGS`: every module an import
    statement loaded, in order. (A module loaded by importlib.import_module,
    as the adapters are, is not listed itself; what it imports is, at depth 0.)"""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "agentkeep", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    modules = []
    for line in proc.stderr.splitlines():
        head, _, rest = line.partition("import time:")
        fields = rest.split("|")
        if head or len(fields) != 3 or not fields[0].strip().isdigit():
            continue
        own, cumulative, name = fields
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        modules.append(Import(name.strip(), int(own) / 1e6, int(cumulative) / 1e6, depth))
    return Imports(modules, proc.returncode)


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def percentile(xs: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0-100)."""
    if not xs:
        return float("nan")
    ordered = sorted(xs)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


# -- the socket --------------------------------------------------------------
class RpcFailed(Exception):
    pass


def rpc(path: str, method: str, params: dict[str, Any] | None = None, timeout: float = 60) -> Any:
    """One request on a fresh connection (as the CLI does); the result."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        req = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
        sock.sendall(json.dumps(req).encode() + b"\n")
        line = read_line(sock)
    answer = json.loads(line)
    if "error" in answer:
        raise RpcFailed(f"{method}: {answer['error']}")
    return answer["result"]


def read_line(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("closed before a full line")
        end = chunk.find(b"\n")
        if end >= 0:
            chunks.append(chunk[:end])
            return b"".join(chunks)
        chunks.append(chunk)


def timed_rpc(path: str, method: str, params: dict[str, Any] | None = None) -> tuple[float, Any]:
    started = time.perf_counter()
    result = rpc(path, method, params)
    return time.perf_counter() - started, result


def wait_answer(path: str, deadline_s: float, alive: Any = None) -> float:
    """Poll until `status` answers on `path`; seconds waited. A connect that
    fails (no socket yet, refused) is retried every 2 ms; `alive()` false
    means the server died."""
    started = time.perf_counter()
    while (left := deadline_s - (time.perf_counter() - started)) > 0:
        if alive is not None and not alive():
            raise RpcFailed("the daemon exited before answering")
        try:
            rpc(path, "status", timeout=left)
            return time.perf_counter() - started
        except (FileNotFoundError, ConnectionRefusedError):
            time.sleep(0.002)
        except TimeoutError:
            break  # connected, but no answer in the time left
    raise RpcFailed(f"no answer on {path} within {deadline_s} s")


_ECHO = r"""
import os, socketserver, sys
class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(line)
            self.wfile.flush()
path = sys.argv[1]
with socketserver.ThreadingUnixStreamServer(path, Echo) as server:
    print("ready", flush=True)
    server.serve_forever()
"""


class EchoServer:
    """A trivial threaded python unix-socket server answering each line with
    itself: what a round trip costs with no work behind it."""

    def __init__(self, directory: str, env: dict[str, str]) -> None:
        self.path = os.path.join(directory, "echo.sock")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _ECHO, self.path],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != b"ready":
            raise RuntimeError("echo server did not start")

    def round_trip(self) -> float:
        started = time.perf_counter()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(self.path)
            req = {"jsonrpc": "2.0", "id": 1, "method": "status", "params": {}}
            sock.sendall(json.dumps(req).encode() + b"\n")
            read_line(sock)
        return time.perf_counter() - started

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        Path(self.path).unlink(missing_ok=True)


# -- the daemon's memory and cpu ---------------------------------------------
def proc_status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of a live process, in MB."""
    found = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0]) / 1024
    return found


def settle(pid: int, quiet: float = 2.0, deadline: float = 120.0) -> bool:
    """Wait until a live process used (almost) no CPU for `quiet` seconds:
    what it does after answering (the daemon's watcher catching up on the
    events of a prune) counts in the peak read next. False past `deadline`."""
    end = time.monotonic() + deadline
    last, since = cpu_seconds(pid), time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.25)
        now = cpu_seconds(pid)
        if now - last > 0.02:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return True
    return False


def reset_peak(pid: int) -> None:
    """Start VmHWM again from the current RSS (Linux: clear_refs 5), so that
    the next proc_status() peak is that of what ran since."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a live process has used (its threads included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks
