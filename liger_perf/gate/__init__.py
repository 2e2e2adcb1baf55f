"""The correctness gate: every output and gradient against the references on any valid input (``correctness``),
a short training run (``convergence``); the gate in a contained process of its own (``process``) and the rest
of it in a fresh one after a device fault (``resume``)."""
