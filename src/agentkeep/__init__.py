"""agentkeep: one careful custodian for every coding agent's sessions."""

__version__ = "0.1.0"
