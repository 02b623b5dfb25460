"""The daemon (`agentkeep serve`): watch -> index, schedule -> prune, serve -> core.

One module per concern: `main` (its life: start-up, signals, stop),
`answers` (the socket's method table), `work` (its jobs and what watch
events ask for), `child` (heavy work in a process of its own), `server`,
`connection` and `rpc` (the unix socket, one client's lines, JSON-RPC),
`limits` (what clients may hold), `changes` (what `subscribe` streams),
`watch`, `observer`, `inotify` and `events` (the directory watches and the
inotify budget), `schedule` (apscheduler jobs), `notify` (systemd
readiness) and `memory` (giving memory back). Importing this package
imports none of them, so the CLI's socket client stays light.
"""
