"""The trash: pruned sessions wait here, restorable, until they expire.

entries (an entry, found and read), writing (written by a prune, renamed
in, with its database rows), packing with archive and unpack (compressed
after the prune), restoring (put back), restored (when), expiry (expiry
and emptying). Every action on an entry takes its session's leases
(leases.take_session). Callers import each name from its module.
"""
