"""The functions the CLI and the daemon both call.

Each takes a Context (one user's config, adapters, index and state dir) and
plain parameters, and returns the contract's JSON shapes. The daemon adds
only watching, scheduling and serving around these; the CLI only parsing and
rendering. The modules, one concern each: context (one user's view),
indexing (the index brought up to the disk), sessions (`ls`, `show`, `pin`),
reclaim (`du` and what a prune would give back), pruning (`prune`, `purge`),
trashcan (the trash and `restore`), gone (`history`, the record of what
went), status.

Nothing is imported here: a caller imports each name from its module, so a
command loads only the modules it calls (`status` never loads the prune's
act, nor the removal).
"""
