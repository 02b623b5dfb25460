"""`agentkeep ui`: where the disk went, why each session stays, and acting
on it, in the terminal (Textual, the optional `ui` extra).

Nothing here decides anything. Every figure and every verdict comes from
the core functions the CLI calls, asked of the daemon over its socket when
it runs and done in-process otherwise (runner.Runner): `ls`, `du`, `status`,
the trash, and the configured retention's dry run (`prune` with dry_run),
whose report says of each old session whether it goes and why it stays.
Actions (pin, purge, restore, prune) are those same calls, so the locks and
the checks again under them are the CLI's.

- backend: the blocking calls (run in Textual's thread workers, never on
  the event loop), and the snapshot of what is shown
- live: the daemon's `subscribe` stream on a thread of its own
- verdict: a session's line of the plan, in words
- charts: bars and the idle-age histogram as rich text
- overview, sessions, trash, dialogs: one module per screen or concern
- app: the application, its keys and its refresh rules
"""
