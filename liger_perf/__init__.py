"""liger-perf: an NCU-profile-driven optimization loop for Triton kernels.

The package is laid out along the loop it runs:

* ``registry`` / ``spec`` / ``variants`` -- what a kernel is and what an implementation of it must offer;
* ``device`` -- where a variant runs (a CUDA GPU, or the Triton interpreter on the CPU);
* ``correctness`` / ``convergence`` -- the hard gate every variant must pass before it is measured.
"""

__version__ = "0.1.0"
