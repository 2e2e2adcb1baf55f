"""The correctness gate: a variant must compute the spec's function, on any valid input, before it is timed.

For each case (shape x dtype x kernel options) it draws fresh random inputs, runs the forward and every
gradient of the variant with freshly allocated memory poisoned (NaN-filled, so an unwritten element fails),
and compares each output against

* the spec's PyTorch reference in the same dtype, which follows the casting mode step by step (tight
  tolerances: this is what catches a cast in the wrong place), and
* the same math in float64 (tolerances scaled to the dtype: this catches gross errors).

Every other case feeds inputs whose rows are padded (a row stride larger than the row, different for each
input, padding filled with NaN), so a kernel that mixes up strides or reads past a row fails. NaN or Inf in an
output never passes, and neither does a variant that writes into its inputs.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from liger_perf.device import Device
from liger_perf.spec import Case, KernelSpec, Tolerance, dtype_name, shape_label
from liger_perf.variants import Variant

aten = torch.ops.aten

COLUMNS = ["case", "shape", "dtype", "config", "layout", "output", "against", "max_abs_err", "max_rel_err",
           "norm_rel_err", "verdict", "reason"]


class PoisonAllocations(TorchDispatchMode):
    """Fill every tensor allocated uninitialised (``torch.empty`` and friends) with NaN, or -1 for integers."""

    ALLOCATORS = {aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default,
                  aten.new_empty.default, aten.new_empty_strided.default}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in self.ALLOCATORS and isinstance(out, torch.Tensor) and out.numel():
            if out.is_floating_point() or out.is_complex():
                out.fill_(float("nan"))
            elif out.dtype != torch.bool:
                out.fill_(-1)
        return out


@dataclass
class GateResult:
    rows: pd.DataFrame
    convergence: pd.DataFrame = field(default_factory=lambda: pd.DataFrame())

    convergence_skipped: bool = False  # the unit checks failed, so the convergence run was not attempted

    @property
    def passed(self) -> bool:
        unit_ok = bool(len(self.rows)) and bool((self.rows["verdict"] == "pass").all())
        conv_ok = self.convergence.empty or bool((self.convergence["verdict"] == "pass").all())
        return unit_ok and conv_ok

    def failures(self) -> pd.DataFrame:
        return self.rows[self.rows["verdict"] != "pass"]


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> dict[str, Any]:
    """Errors of ``out`` against ``ref`` and whether they are within ``tol``; NaN or Inf always fails."""
    if out.shape != ref.shape:
        return {"max_abs_err": math.inf, "max_rel_err": math.inf, "norm_rel_err": math.inf, "verdict": "FAIL",
                "reason": f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}"}
    out64, ref64 = out.detach().double().cpu(), ref.detach().double().cpu()
    bad = ~torch.isfinite(out64)
    if bad.any():
        first = tuple(int(i) for i in bad.nonzero()[0])
        return {"max_abs_err": math.nan, "max_rel_err": math.nan, "norm_rel_err": math.nan, "verdict": "FAIL",
                "reason": f"{int(bad.sum())} non-finite elements (unwritten or overflowed), first at {first}"}
    if out64.numel() == 0:
        return {"max_abs_err": 0.0, "max_rel_err": 0.0, "norm_rel_err": 0.0, "verdict": "pass", "reason": ""}
    diff = (out64 - ref64).abs()
    allowed = tol.atol + tol.rtol * ref64.abs()
    max_abs = float(diff.max())
    max_rel = float((diff / (ref64.abs() + tol.atol)).max())
    norm_rel = float(diff.norm() / ref64.norm().clamp_min(1e-30))
    # A result that is subnormal in its dtype keeps only a few bits, so its relative error can be large while
    # the result is as exact as the dtype allows: allow each element half the dtype's smallest subnormal.
    finfo = torch.finfo(out.dtype) if out.is_floating_point() else None
    subnormal_floor = 0.5 * finfo.smallest_normal * finfo.eps * math.sqrt(diff.numel()) if finfo else 0.0
    reasons = []
    over = diff > allowed
    if over.any():
        idx = torch.unravel_index((diff - allowed).flatten().argmax(), diff.shape)
        worst = tuple(int(i) for i in idx)
        reasons.append(f"{int(over.sum())} elements beyond atol={tol.atol:g}+rtol={tol.rtol:g}*|ref|, worst at "
                       f"{worst}: {float(out64[worst]):.6g} vs {float(ref64[worst]):.6g}")
    if float(diff.norm()) > tol.norm * float(ref64.norm()) + subnormal_floor:
        reasons.append(f"||err||/||ref|| = {norm_rel:.3g} > {tol.norm:g}")
    return {"max_abs_err": max_abs, "max_rel_err": max_rel, "norm_rel_err": norm_rel,
            "verdict": "FAIL" if reasons else "pass", "reason": "; ".join(reasons)}


def _padded(t: torch.Tensor, pad: int) -> torch.Tensor:
    """The same values in a buffer whose rows are ``pad`` elements longer, the padding NaN."""
    if t.dim() < 2:
        return t.clone()
    buf = torch.full((*t.shape[:-1], t.shape[-1] + pad), float("nan"), dtype=t.dtype, device=t.device)
    view = buf[..., : t.shape[-1]]
    view.copy_(t)
    return view


def _leaves(inputs: dict[str, torch.Tensor], differentiable, layout: str, dtype=None):
    leaves = {}
    for i, (name, t) in enumerate(inputs.items()):
        t = t.detach().to(dtype) if dtype is not None else t.detach()
        t = _padded(t, 3 + 2 * i) if layout == "padded" else t.clone()
        leaves[name] = t.requires_grad_(name in differentiable)
    return leaves


def _run(forward, spec: KernelSpec, leaves, config, cotangents=None, poison: bool = False, generator=None):
    """Forward outputs and the gradients of every differentiable input, named as the spec names them, and the
    cotangents used (drawn from ``generator`` for the outputs' shapes when none are given)."""
    with PoisonAllocations() if poison else contextlib.nullcontext():
        outputs = forward(leaves, config)
        if not isinstance(outputs, (tuple, list)):
            outputs = (outputs,)
        if cotangents is None:
            cotangents = spec.grad_outputs(tuple(o.detach() for o in outputs), generator)
        diff_leaves = [leaves[n] for n in spec.differentiable]
        # Clones: an in_place variant may overwrite the cotangent it is given.
        grads = torch.autograd.grad(outputs, diff_leaves, [c.clone() for c in cotangents])
    named = dict(zip(spec.outputs, outputs))
    named.update(zip(spec.gradient_names(), grads))
    return named, cotangents


def check_case(spec: KernelSpec, variant: Variant, case: Case, device: Device, layout: str = "contiguous",
               generator: torch.Generator | None = None) -> list[dict[str, Any]]:
    base = {"case": case.label(), "shape": shape_label(case.shape), "dtype": dtype_name(case.dtype),
            "config": case.config_label(), "layout": layout}
    tol = spec.tolerance(case.dtype, case.config)
    inputs = spec.make_inputs(case.shape, case.dtype, device.torch_device, generator, case.config)
    snapshot = {k: v.detach().clone() for k, v in inputs.items()}

    ref, cotangents = _run(spec.reference_forward(), spec, _leaves(inputs, spec.differentiable, "contiguous"),
                           case.config, generator=generator)
    ref64, _ = _run(spec.reference_forward(), spec,
                    _leaves(inputs, spec.differentiable, "contiguous", torch.float64), case.config,
                    [c.double() for c in cotangents])

    cand_leaves = _leaves(inputs, spec.differentiable, layout)
    try:
        got, _ = _run(spec.variant_forward(variant.module), spec, cand_leaves, case.config, cotangents, poison=True)
        device.synchronize()
    except Exception as e:  # a variant that crashes fails the gate; the message says where
        return [{**base, "output": "*", "against": "-", "max_abs_err": math.nan, "max_rel_err": math.nan,
                 "norm_rel_err": math.nan, "verdict": "FAIL", "reason": f"raised {type(e).__name__}: {e}"[:500]}]

    rows = []
    for name in (*spec.outputs, *spec.gradient_names()):
        same, exact = tol.for_output(name, spec.row_reductions)
        for against, expected, t in (("same-dtype", ref, same), ("float64", ref64, exact)):
            rows.append({**base, "output": name, "against": against, **compare(got[name], expected[name], t)})
    for name, before in snapshot.items():
        if not torch.equal(cand_leaves[name].detach(), before):
            rows.append({**base, "output": name, "against": "input unchanged", "max_abs_err": math.nan,
                         "max_rel_err": math.nan, "norm_rel_err": math.nan, "verdict": "FAIL",
                         "reason": f"the variant wrote into its input {name}"})
    return rows


def check_variant(spec: KernelSpec, variant: Variant, device: Device, convergence: bool = True,
                  progress=None, generator: torch.Generator | None = None, fail_fast: bool = False,
                  cases: list[Case] | None = None) -> GateResult:
    """Run the whole gate: every check case, then (only if all pass) the convergence run.

    ``fail_fast`` stops at the first failing case (a verdict is all the loop needs; a person wants every row).
    ``cases``: a subset of the check cases instead (the tests'); a trial always runs them all."""
    from liger_perf.convergence import check_convergence

    cases = spec.cases(device.suite, "check") if cases is None else cases
    rows: list[dict[str, Any]] = []
    shapes = list(spec.check_shapes[device.suite])
    for case in cases:
        layout = "padded" if shapes.index(case.shape) % 2 == 1 else "contiguous"
        case_rows = check_case(spec, variant, case, device, layout, generator)
        rows.extend(case_rows)
        if progress is not None:
            progress(case)
        if fail_fast and any(r["verdict"] != "pass" for r in case_rows):
            break
    result = GateResult(pd.DataFrame(rows, columns=COLUMNS))
    if convergence:
        if result.failures().empty:
            result.convergence = check_convergence(spec, variant, device)
        else:
            result.convergence_skipped = True
    return result
