"""liger-perf: an NCU-profile-driven optimization loop for Triton kernels.

The package is laid out along the loop it runs:

* ``registry`` / ``spec`` / ``variants`` -- what a kernel is and what an implementation of it must offer;
* ``device`` -- where a variant runs (a CUDA GPU, or the Triton interpreter on the CPU);
* ``correctness`` / ``convergence`` -- the hard gate every variant must pass before it is measured;
* observers -- ``fingerprint`` (the environment), ``timing`` (side-by-side times, memory), ``ncu`` (profiles),
  all driven by ``passes`` (how a forward, backward or full pass is run);
* the runner -- ``trial`` (the steps a trial notebook runs), ``runner`` (executes it with Papermill);
* the record -- ``record`` (the notebook contract) and ``history`` (every trial, back as a DataFrame).
"""

__version__ = "0.1.0"
