"""The daemon (`agentkeep serve`): watch -> index, schedule -> prune, serve -> core.

`main` is its life; importing this package imports none of its modules, so
the CLI's socket client stays light.
"""
