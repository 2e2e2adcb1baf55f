"""Observer: how far each contender's outputs and gradients lie from the float64 reference, on identical inputs.

The correctness gate asks whether a variant is within tolerance; this asks whether it is *as accurate as the
current best*, so that the judge can hold accuracy to the same guardrail as every other metric (a variant that
rounds a gradient once more than it needs to passes the gate and is still a regression).

Per case, one seeded draw of the inputs and of the incoming gradients, shared by every contender; the
reference runs in float64; each contender runs its forward and backward in the case's dtype. The error of an
output or gradient is ``‖got − ref64‖ / ‖ref64‖`` over the whole tensor: a norm over millions of elements is
stable from run to run where a maximum is one element's luck, and for fixed inputs it is deterministic, so no
interval is needed. The judge compares them per dtype, options and output (``history.accuracy_ratios``), errors
below a quarter of the dtype's unit roundoff counting as equal (``history.ERROR_FLOOR``): differences there are
the order of a sum, not a rounding more or less.

The cases: every shape and dtype of the benchmark suite with the benchmark's options, plus every other option
set of the gate (casting modes, offsets) at the suite's first shape; float16 always, as every supported dtype
must stay accurate even where the suite does not time it.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import torch

from liger_perf.kernel.device import Device
from liger_perf.kernel.passes import as_tuple
from liger_perf.kernel.spec import Case, KernelSpec, dtype_name, shape_label

ACCURACY_SEED = 20261201


def accuracy_cases(spec: KernelSpec, suite: str) -> list[Case]:
    shapes = [tuple(s) for s in spec.suites[suite]]
    dtypes = list(dict.fromkeys([*spec.dtypes[suite], torch.float16]))
    bench = dict(spec.bench_config)
    others = [dict(c) for c in spec.check_configs if dict(c) != bench]
    return ([Case(s, d, bench) for d in dtypes for s in shapes]
            + [Case(shapes[0], d, c) for c in others for d in dtypes])


def _error(got: torch.Tensor, exact: torch.Tensor) -> dict[str, Any]:
    """``{"error": ‖got − exact‖ / ‖exact‖ in float64, "nonfinite": bool}``: error None and nonfinite True for a
    result that is not finite where the reference is (JSON has no infinity); error None alone where the reference
    is zero or not finite (nothing to be relative to: not a measurement)."""
    exact = exact.detach().double()
    scale = float(torch.linalg.vector_norm(exact))
    if not math.isfinite(scale) or scale == 0.0:
        return {"error": None, "nonfinite": False}
    diff = float(torch.linalg.vector_norm(got.detach().double() - exact))
    return {"error": diff / scale, "nonfinite": False} if math.isfinite(diff) else {"error": None, "nonfinite": True}


def measure(spec: KernelSpec, contenders: Mapping[str, Callable], device: Device, cases: list[Case],
            seed: int = ACCURACY_SEED, progress: Callable[[str], None] | None = None,
            own: tuple[str, ...] = ("candidate", "best")) -> list[dict[str, Any]]:
    """Rows ``{shape, dtype, config, output, contender, error, nonfinite, reduction, raised}``: each
    contender's error against float64 on each case, every contender on the same inputs and incoming gradients
    (``reduction``: the output is a sum over rows, ``spec.row_reductions``). ``contenders``: forwards
    (``spec.variant_forward(module)``). A contender named in ``own`` that raises ends the measurement (it is the
    one measured); another one (the current best, a peer on a case it never ran) is recorded as having raised."""
    names = (*spec.outputs, *spec.gradient_names())
    rows = []
    for case in cases:
        if progress is not None:
            progress(case.label())
        generator = torch.Generator().manual_seed(seed)
        inputs = spec.make_inputs(case.shape, case.dtype, device.torch_device, generator, case.config)
        wide = {k: t.detach().double().requires_grad_(k in spec.differentiable) for k, t in inputs.items()}
        out64 = as_tuple(spec.reference_forward()(wide, case.config))
        cotangents = spec.grad_outputs(tuple(o.detach().to(case.dtype) for o in out64), generator)
        grads64 = torch.autograd.grad(out64, [wide[n] for n in spec.differentiable],
                                      [c.double() for c in cotangents])
        exact = dict(zip(names, (*out64, *grads64)))
        del wide, out64, grads64
        base = {"shape": shape_label(case.shape), "dtype": dtype_name(case.dtype), "config": case.config_label()}
        for contender, forward in contenders.items():
            leaves = {k: t.detach().clone().requires_grad_(k in spec.differentiable) for k, t in inputs.items()}
            try:
                outputs = as_tuple(forward(leaves, case.config))
                grads = torch.autograd.grad(outputs, [leaves[n] for n in spec.differentiable],
                                            [c.clone() for c in cotangents])
                device.synchronize()
            except Exception as e:
                if contender in own:
                    raise
                rows += [{**base, "output": name, "contender": contender, "error": None, "nonfinite": False,
                          "reduction": name in spec.row_reductions, "raised": f"{type(e).__name__}: {e}"[:300]}
                         for name in names]
                continue
            for name, got in zip(names, (*outputs, *grads)):
                rows.append({**base, "output": name, "contender": contender, **_error(got, exact[name]),
                             "reduction": name in spec.row_reductions, "raised": ""})
            del leaves, outputs, grads
        del exact, inputs
    return rows
