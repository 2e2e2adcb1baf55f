"""Where a variant's code runs: an allow-listed environment and a scratch folder (``contained``), inside an
operating-system sandbox that shows it only what a trial needs (``sandbox``, bubblewrap)."""
