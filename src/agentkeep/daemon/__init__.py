"""The daemon (`agentkeep serve`): watch -> index, schedule -> prune, serve -> core.

One module per concern: `notify` (systemd readiness), `server` (the unix
socket), `watch` (the watchdog observer and the inotify budget), `schedule`
(apscheduler jobs) and `main` (wiring and signals). Importing this package
imports none of them, so the CLI's socket client stays light.
"""
