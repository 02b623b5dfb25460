"""Prune: plan which idle sessions go, then act on each under its lease.

Every session old enough to go ends in the report: removed, kept with a
reason, or failed (invariant 9). report (what a run reports), view (the disk
as listed), evidence (who holds a session), plan (the pure decision), remove
(taking and removing one session), act (the plan carried out), recovery
(finishing the journal), run (one run's steps), pause, lock (one at a time).
Nothing is imported here, so a command that only reads loads none of it.
"""
