"""Prune: plan which idle sessions go, then act on each under its lease.

Every session old enough to go ends in the report: removed, kept with a
reason, or failed (invariant 9). The modules: report (what a run reports),
view (the disk as listed), evidence (who holds a session), plan (the pure
decision), remove (taking and removing one session), act (the plan carried
out batch by batch), recovery (finishing the journal), run (one run's
steps), pause (the scheduled prune's pause files), lock (one prune at a
time).

Nothing is imported here: a caller imports each name from its module, so a
command that only reads (`status`, `ls`) never loads the act or the removal.
"""
