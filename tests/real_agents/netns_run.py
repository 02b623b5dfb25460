"""Run one agent command in a network namespace of its own, with the mock
model server beside it: nothing but loopback exists for the agent.

    unshare -n -- python netns_run.py PROTOCOL SCRIPT LOG -- ARGV...

Started by isolation.run(); brings up `lo`, serves the mock model on
127.0.0.1:mockmodel.PORT, runs ARGV and exits with its status.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mockmodel


def main(argv: list[str]) -> int:
    protocol, script, log, sep, *command = argv
    assert sep == "--", "usage: netns_run.py PROTOCOL SCRIPT LOG -- ARGV..."
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    server = mockmodel.serve(protocol, Path(script), Path(log))
    try:
        return subprocess.call(command)
    finally:
        server.shutdown()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
