"""The `agentkeep` command: parse, ask (the daemon or the core), render.

Every command that the socket serves is first asked of the running daemon,
with the config path, state dir and roots this process resolved; when no
daemon answers, or it sees another user's view (ENV_MISMATCH), the same core
function runs in-process. The output is the same either way.

Start-up is most of what a command the daemon answers costs, so the modules
only in-process work or text output needs (the core and everything under
it) are imported inside the commands that use them: `--version`, `--help`
and shell completion import none of them.

Every command takes `-q` (errors only on stderr) and `-v`/`-vv` (the info
or debug log), before or after its name; the tables take `--wide`.

The command group and what every command shares are in cli/group.py; the
commands, each thin (parse, ask, render), in cli/sessions.py (scan, ls,
show, du), cli/pruning.py (prune, purge, hold, pin, trash, restore),
cli/settings.py (adopt) and cli/daemon.py (serve, status, service, doctor,
ui).
"""

from agentkeep.cli import daemon, pruning, sessions, settings  # each registers its commands
from agentkeep.cli.group import main
