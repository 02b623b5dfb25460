"""The `agentkeep` command's entry: the console script and `python -m agentkeep`.

`agentkeep --version` alone is answered here, before click and the CLI are
imported (a shell prompt may ask it often); the rest goes to cli.main.
"""

import os
import sys

from agentkeep import VERSION_LINE


def _asks_only_version(argv: list[str]) -> bool:
    """The command line is `--version` alone, and no shell is completing one
    (click reads _<PROG>_COMPLETE, whatever the arguments, and answers that)."""
    completing = any(name.startswith("_") and name.endswith("_COMPLETE") for name in os.environ)
    return argv == ["--version"] and not completing


def main(prog_name: str | None = None) -> None:
    """Run the command line in sys.argv; `prog_name` as cli.main takes it."""
    if _asks_only_version(sys.argv[1:]):
        sys.stdout.write(VERSION_LINE + "\n")
        sys.stdout.flush()
        sys.exit(0)
    from agentkeep.cli import main as cli

    cli(prog_name=prog_name)


# Guarded: a worker process started by `spawn` imports the main module again.
if __name__ == "__main__":
    # Named as the console script is, for usage lines and _AGENTKEEP_COMPLETE.
    main(prog_name="agentkeep")
