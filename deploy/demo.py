"""Build a demo home for a machine with no agent data, and show agentkeep on it.

    python deploy/demo.py DIR

DIR gets a whole fake user (home, XDG dirs, tmp dirs) holding sessions of
every agent agentkeep knows (Claude Code, Codex, opencode, Gemini CLI, grok,
zero) of various ages, a fork whose parent is old, and shared files that
must never be touched (agentkeep.demo builds it). Then `agentkeep scan`,
`ls`, `du` and `prune --dry-run --older-than 30d` run with that user's
environment, so nothing of the real home is read ($AGENTKEEP names the
command, else this Python's agentkeep runs). An earlier demo in DIR is built
afresh; any other existing DIR is refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from agentkeep.demo import Demo, NotADemo, demo_home
from agentkeep.paths import Env

COMMANDS = (["scan"], ["ls"], ["du"], ["prune", "--dry-run", "--older-than", "30d"])


def show(demo: Demo, agentkeep: list[str]) -> None:
    for args in COMMANDS:
        print(f"\n$ agentkeep {' '.join(args)}   # on the demo home", flush=True)
        subprocess.run([*agentkeep, *args], env=demo.home.environ, check=False)


def next_steps(root: Path, demo: Demo) -> str:
    """What the person saw, and what to do next on their own home."""
    config = Env.from_environ().config_path
    install = Path(__file__).resolve().with_name("install.sh")
    return f"""
This was a demo home under {root}:
made-up sessions of every agent agentkeep knows; the config file named above
is the demo's, not yours. The dry run moved nothing, and it would keep the old
{demo.old_parent[:8]} as the ancestor of a recent fork. Your own agents' sessions show
up in `agentkeep ls` once you use them.
Next:
  to see what 30 days' retention would prune of yours:  agentkeep prune --dry-run --older-than 30d
  to have the service prune them:  add  retention = "30d"  to {config}
  to look around:  agentkeep ui
  to remove agentkeep and this demo:  sh {install} --uninstall"""


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(sys.argv[1])
    # $AGENTKEEP: the command to show (install.sh's); else this interpreter's.
    command = os.environ.get("AGENTKEEP")
    agentkeep = [command] if command else [sys.executable, "-m", "agentkeep"]
    try:
        with demo_home(root) as demo:
            show(demo, agentkeep)
            steps = next_steps(root.absolute(), demo)
    except NotADemo as e:
        print(f"demo: {e}", file=sys.stderr)
        return 2
    print(steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
