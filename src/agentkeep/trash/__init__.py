"""The trash: pruned sessions wait here, restorable, until they expire.

The modules: entries (an entry and its entry.json, finding and reading
them), writing (an entry written during a prune: renamed in, nothing
copied), rows (the database rows an entry keeps), packing (an entry
compressed after the prune, and unpacked again: archive and unpack are
its format), moveback (a tree moved back, never overwriting), restoring
(a session and its trashed ancestors put back), restored (when each was
last restored), expiry (expiry and emptying). Every action on an entry takes its session's leases
(leases.take_session): it never acts on a session someone holds, nor
races a prune of it.

Nothing is imported here: a caller imports each name from its module.
"""
