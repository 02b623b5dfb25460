"""Profile one of agentkeep's costly paths on a synthetic home (cProfile).

    .venv/bin/python bench/profile.py scan 10000
    .venv/bin/python bench/profile.py prune 1000   # Claude only, all idle
    .venv/bin/python bench/profile.py prune 1000 --trash 7d   # the same, into the trash
    .venv/bin/python bench/profile.py cold 2000    # daemon start-up reconcile, empty index
    .venv/bin/python bench/profile.py warm 10000   # the same on an up-to-date index
    .venv/bin/python bench/profile.py ls 10000     # core.sessions.ls_text over the whole index

Prints wall time, then the top functions by own time and by cumulative time
(file:line), for the lead to compare before and after a fix. The child runs
as the synthetic home's fake user; the tree is removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import homes  # noqa: E402

_OPEN = "from agentkeep.core.context import Context\nfrom agentkeep.paths import Env\n"
_CTX = _OPEN + "ctx = Context.open(Env.from_environ())\n"
SNIPPETS = {
    "scan": _CTX + "from agentkeep.core.indexing import scan\nscan(ctx)\n",
    "prune": _CTX + "from agentkeep.core.pruning import prune\nprune(ctx, older_than='30d')\n",
    "cold": _CTX + "from agentkeep.core.indexing import reconcile\nreconcile(ctx)\n",
    "warm": _CTX + "from agentkeep.core.indexing import reconcile\nreconcile(ctx)\n",
    "ls": _CTX + "from agentkeep.core.sessions import ls_text\nls_text(ctx)\n",
}
SETUP = {"warm": "scan", "ls": "scan"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=sorted(SNIPPETS))
    p.add_argument("n", type=int)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--callers", metavar="FUNC", help="also print who calls FUNC (a regex)")
    p.add_argument("--callees", metavar="FUNC", help="also print whom FUNC calls (a regex)")
    p.add_argument("--trash", default="0", help='the prune\'s trash setting (default "0")')
    p.add_argument("--tmpdir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    a = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="akb-prof-", dir=a.tmpdir))
    try:
        if a.what == "prune":
            bh = homes.make_home(base / "h", a.n, mix={"claude": 1.0}, idle_share=1.0)
            bh.write_config(f'trash = "{a.trash}"\nmax_removals = 1000000\n')
        else:
            bh = homes.make_home(base / "h", a.n)
        if a.what in SETUP:
            code = SNIPPETS[SETUP[a.what]]
            subprocess.run([sys.executable, "-c", code], env=bh.environ, check=True)
        out, script = base / "profile.out", base / f"{a.what}.py"
        script.write_text(SNIPPETS[a.what])
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "cProfile", "-o", str(out), str(script)],
            env=bh.environ,
            check=True,
        )
        print(f"{a.what} at {a.n}: {time.perf_counter() - started:.2f} s under cProfile")
        stats = pstats.Stats(str(out))
        stats.sort_stats("tottime").print_stats(a.top)
        stats.sort_stats("cumulative").print_stats("agentkeep", a.top)
        if a.callers:
            stats.print_callers(a.callers)
        if a.callees:
            stats.print_callees(a.callees)
        bh.remove()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
