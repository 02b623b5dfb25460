"""Work agentkeep runs in child processes, and why.

- The daemon's heavy work (a prune, a purge, a scan, the reconcile after a
  flood of events) runs in a child of its own, `python -m
  agentkeep.daemon.child` (daemon/child.py), for the daemon's memory: such
  work holds what it lists until it ends, and an allocator keeps much of
  what it was given (at 50,000 sessions a prune took the daemon from 47 MB
  to 170 MB). A child gives all of it back when it exits; the daemon only
  passes the answer on, and stays flat.
- A big scan is spread over one child per CPU (children/scan.py), for its
  speed: measuring is the interpreter's work per file, bound to one CPU, and
  a home of thousands of sessions is measured faster over several.
"""
