"""The functions the CLI and the daemon both call: each takes a Context and
plain parameters and returns the contract's JSON shapes. context (one user's
view), indexing, sessions (`ls`, `show`, `pin`), reclaim (`du`), pruning
(`prune`, `purge`), trashcan (the trash, `restore`), gone (`history`),
status. Nothing is imported here: a command loads only what it calls.
"""
