"""Build a demo home for a machine with no agent data, and show agentkeep on it.

    python deploy/demo.py DIR

DIR gets a whole fake user (home, XDG dirs, tmp dirs) holding Claude Code,
gemini, grok and zero sessions of various ages, a fork whose parent is old,
and shared files that must never be touched. Then `agentkeep scan`, `ls`,
`du` and `prune --dry-run --older-than 30d` run with that user's
environment, so nothing of the real home is read. The trees are made by the
same builders the tests use.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from build_agents import make_grok_session, make_zero_session  # noqa: E402
from build_claude import make_session  # noqa: E402
from fakehome import make_fake_home  # noqa: E402


def build(root: Path) -> dict[str, str]:
    home = make_fake_home(root)
    old = make_session(home, cwd="/home/you/webapp", age_days=75)
    make_session(home, cwd="/home/you/webapp", age_days=3, parent=old.id)
    for days in (45, 62, 120):
        make_session(home, cwd="/home/you/cli-tool", age_days=days, pad=20_000)
    make_session(home, cwd="/home/you/cli-tool", age_days=0.2)
    zero_root = home.data / "zero" / "sessions"
    make_zero_session(zero_root, "refactor-parser", days=50)
    make_zero_session(zero_root, "fix-ci", days=2)
    make_grok_session(home.home / ".grok", "grok-session-1", workspace="/home/you/notes", days=40)
    return home.environ


MARKER = ".agentkeep-demo"


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(sys.argv[1])
    if root.exists():
        if not (root / MARKER).exists():
            print(
                f"demo: {root} exists and is not a demo home; choose another folder",
                file=sys.stderr,
            )
            return 2
        shutil.rmtree(root)  # our own demo from an earlier run: built afresh
    root.mkdir(parents=True)
    (root / MARKER).touch()
    environ = build(root)
    agentkeep = os.environ.get("AGENTKEEP", "agentkeep")
    for args in (["scan"], ["ls"], ["du"], ["prune", "--dry-run", "--older-than", "30d"]):
        print(f"\n$ agentkeep {' '.join(args)}   # on the demo home {root}", flush=True)
        subprocess.run([agentkeep, *args], env=environ, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
