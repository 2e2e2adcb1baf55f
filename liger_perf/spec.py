"""What a kernel's ``spec.py`` imports: ``from liger_perf.spec import KernelSpec, Tolerance, Tolerances, ...``.

The spec's types live in ``liger_perf.kernel.spec``; this is the path every workspace's specs (the built-in ones,
those ``liger-perf new`` writes, and the user's own) import them from, kept stable across the package's layout.
"""

from liger_perf.kernel.spec import (PASSES, Case, Footprint, ForwardFn, Inputs, KernelSpec, Outputs, Remedy, Shape,
                                    Tolerance, Tolerances, dtype_name, shape_label)

__all__ = ["PASSES", "Case", "Footprint", "ForwardFn", "Inputs", "KernelSpec", "Outputs", "Remedy", "Shape",
           "Tolerance", "Tolerances", "dtype_name", "shape_label"]
