"""`agentkeep ui`: where the disk went, why each session stays, and acting
on it, in the terminal (Textual, the optional `ui` extra).

Nothing here decides anything: every figure, verdict and action is a call
of the core the CLI makes (runner.Runner: by the daemon when it runs, else
in-process), so the locks and the checks again under them are the CLI's.
"""
