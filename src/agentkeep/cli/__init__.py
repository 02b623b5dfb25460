"""The `agentkeep` command: parse, ask (the daemon or the core), render.

A command the socket serves is first asked of the running daemon, with the
view this process resolved; with no daemon, or one of another view, the same
core function runs in-process, with the same output. The core and text
output are imported inside the commands that use them, so that `--version`,
`--help` and shell completion import none of them (start-up is most of what
a command the daemon answers costs). cli/group.py holds what every command
shares; the commands are grouped in the other modules.
"""

from agentkeep.cli import daemon, pruning, sessions  # each registers its commands
from agentkeep.cli.group import main
