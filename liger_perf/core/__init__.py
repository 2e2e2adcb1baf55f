"""What every stage stands on: errors a user can act on (``errors``), validated YAML (``config``), the workspace
and its paths (``workspace``), and the words a person reads a comparison in (``wording``). Imports nothing of
liger-perf above it."""
