"""agentkeep: one careful custodian for every coding agent's sessions."""

__version__ = "0.1.0"
# What `agentkeep --version` prints: by __main__ (before click is imported)
# when it is asked alone, by cli.main's version option otherwise.
VERSION_LINE = f"agentkeep, version {__version__}"
