"""The correctness gate: a variant must compute the spec's function, on any valid input, before it is timed.

Every case (a shape, a dtype and the kernel's options, with a *probe*: how its inputs and gradients are laid out
and valued) runs the forward and every gradient of the variant, freshly allocated memory poisoned (NaN-filled,
so an unwritten element fails), and compares each output against

* the spec's PyTorch reference in the same dtype, which follows the casting mode step by step (tight
  tolerances: this is what catches a cast in the wrong place), and
* the same math in float64 (tolerances scaled to the dtype: this catches gross errors).

What a case checks besides the values, each derived from the spec so that a new kernel gets all of it:

* the contract: every output has the reference's dtype and shape (every gradient its input's), in every casting
  mode; inputs of N-D shape (``spec.batched_shape``: batch, sequence, hidden) come back in their shape;
* layouts: inputs whose rows are padded (a row stride longer than the row, the padding NaN) and 1-D parameters
  with a stride of 2; incoming gradients as autograd hands them over in models: contiguous, a slice of a wider
  tensor (a ``torch.cat`` of outputs), transposed storage, or expanded with a row stride of 0 (the gradient of
  a sum);
* nothing written where it must not be: neither the inputs nor, unless the spec allows it for the options
  (``spec.may_overwrite_cotangents``), the incoming gradients;
* reuse: the backward run a second time on the same graph gives the same gradients (saved tensors intact);
* edge values, compared as PyTorch behaves (the reference's NaN and infinities must come out where they come
  out of PyTorch, and nowhere else): all-zero rows (padding tokens), rows whose mean square is of the order of
  ``eps``, rows whose squares overflow the dtype, rows near the dtype's largest value, NaN and infinities;
* sizes at the variant's own edges: rows just past and just short of the block and tile sizes its knobs name
  (``spec.boundary_shapes``);
* on the GPU only: a case of more than 2**31 elements (32-bit offsets overflow in it), and a determinism and
  race check: forward and backward repeated, then run on several streams at once, must give bit-identical
  results, unless the variant declares ``DETERMINISTIC = False`` (atomics), when each run is held to the
  tolerances instead.

Verdicts are reproducible: each case draws its inputs from a seed fixed by the case (``seed`` moves the whole
set), plus, in trials, one fresh draw whose seed is recorded; a case that uses more than ``BORDERLINE`` of any
tolerance is drawn again (up to ``REDRAWS`` times) until it fails or stays under. Each row records its seed and
how much of its tolerance it used. The interpreter runs programs one after another and rounds to bfloat16 as
no GPU does, so races and bfloat16 paths are only seen on the GPU: the judge never accepts a trial whose gate
ran on the interpreter alone.
"""

from __future__ import annotations

import contextlib
import math
import os
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy
import pandas as pd
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from liger_perf.kernel.device import Device
from liger_perf.kernel.spec import Case, KernelSpec, Tolerance, dtype_name, shape_label
from liger_perf.kernel.variants import Variant
from liger_perf.core.errors import UserError
from liger_perf.core.wording import count

aten = torch.ops.aten

COLUMNS = ["case", "shape", "dtype", "config", "layout", "seed", "output", "against", "max_abs_err", "max_rel_err",
           "norm_rel_err", "tolerance_used", "verdict", "reason"]
FIXED_SEED = 0
#: A case that used more than this share of any tolerance is drawn again: a mistake that shows only on some
#: inputs comes near its tolerance on others.
BORDERLINE = 0.5
REDRAWS = 3
COTANGENT_LAYOUTS = ("contiguous", "sliced", "transposed", "expanded")
#: Elements compared at once (in float64, on the outputs' device): a 2**31-element output is compared in pieces.
COMPARE_CHUNK = 1 << 26
#: The large case's inputs and gradients: this many rows drawn, then repeated down the rows (drawing 2**31
#: numbers on the CPU would take longer than the rest of the gate).
LARGE_DRAWN_ROWS = 1021
#: Elements of a row input the large case's reference takes at once (``_large_reference``): whole, its float32
#: intermediates came to about 10 inputs' worth at its peak (a CPU stand-in at 1/16 of the case's size), of the
#: 23 (92.1 GiB) the case took on the H200.
REFERENCE_CHUNK = 1 << 28


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


@dataclass(frozen=True)
class Probe:
    """What a case tests besides the math: how its inputs and incoming gradients are laid out and valued."""

    inputs: str = "contiguous"  # "contiguous" or "padded"
    cotangents: str = "contiguous"  # one of COTANGENT_LAYOUTS
    batched: bool = False  # N-D inputs (spec.batched_shape)
    values: str = "random"  # "random", "edges" (zero, tiny, overflowing rows) or "nonfinite" (NaN, +-Inf)

    def label(self) -> str:
        parts = [self.inputs]
        if self.cotangents != "contiguous":
            parts.append(f"gradients {self.cotangents}")
        if self.batched:
            parts.append("N-D")
        if self.values != "random":
            parts.append(f"{self.values} values")
        return ", ".join(parts)


@dataclass(frozen=True)
class GateCase:
    case: Case
    probe: Probe = Probe()
    kind: str = "sweep"  # "sweep" (the spec's check cases), "values", "boundary", "large" (GPU only), "quick"

    def shape(self, spec: KernelSpec) -> tuple[int, ...]:
        return spec.batched_shape(self.case.shape) if self.probe.batched else tuple(self.case.shape)

    def seed(self, base: int) -> int:
        """The case's fixed seed: the same inputs whenever the same case runs with the same ``base``."""
        return (zlib.crc32(f"{self.case.label()}|{self.probe.label()}|{self.kind}".encode()) + base) % 2**31


@dataclass
class GateResult:
    rows: pd.DataFrame
    convergence: pd.DataFrame = field(default_factory=lambda: pd.DataFrame())

    convergence_skipped: bool = False  # the unit checks failed, so the convergence run was not attempted
    interpreted: bool = False  # ran under the Triton interpreter: no races, no GPU bfloat16 (never enough to accept)

    @property
    def passed(self) -> bool:
        unit_ok = bool(len(self.rows)) and bool((self.rows["verdict"] == "pass").all())
        conv_ok = self.convergence.empty or bool((self.convergence["verdict"] == "pass").all())
        return unit_ok and conv_ok

    def failures(self) -> pd.DataFrame:
        return self.rows[self.rows["verdict"] != "pass"]

    @property
    def machine_limited(self) -> bool:
        """Not passed only because the machine kept cases from running (rows ``not run``): no verdict."""
        failures = self.failures()
        return (not failures.empty and bool((failures["verdict"] == NOT_RUN).all())
                and (self.convergence.empty or bool((self.convergence["verdict"] == "pass").all())))

    @property
    def worst_tolerance_used(self) -> float:
        """The largest share of a tolerance any passing comparison used (1 is the limit)."""
        used = self.rows.loc[self.rows["verdict"] == "pass", "tolerance_used"].dropna()
        return float(used.max()) if len(used) else math.nan


def _failure(reason: str) -> dict[str, Any]:
    return {"max_abs_err": math.nan, "max_rel_err": math.nan, "norm_rel_err": math.nan, "tolerance_used": math.inf,
            "verdict": "FAIL", "reason": reason}


NOT_RUN = "not run"  # a row's verdict where the machine, not the variant, kept the case from running


def _not_run(reason: str) -> dict[str, Any]:
    return {"max_abs_err": math.nan, "max_rel_err": math.nan, "norm_rel_err": math.nan,
            "tolerance_used": math.nan, "verdict": NOT_RUN, "reason": reason}


class DeviceFault(Exception):
    """A variant faulted the device (an illegal address, a misaligned access, a trap): CUDA's error is sticky,
    so no later case can run in this process. ``rows``: the case's rows so far, the faulting one last."""

    def __init__(self, rows: list[dict[str, Any]]):
        super().__init__(rows[-1]["reason"] if rows else "device fault")
        self.rows = rows


#: What CUDA reports when a kernel faulted the device; after it the process's context is unusable.
_FAULTS = ("illegal memory access", "misaligned address", "illegal instruction", "device-side assert",
           "unspecified launch failure", "an illegal address", "hardware exception", "warp out-of-range",
           "cuda error", "cuda driver error", "acceleratorerror")


def device_fault(error: BaseException) -> bool:
    """Whether ``error`` is a CUDA error that leaves the device unusable in this process (out of memory is not:
    it is the machine's, see ``_out_of_memory``)."""
    if _out_of_memory(error):
        return False
    accelerator = getattr(torch, "AcceleratorError", None)
    if accelerator is not None and isinstance(error, accelerator):
        return True
    text = f"{type(error).__name__}: {error}".lower()
    return any(marker in text for marker in _FAULTS)


def _out_of_memory(error: BaseException) -> bool:
    return isinstance(error, torch.OutOfMemoryError) or "out of memory" in str(error).lower()


def _describe(counts: dict[str, int], first: tuple[int, ...]) -> str:
    return ", ".join(f"{n} {what}" for what, n in counts.items() if n) + f", first at {first}"


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance, check_dtype: bool = False,
            exact: tuple[torch.Tensor, Tolerance] | None = None,
            spread: torch.Tensor | None = None) -> dict[str, Any]:
    """Errors of ``out`` against ``ref`` and whether they are within ``tol``.

    Non-finite values must be where the reference has them (NaN for NaN, an infinity of the same sign), and
    nowhere else: an unwritten (poisoned) or overflowed element fails. Where ``ref`` overflowed in its own dtype
    but ``exact`` (the float64 reference and its tolerance) is finite, a finite ``out`` within that tolerance of
    it passes too: a kernel may round fewer intermediates than PyTorch does. ``check_dtype``: ``out`` must also
    have the reference's dtype. ``spread``: a further allowance per element (a row reduction's summation
    spread, ``sum_spread``), added to the element-wise bound. The norm bound is ``tol.norm`` of the reference's
    norm, with the rounding noise of few elements beside it (``ROUNDING_FLIPS``). ``tolerance_used`` is the
    largest share of the element-wise or the norm bound used."""
    if not isinstance(out, torch.Tensor) or out.layout != torch.strided:
        # A sparse or blocked result got through autograd once and then crashed the comparison: fail it instead.
        layout = getattr(out, "layout", type(out).__name__)
        return _failure(f"a {layout} result, not a dense (strided) tensor")
    if out.shape != ref.shape:
        return _failure(f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    if check_dtype and out.dtype != ref.dtype:
        return _failure(f"dtype {dtype_name(out.dtype)} != reference {dtype_name(ref.dtype)}")
    if out.numel() == 0:
        return {"max_abs_err": 0.0, "max_rel_err": 0.0, "norm_rel_err": 0.0, "tolerance_used": 0.0,
                "verdict": "pass", "reason": ""}
    flat_out, flat_ref = out.detach().reshape(-1), ref.detach().reshape(-1)  # ref may be on the host: by chunks
    flat_spread = None if spread is None else spread.detach().reshape(-1).to(out.device).double()
    max_abs = max_rel = max_used = 0.0
    err_sq = ref_sq = 0.0
    over, finite = 0, 0
    worst = (-math.inf, 0, 0.0, 0.0)  # (excess over the bound, flat index, out, ref)
    mismatch = {"non-finite where the reference is finite (unwritten or overflowed)": 0,
                "finite or different where the reference is NaN or infinite": 0}
    first_mismatch = None
    finfo = torch.finfo(out.dtype) if out.is_floating_point() else None
    exponents = torch.zeros(EXPONENT_BINS, dtype=torch.float64)  # the reference's binary exponents, counted
    for start in range(0, flat_out.numel(), COMPARE_CHUNK):
        o = flat_out[start:start + COMPARE_CHUNK].double()
        r = flat_ref[start:start + COMPARE_CHUNK].to(o.device).double()
        ref_ok, out_ok = torch.isfinite(r), torch.isfinite(o)
        unwritten = ref_ok & ~out_ok
        # Same kind of special value: NaN for NaN, +inf for +inf (equality holds for infinities, not NaN).
        special_wrong = ~ref_ok & ~((torch.isnan(r) & torch.isnan(o)) | (torch.isinf(r) & (o == r)))
        if exact is not None and bool(special_wrong.any()):
            wide = exact[0].detach().reshape(-1)[start:start + COMPARE_CHUNK].to(o.device).double()
            atol = exact[1].atol if math.isfinite(exact[1].atol) else 0.0  # a row reduction's: rtol alone
            within = (o - wide).abs() <= atol + exact[1].rtol * wide.abs()
            special_wrong &= ~(out_ok & torch.isfinite(wide) & within)
        for key, bad in zip(mismatch, (unwritten, special_wrong)):
            n = int(bad.sum())
            if n:
                mismatch[key] += n
                index = start + int(bad.nonzero()[0, 0])
                first_mismatch = first_mismatch if first_mismatch is not None else index
        both = ref_ok & out_ok
        o, r = o[both], r[both]
        if not o.numel():
            continue
        finite += o.numel()
        diff = (o - r).abs()
        allowed = tol.atol + tol.rtol * r.abs()
        if flat_spread is not None:
            allowed = allowed + flat_spread[start:start + COMPARE_CHUNK][both]
        max_abs = max(max_abs, float(diff.max()))
        max_rel = max(max_rel, float((diff / (r.abs() + tol.atol)).max()))
        max_used = max(max_used, float((diff / allowed).max()))
        err_sq += float((diff * diff).sum())
        ref_sq += float((r * r).sum())
        if finfo is not None:
            exponents += _exponent_counts(r)
        excess = diff - allowed
        over += int((excess > 0).sum())
        k = int(excess.argmax())
        if float(excess[k]) > worst[0]:
            position = int(both.nonzero()[k, 0]) + start
            worst = (float(excess[k]), position, float(o[k]), float(r[k]))
    norm_rel = math.sqrt(err_sq) / max(math.sqrt(ref_sq), 1e-30)
    # A result that is subnormal in its dtype keeps only a few bits, so its relative error can be large while
    # the result is as exact as the dtype allows: allow each element half the dtype's smallest subnormal.
    subnormal_floor = 0.5 * finfo.smallest_normal * finfo.eps * math.sqrt(finite) if finfo else 0.0
    flips = math.ceil(ROUNDING_FLIPS * math.sqrt(finite))
    rounding = _largest_ulps_norm(exponents, flips, finfo) if finfo is not None else 0.0
    norm_bound = math.hypot(tol.norm * math.sqrt(ref_sq), rounding) + subnormal_floor
    norm_used = math.sqrt(err_sq) / norm_bound if norm_bound > 0 else (0.0 if err_sq == 0 else math.inf)
    reasons = []
    if any(mismatch.values()):
        reasons.append(_describe(mismatch, _unravel(first_mismatch, out.shape)))
    if over:
        reasons.append(f"{count(over, 'element')} beyond atol={tol.atol:g}+rtol={tol.rtol:g}*|ref|"
                       + ("" if spread is None else f"+{SUM_SPREAD:g}*eps*sqrt(sum of squared row terms)")
                       + f", worst at {_unravel(worst[1], out.shape)}: {worst[2]:.6g} vs {worst[3]:.6g}")
    if math.sqrt(err_sq) > norm_bound:
        reasons.append(f"||err||/||ref|| = {norm_rel:.3g} > {tol.norm:g}"
                       + (f" (with one ulp at the {count(flips, 'largest element')}: "
                          f"{norm_bound / max(math.sqrt(ref_sq), 1e-30):.3g})" if rounding else ""))
    used = math.inf if any(mismatch.values()) else max(max_used, norm_used)
    return {"max_abs_err": max_abs, "max_rel_err": max_rel, "norm_rel_err": norm_rel, "tolerance_used": used,
            "verdict": "FAIL" if reasons else "pass", "reason": "; ".join(reasons)}


#: Two results rounded to the same half-precision dtype from slightly different wider values differ by one unit
#: in the last place (ulp) wherever a rounding boundary falls between them. ``tol.norm`` is that noise spread
#: over many elements; over a few its share of the norm swings with which elements flip (a flip at an element
#: that dominates the norm costs its whole ulp). So the norm bound also admits one ulp of the output's dtype at
#: the ceil(ROUNDING_FLIPS * sqrt(n)) largest of the reference's n elements, in quadrature with ``tol.norm``:
#: about three standard deviations of the number of flips among n. Seen on the H200: the best's dW of 3x8
#: bfloat16 (casting mode none, seed 325903337), 0.00454 of the norm from autograd's with a tolerance of 0.004,
#: where autograd's own distance to float64 was 0.0039 (reports/evidence/2026-12-01-norm-bound/). In float32
#: the term is ~1e-7 of the norm: nothing changes; at 8 elements of bfloat16 it is ~0.005, at 8192 ~0.002, and
#: at millions ~0.0005.
ROUNDING_FLIPS = 2.0
EXPONENT_BINS = 2200  # float64's binary exponents, -1074 to 1024, offset by EXPONENT_OFFSET
EXPONENT_OFFSET = 1100


def _exponent_counts(values: torch.Tensor) -> torch.Tensor:
    """How many of the nonzero ``values`` have each binary exponent (``frexp``), as a histogram over bins."""
    nonzero = values[values != 0]
    if not nonzero.numel():
        return torch.zeros(EXPONENT_BINS, dtype=torch.float64)
    _, exponent = torch.frexp(nonzero.double())
    index = (exponent.long() + EXPONENT_OFFSET).clamp(0, EXPONENT_BINS - 1)
    return torch.bincount(index, minlength=EXPONENT_BINS).double().cpu()  # counted where the values are


def _largest_ulps_norm(exponents: torch.Tensor, flips: int, finfo) -> float:
    """The norm of one ulp of ``finfo``'s dtype at the ``flips`` largest elements counted in ``exponents``.

    An element of exponent e (|x| in [2**(e-1), 2**e)) has an ulp of 2**(e-1) * eps in the dtype, and no less
    than the dtype's subnormal spacing."""
    total, left = 0.0, flips
    counts = exponents.tolist()
    for index in reversed(exponents.nonzero().flatten().tolist()):
        take = min(int(counts[index]), left)
        ulp = max(math.ldexp(finfo.eps, index - EXPONENT_OFFSET - 1), finfo.smallest_normal * finfo.eps)
        total += take * ulp * ulp
        left -= take
        if left <= 0:
            break
    return math.sqrt(total)


def _unravel(index: int, shape) -> tuple[int, ...]:
    position = []
    for size in reversed(tuple(shape)):
        position.append(index % size)
        index //= size
    return tuple(reversed(position))


# -- inputs and gradients as a case lays them out ------------------------------------------------------------

def _padded(t: torch.Tensor, pad: int) -> torch.Tensor:
    """The same values with a longer row stride (padding NaN); a 1-D tensor with a stride of 2. An integer or
    boolean tensor (an index, a label) is copied as it is: there is no NaN to pad it with."""
    if t.dim() == 0 or not t.is_floating_point():
        return t.clone()
    if t.dim() == 1:
        buf = torch.full((2 * t.shape[0],), float("nan"), dtype=t.dtype, device=t.device)
        view = buf[::2]
    else:
        buf = torch.full((*t.shape[:-1], t.shape[-1] + pad), float("nan"), dtype=t.dtype, device=t.device)
        view = buf[..., : t.shape[-1]]
    view.copy_(t)
    return view


def _laid_out(t: torch.Tensor, layout: str, pad: int = 5) -> torch.Tensor:
    """An incoming gradient with ``t``'s values in ``layout`` (``expanded`` has been given row-equal values), in
    storage of its own."""
    if layout == "contiguous" or t.dim() == 0:
        return t.clone()
    if layout == "sliced" or t.dim() == 1:  # a slice of a wider tensor: what torch.cat's backward hands over
        return _padded(t, pad)
    if layout == "transposed":  # column-major storage of the last two dimensions
        # clone, not contiguous(): with a dimension of 1 the transpose is contiguous already, and contiguous()
        # would hand the variant t's own storage (which the gate compares it with afterwards)
        return t.transpose(-1, -2).clone(memory_format=torch.contiguous_format).transpose(-1, -2)
    if layout == "expanded":  # one row broadcast over the leading dimension (stride 0): a sum's gradient
        return t[:1].clone().expand_as(t)
    raise ValueError(f"unknown gradient layout {layout!r}")


def _rows_repeated(t: torch.Tensor, rows: int, drawn: int) -> torch.Tensor:
    """``t``'s first ``drawn`` rows repeated down to ``rows`` rows (a tensor without those rows as it is). Only
    for a tensor that has rows (``_row_inputs``, a row output's gradient): a weight as long as the drawn rows
    would be repeated too."""
    if t.dim() < 1 or t.shape[0] != drawn or rows == drawn:
        return t
    return t.repeat(math.ceil(rows / drawn), *[1] * (t.dim() - 1))[:rows].contiguous()


def _row_inputs(spec: KernelSpec, drawn: dict[str, torch.Tensor], shape: tuple[int, ...], dtype: torch.dtype,
                config) -> set[str]:
    """The inputs whose first dimension is the case's rows: those that a draw of two rows has two of, where the
    case's draw (``drawn``, of ``shape``'s rows) has ``shape[0]``. A per-row input of one dimension is one of them; a
    weight whose length happens to equal the rows is not (its length does not follow the rows)."""
    few = 2 if shape[0] != 2 else 3
    probe = spec.make_inputs((few, *shape[1:]), dtype, torch.device("cpu"), torch.Generator().manual_seed(0), config)
    return {k for k, t in drawn.items()
            if t.dim() >= 1 and t.shape[0] == shape[0] and k in probe and probe[k].dim() == t.dim()
            and probe[k].shape[0] == few and probe[k].shape[1:] == t.shape[1:]}


def _row_equal(t: torch.Tensor) -> torch.Tensor:
    return t[:1].expand_as(t).contiguous() if t.dim() >= 2 else t


def _leaves(inputs: dict[str, torch.Tensor], differentiable, layout: str, dtype=None):
    leaves = {}
    for i, (name, t) in enumerate(inputs.items()):
        t = t.detach().to(dtype) if dtype is not None else t.detach()
        t = _padded(t, 3 + 2 * i) if layout == "padded" else t.clone()
        leaves[name] = t.requires_grad_(name in differentiable)
    return leaves


def _planted(inputs: dict[str, torch.Tensor], values: str) -> dict[str, torch.Tensor]:
    """Inputs with edge values planted in rows (of every input that has rows; the math decides what they do):

    ``edges``: row 0 all zero (a padding token), row 1 scaled by 1e-2 (its mean square within a factor of 100 of
    a typical ``eps``, still a normal number in half precision), row 2 scaled so its squares overflow the dtype (float32 statistics survive it in half
    precision), row 3 scaled to an eighth of the dtype's largest value. ``nonfinite``: a NaN, a +inf and a -inf
    in rows 1, 3 and 5 of the first input."""
    planted = {}
    first = True
    for name, t in inputs.items():
        t = t.clone()
        if t.dim() >= 2 and t.shape[0] >= 8 and t.is_floating_point():
            biggest = torch.finfo(t.dtype).max
            rows = t.double() if t.dtype == torch.float64 else t.float()
            if values == "edges":
                rows[0] = 0.0
                rows[1] *= 1e-2
                rows[2] *= 4 * math.sqrt(biggest) / rows[2].abs().max().clamp_min(1e-30)
                rows[3] *= (biggest / 8) / rows[3].abs().max().clamp_min(1e-30)
            elif values == "nonfinite" and first:
                rows[1, 0], rows[3, 1], rows[5, -1] = math.nan, math.inf, -math.inf
            t = rows.to(t.dtype)
            first = False
        planted[name] = t
    return planted


# -- one case ---------------------------------------------------------------------------------------------------

HUGE_ROWS = (2, 3)  # the rows ``_planted`` scales towards the dtype's largest value


def _quiet_huge_rows(cotangents: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """The gradients with the huge rows' entries zero. A backward sums gradient times value over a row: with
    values near the largest float that sum overflows or not depending on the order of summation, so neither
    PyTorch nor any kernel defines it; the forward of those rows is what the case is about."""
    quiet = []
    for c in cotangents:
        if c.dim() >= 2 and c.shape[0] > max(HUGE_ROWS):
            c = c.clone()
            c[list(HUGE_ROWS)] = 0
        quiet.append(c)
    return tuple(quiet)


def _forward(forward, leaves, config, poison: bool = False):
    with PoisonAllocations() if poison else contextlib.nullcontext():
        outputs = forward(leaves, config)
    return tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)


def _backward(spec: KernelSpec, outputs, leaves, cotangents, poison: bool = False, retain: bool = False):
    with PoisonAllocations() if poison else contextlib.nullcontext():
        return torch.autograd.grad(outputs, [leaves[n] for n in spec.differentiable], cotangents,
                                   retain_graph=retain)


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit (NaN payloads included), where ``torch.equal`` calls NaN unequal to itself."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(_flat_bytes(a), _flat_bytes(b))


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    """``t``'s elements in order, as bytes: a view where its storage allows one (a large case's input is 4 GiB),
    else a copy with stride 1 (a view as bytes needs it; contiguous() leaves a one-element tensor of another
    stride as it is)."""
    flat = t.detach().reshape(-1)
    if flat.stride() != (1,):
        flat = flat.clone(memory_format=torch.contiguous_format)
    return flat.view(torch.uint8)


def _row(base: dict, output: str, against: str, verdict: dict[str, Any]) -> dict[str, Any]:
    return {**base, "output": output, "against": against, **verdict}


def _case_base(spec: KernelSpec, gate_case: GateCase, seed: int) -> dict[str, Any]:
    case, shape = gate_case.case, gate_case.shape(spec)
    return {"case": case.label() if shape == tuple(case.shape) else f"{shape_label(shape)} "
            f"{case.label().split(' ', 1)[1]}", "shape": shape_label(shape), "dtype": dtype_name(case.dtype),
            "config": case.config_label(), "layout": gate_case.probe.label(), "seed": seed}


def _case_row(spec: KernelSpec, gate_case: GateCase, seed: int, output: str, against: str,
              verdict: dict[str, Any]) -> dict[str, Any]:
    return _row(_case_base(spec, gate_case, seed), output, against, verdict)


#: GPU memory the large case takes at its peak, in multiples of one of its inputs, where the spec's rows are
#: independent (``KernelSpec.rows_independent``) and its reference goes by pieces of rows to the host
#: (``_large_reference``): the inputs, the incoming gradients and their copies, the variant's inputs, outputs and
#: gradients, the comparison's float64 chunks. Measured: 52.1 GiB, 13.0 inputs, on an H100 with the fused
#: baseline at 0a828e2 (``reports/nvidia-h100-80gb-hbm3/selfcheck.json`` records the peak of each run).
LARGE_CASE_INPUTS = 14
#: The same with the reference whole on the GPU beside them (its float32 intermediates): 92.1 GiB, 23 inputs,
#: on the H200 with both built-in kernels at aec01ee (``reports/nvidia-h200/selfcheck.json``).
LARGE_CASE_INPUTS_WHOLE = 24


def large_case_bytes(spec: KernelSpec, gate_case: GateCase) -> int:
    """About how much GPU memory the large case needs (see ``LARGE_CASE_INPUTS``)."""
    size = torch.tensor([], dtype=gate_case.case.dtype).element_size()
    inputs = LARGE_CASE_INPUTS if spec.rows_independent else LARGE_CASE_INPUTS_WHOLE
    return inputs * math.prod(gate_case.shape(spec)) * size


def _free_device_memory(device: Device) -> int:
    """Bytes this process can still allocate on the device: free memory plus what its allocator holds unused."""
    free, _ = torch.cuda.mem_get_info(device.torch_device)
    return free + torch.cuda.memory_reserved(device.torch_device) - torch.cuda.memory_allocated(device.torch_device)


def _memory_text(spec: KernelSpec, gate_case: GateCase, device: Device, error: BaseException | None = None) -> str:
    need = large_case_bytes(spec, gate_case) if gate_case.kind == "large" else None
    free = None if device.interpreted else _free_device_memory(device)
    what = f"the {gate_case.kind} case ({shape_label(gate_case.shape(spec))} {dtype_name(gate_case.case.dtype)})"
    text = f"{what} ran out of GPU memory" if error is not None else f"{what} was not started"
    if need is not None:
        text += f": it needs about {need / 2**30:.0f} GiB"
    if free is not None:
        text += f" and {free / 2**30:.0f} GiB are free"
    return text + " (another process holds the rest?): run one gate per GPU, on an otherwise idle one"


def _memory_shortfall(spec: KernelSpec, gate_case: GateCase, device: Device) -> str | None:
    """Why the large case cannot start here (too little free GPU memory), or None."""
    if device.interpreted or gate_case.kind != "large":
        return None
    torch.cuda.empty_cache()
    if _free_device_memory(device) >= large_case_bytes(spec, gate_case):
        return None
    return _memory_text(spec, gate_case, device)


def check_case(spec: KernelSpec, variant: Variant, gate_case: GateCase, device: Device, seed: int,
               ) -> list[dict[str, Any]]:
    """The rows of one case drawn with ``seed``: every output and gradient against both references, the
    contract, the inputs and incoming gradients left alone, and the gradients of a second backward pass."""
    case, probe = gate_case.case, gate_case.probe
    shape = gate_case.shape(spec)
    base = _case_base(spec, gate_case, seed)
    tol = spec.tolerance(case.dtype, case.config)
    generator = torch.Generator().manual_seed(seed)
    large = gate_case.kind == "large"
    drawn = (min(shape[0], LARGE_DRAWN_ROWS), *shape[1:]) if large else shape
    inputs = spec.make_inputs(drawn, case.dtype, device.torch_device, generator, case.config)
    drawn_inputs = inputs
    row_inputs = _row_inputs(spec, inputs, drawn, case.dtype, case.config) if large else set()
    if large:
        inputs = {k: _rows_repeated(t, shape[0], drawn[0]) if k in row_inputs else t for k, t in inputs.items()}
    if probe.values != "random":
        inputs = _planted(inputs, probe.values)
    # Handed to no one (the reference and the variant get copies, ``_leaves``): what the variant's inputs must
    # still hold when it is done.
    snapshot = inputs
    names = (*spec.outputs, *spec.gradient_names())

    def cotangents_of(outputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """The incoming gradients, drawn for the reference's outputs (the large case's for its drawn rows), on the
        case's device."""
        if large:  # an output with the case's rows (of any rank) is drawn for the drawn rows and repeated
            has_rows = [o.dim() >= 1 and o.shape[0] == shape[0] for o in outputs]
            drawn_out = tuple((o.detach()[: drawn[0]] if rows else o.detach()).to(device.torch_device)
                              for o, rows in zip(outputs, has_rows))  # _large_reference's are on the host
            given = tuple(_rows_repeated(c, shape[0], drawn[0]) if rows else c
                          for c, rows in zip(spec.grad_outputs(drawn_out, generator), has_rows))
        else:
            given = spec.grad_outputs(tuple(o.detach() for o in outputs), generator)
        if probe.cotangents == "expanded":
            given = tuple(_row_equal(c) for c in given)
        return _quiet_huge_rows(given) if probe.values == "edges" else given

    rows_mix = large and _rows_mix(spec, drawn_inputs, row_inputs, case.config)
    if rows_mix and spec.rows_independent:
        raise UserError(f"{spec.name}'s spec says rows_independent, but its reference's rows mix (a part of the "
                        f"large case's {drawn[0]} drawn rows alone gives other outputs or gradients than with the "
                        "rest): set rows_independent = False in its spec, or make the reference row by row")
    by_rows = (_large_reference(spec, inputs, row_inputs, shape[0], cotangents_of, case.config)
               if large and spec.rows_independent else None)
    if by_rows is not None:
        ref, cotangents = by_rows
    else:
        ref_leaves = _leaves(inputs, spec.differentiable, "contiguous")
        ref_out = _forward(spec.reference_forward(), ref_leaves, case.config)
        cotangents = cotangents_of(ref_out)
        ref = dict(zip(names, (*ref_out, *_backward(spec, ref_out, ref_leaves, cotangents))))
        del ref_out, ref_leaves
    drawn_cotangents = tuple(c[: drawn[0]] if large and c.dim() >= 1 and c.shape[0] == shape[0] else c
                             for c in cotangents)
    ref64 = None
    large64: dict[str, torch.Tensor] = {}
    terms: dict[str, torch.Tensor] = {}
    if not large:
        ref64, terms = float64_reference(spec, inputs, cotangents, case.config)
    elif probe.values == "random" and not rows_mix:
        large64, terms = _large_float64(spec, drawn_inputs, drawn_cotangents, shape[0], drawn[0], case.config)
    spread = {name: sum_spread(value, case.dtype) for name, value in terms.items()}

    leaves = _leaves(inputs, spec.differentiable, probe.inputs)
    given = [_laid_out(c, probe.cotangents) for c in cotangents]
    reuse = not large
    try:
        # The interpreter computes with NumPy, which warns on every overflow the edge values cause on purpose.
        with numpy.errstate(all="ignore"):
            got_out = _forward(spec.variant_forward(variant.module), leaves, case.config, poison=True)
            grads = _backward(spec, got_out, leaves, given, poison=True, retain=reuse)
            again = (_backward(spec, got_out, leaves, [_laid_out(c, probe.cotangents) for c in cotangents],
                               poison=True) if reuse else None)
            device.synchronize()
    except Exception as e:  # a variant that crashes fails the gate; the message says where
        if _out_of_memory(e):
            raise
        if device_fault(e):  # the process's CUDA context is lost: nothing more runs in it
            raise DeviceFault([_row(base, "*", "-", _failure(
                f"faulted the device ({type(e).__name__}: {e})"[:500]))]) from None
        return [_row(base, "*", "-", _failure(f"raised {type(e).__name__}: {e}"[:500]))]
    if len(got_out) != len(spec.outputs):
        return [_row(base, "*", "contract", _failure(
            f"{count(len(got_out), 'output')} where the spec names {len(spec.outputs)} ({', '.join(spec.outputs)})"))]
    got = dict(zip(names, (*got_out, *grads)))

    rows = []
    gradients = set(spec.gradient_names())
    for name in names:
        same, exact = tol.for_output(name, spec.row_reductions)
        verdict = compare(got[name], ref[name], same, check_dtype=True,
                          exact=None if ref64 is None else (ref64[name], exact), spread=spread.get(name))
        if name in gradients and ref64 is not None:
            verdict = _at_least_as_exact(verdict, got[name], ref[name], ref64[name], same, exact,
                                         spread.get(name))
        elif name in gradients and name in large64:
            verdict = _large_at_least_as_exact(verdict, got[name], ref[name], large64[name], same, exact,
                                               spread.get(name))
        rows.append(_row(base, name, "same-dtype", verdict))
        # With edge values PyTorch's own rounding and overflow in the dtype are the contract (a row whose squares
        # overflow normalises to zero in casting mode none), so they get no float64 row of their own; float64
        # speaks for them only through the rule above, where finite elements are as near it as autograd's.
        if ref64 is not None and probe.values == "random":
            rows.append(_row(base, name, "float64", compare(got[name], ref64[name], exact)))
    for name, value in zip(spec.gradient_names(), again or ()):
        same, exact = tol.for_output(name, spec.row_reductions)
        verdict = compare(value, ref[name], same, check_dtype=True,
                          exact=None if ref64 is None else (ref64[name], exact), spread=spread.get(name))
        if ref64 is not None:
            verdict = _at_least_as_exact(verdict, value, ref[name], ref64[name], same, exact, spread.get(name))
        rows.append(_row(base, name, "same-dtype, graph reused", verdict))
    for name, before in snapshot.items():
        if not _bitwise_equal(leaves[name], before):
            rows.append(_row(base, name, "input unchanged", _failure(f"the variant wrote into its input {name}")))
    if not spec.may_overwrite_cotangents(case.config):
        for output, now, c in zip(spec.outputs, given, cotangents):
            if not _bitwise_equal(now, _laid_out(c, probe.cotangents)):  # laid out again: a copy of c's values
                rows.append(_row(base, f"d{output} (given)", "gradient unchanged", _failure(
                    f"the variant wrote into the incoming gradient of {output}, which autograd may hand to other "
                    f"consumers (allowed only where the spec says so for the options: {case.config_label()})")))
    return rows


#: Where both errors are mostly the final rounding to the output dtype, which of the two is nearer float64 is
#: close to a coin toss, more so the fewer the elements: "as near" in the norm allows the larger of this and
#: 2 / sqrt(elements), about three standard deviations of the norm's rounding noise (seen in float16: 0.7 % at
#: 9x33, 6.7 % at 6x37 with row-equal incoming gradients, i.e. 37 distinct elements).
AS_EXACT_SLACK = 0.02


def _at_least_as_exact(verdict: dict[str, Any], out: torch.Tensor, ref: torch.Tensor, ref64: torch.Tensor,
                       same: Tolerance, exact: Tolerance, spread: torch.Tensor | None = None) -> dict[str, Any]:
    """A gradient beyond the same-dtype tolerance of autograd's passes if it is as near the float64 gradient as
    autograd's own: in the norm (within ``AS_EXACT_SLACK`` or its rounding noise) and at every element (no further from float64 than
    autograd's element is, plus the same-dtype element-wise allowance), and within the float64 tolerance.

    Autograd rounds a half-precision gradient at every op of the backward graph; a kernel that rounds once is
    nearer the exact gradient and may differ from autograd's by more than the same-dtype tolerance. The
    element-wise bound is the same-dtype check's seen from float64 (the triangle inequality): an element that
    check admits, this admits. A missing term, a wrong scale or a wrong stride is further from float64 than
    autograd in the norm, and fails. The casting mode decides the forward's rounding, which the forward outputs
    are held to; for gradients the exact derivative is the same in every mode, so being nearer it is no casting
    error.

    Only a failure of tolerance is reconsidered: special values must still sit where autograd's are (the
    verdict's ``tolerance_used`` is infinite otherwise), and the dtype must be the reference's. Distances are
    taken over the elements where the output, autograd's and the float64 gradient are all finite (planted edge
    values overflow the dtype in places where float64 does not)."""
    if (verdict["verdict"] == "pass" or not math.isfinite(verdict["tolerance_used"]) or out.shape != ref.shape
            or out.dtype != ref.dtype):
        return verdict
    o, r = out.detach().double().reshape(-1), ref.detach().double().reshape(-1).to(out.device)
    wide = ref64.detach().double().reshape(-1).to(out.device)
    finite = torch.isfinite(o) & torch.isfinite(r) & torch.isfinite(wide)
    o, r, wide = o[finite], r[finite], wide[finite]
    allowance = same.atol + same.rtol * r.abs()
    if spread is not None:
        allowance = allowance + spread.detach().double().reshape(-1).to(out.device)[finite]
    if not o.numel():
        return verdict
    scale = max(float(wide.norm()), 1e-30)
    mine_err, autograd_err = (o - wide).abs(), (r - wide).abs()
    mine, autograd = float(mine_err.norm()) / scale, float(autograd_err.norm()) / scale
    beyond = int((mine_err > autograd_err + allowance).sum())
    slack = max(AS_EXACT_SLACK, 2 / math.sqrt(o.numel()))
    if compare(o, wide, exact)["verdict"] != "pass" or mine > (1 + slack) * autograd or beyond:
        return verdict
    return {**verdict, "verdict": "pass", "reason": (
        f"beyond autograd's same-dtype result ({verdict['reason']}), but as near the float64 gradient: "
        f"norm error {mine:.3g} against autograd's {autograd:.3g}, no element further from it than autograd's "
        "by more than the same-dtype tolerance")}


def float64_reference(spec: KernelSpec, inputs: dict[str, torch.Tensor], cotangents, config,
                      ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The reference's outputs and gradients in float64, and for each row reduction (``spec.row_reductions``)
    the root of the sum of its squared per-row terms, element by element (``sum_spread`` scales it).

    The terms come from the same backward: the reduced input (a weight of the row's shape, broadcast over the
    rows) is handed to the reference as one copy per row, whose gradients are the per-row terms; their sum is
    the gradient. A reference that cannot take such a copy gives no terms (and so no spread): the gradients
    are then computed as they are."""
    names = (*spec.outputs, *spec.gradient_names())
    wide = _leaves(inputs, spec.differentiable, "contiguous", torch.float64)
    given = [c.double() for c in cotangents]
    by_gradient = dict(zip(spec.gradient_names(), spec.differentiable))
    reduced = [by_gradient[g] for g in spec.row_reductions if g in by_gradient]
    per_row = {}
    for name in reduced:
        param = wide[name]
        rows = next((t.shape[:t.dim() - param.dim()] for t in wide.values() if t.dim() > param.dim()), None)
        if rows is not None and param.dim() >= 1:
            per_row[name] = param.detach().expand(*rows, *param.shape).clone().requires_grad_(True)
    if per_row:
        try:
            leaves = {**wide, **per_row}
            outputs = _forward(spec.reference_forward(), leaves, config)
            grads = _backward(spec, outputs, leaves, given)
            found = dict(zip(names, (*(o.detach() for o in outputs), *grads)))
            spread = {}
            for gradient, name in by_gradient.items():
                if name in per_row:
                    terms = found[gradient]
                    leading = tuple(range(terms.dim() - wide[name].dim()))
                    found[gradient] = terms.sum(dim=leading)
                    rss = terms.pow(2).sum(dim=leading).sqrt()
                    spread[gradient] = torch.where(torch.isfinite(rss), rss, torch.zeros_like(rss))
            if all(found[g].shape == wide[n].shape for g, n in by_gradient.items()):
                return found, spread
        except Exception:  # e.g. a reference that reshapes its weight: no per-row terms, the plain gradients
            pass
    outputs = _forward(spec.reference_forward(), wide, config)
    return dict(zip(names, (*(o.detach() for o in outputs), *_backward(spec, outputs, wide, given)))), {}


#: A row reduction's element is a sum over rows. Besides its own rounding it carries the rounding of each of
#: its terms, and where two computations round the terms differently (autograd rounds each product to the
#: dtype, a kernel may keep them in float32, the float64 reference starts from the inputs before the forward
#: rounded S) they differ by about eps * sqrt(sum of squared terms), however far the sum itself cancels. Each
#: element of a row reduction is allowed ``SUM_SPREAD`` times that on top of its tolerance. Measured (float32
#: emulation of the baseline against autograd on the CPU, 397 to 2051 rows of 1024 to 8192 columns, bfloat16
#: and float16, every casting mode, 72k elements): the largest distance was 3.5 of it, in casting mode none;
#: the noise is a sum of many independent roundings, so 6 is far in its tail. A mistake in the terms (a row
#: left out, a wrong scale) moves an element by a sizeable share of sqrt(sum of squares) itself.
SUM_SPREAD = 6.0


def sum_spread(root_sum_squares: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The per-element allowance of a row reduction in ``dtype`` (see ``SUM_SPREAD``)."""
    return SUM_SPREAD * torch.finfo(dtype).eps * root_sum_squares


def _large_reference(spec: KernelSpec, inputs: dict[str, torch.Tensor], row_inputs: set[str], rows: int,
                     cotangents_of, config) -> tuple[dict[str, torch.Tensor], tuple[torch.Tensor, ...]] | None:
    """The large case's same-dtype reference taken ``REFERENCE_CHUNK`` elements of rows at a time, and its
    incoming gradients (``cotangents_of`` the outputs); the outputs and gradients on the host, so that the
    variant has the GPU to itself. Whole, the reference's float32 intermediates and the results beside the
    variant's took 92 GiB on the H200: no 80 GB GPU could run the case.

    The outputs come first, without a graph; then each chunk's forward again and its backward with the chunk's
    rows of the incoming gradients. The gradient of an input taken by rows is its chunks' rows; of an input every
    chunk takes whole (a weight), the sum of the chunks' in float32 or wider, rounded once to its dtype: the
    chain rule's own sum, in another order than autograd's over all rows. Only for a spec whose rows are
    independent (``KernelSpec.rows_independent``: a reference that mixes rows would be wrong by pieces); None
    where an output has no row dimension or no input has rows (``row_inputs``, from ``_row_inputs``): the caller
    takes the reference whole."""
    if not row_inputs:
        return None
    width = max(math.prod(inputs[k].shape[1:]) for k in row_inputs)
    step = max(1, REFERENCE_CHUNK // max(1, width))
    spans = [(a, min(a + step, rows)) for a in range(0, rows, step)]

    def chunk(a: int, b: int) -> dict[str, torch.Tensor]:
        return _leaves({k: t[a:b] if k in row_inputs else t for k, t in inputs.items()}, spec.differentiable,
                       "contiguous")

    outputs: list[torch.Tensor] = []
    with torch.no_grad():
        for a, b in spans:
            part = _forward(spec.reference_forward(), chunk(a, b), config)
            if any(o.dim() < 1 or o.shape[0] != b - a for o in part):
                return None
            if not outputs:
                outputs = [o.new_empty((rows, *o.shape[1:]), device="cpu") for o in part]
            for whole, o in zip(outputs, part):
                whole[a:b] = o
    cotangents = cotangents_of(tuple(outputs))
    gradients: dict[str, torch.Tensor] = {}
    for a, b in spans:
        leaves = chunk(a, b)
        part = _forward(spec.reference_forward(), leaves, config)
        got = _backward(spec, part, leaves, [c[a:b] if c.dim() >= 1 and c.shape[0] == rows else c
                                             for c in cotangents])
        for name, input_name, g in zip(spec.gradient_names(), spec.differentiable, got):
            if input_name in row_inputs:
                if name not in gradients:
                    gradients[name] = g.new_empty((rows, *g.shape[1:]), device="cpu")
                gradients[name][a:b] = g
            else:  # summed wide, rounded once below
                wide = g.to(torch.promote_types(g.dtype, torch.float32))
                gradients[name] = gradients[name] + wide if name in gradients else wide
    for name, input_name in zip(spec.gradient_names(), spec.differentiable):
        if input_name not in row_inputs:
            gradients[name] = gradients[name].to(inputs[input_name].dtype).cpu()
    return dict(zip(spec.outputs, outputs)) | gradients, cotangents


#: How far apart (relative to the largest element) the reference's values may be, by the rows it was given,
#: before ``_rows_mix`` calls its rows mixed: a reference that computes in float32 (a ``.float()`` in it, a weight's
#: gradient summed in float32: transformers' Gemma norm) moves by its rounding, about 1e-7; a mean over rows or
#: a scan moves by a share of the values themselves.
ROWS_MIX_TOLERANCE = 1e-5


def _rows_mix(spec: KernelSpec, drawn_inputs: dict[str, torch.Tensor], row_inputs: set[str], config) -> bool:
    """Whether the reference's rows depend on other rows, on the large case's drawn rows in float64: each part of
    two splits alone against the whole, in the outputs and gradients (a row input's gradient by its rows, a
    weight's as the sum of the parts'). The splits are in halves and after the first row: rows that mix in groups
    of a size that divides one split's parts do not divide the other's (a review's: groups of 2, 3, 5 and 17
    rows went unseen by the halves of 1021 rows).

    The large case leans on independent rows twice: its same-dtype reference by pieces (where the spec says
    ``rows_independent``) and its float64 gradients from the drawn rows alone (every spec). A reference that
    mixes rows (a mean over them, a scan) is wrong by either, so it gets neither. A probe, not a proof: a mixing
    that the drawn rows do not show goes unseen, and the spec's word then stands."""
    if not row_inputs:
        return True
    rows = drawn_inputs[next(iter(row_inputs))].shape[0]
    if rows < 2:
        return False
    given: list[torch.Tensor] = []

    def reference(a: int, b: int):
        leaves = _leaves({k: t[a:b] if k in row_inputs else t for k, t in drawn_inputs.items()},
                         spec.differentiable, "contiguous", torch.float64)
        outputs = _forward(spec.reference_forward(), leaves, config)
        if any(o.dim() < 1 or o.shape[0] != b - a for o in outputs):
            return None
        if not given:  # the whole's, drawn first
            given.extend(c.double() for c in spec.grad_outputs(tuple(o.detach() for o in outputs),
                                                                 torch.Generator().manual_seed(0)))
        return outputs, _backward(spec, outputs, leaves, [c[a:b] for c in given])

    def near(a: torch.Tensor, b: torch.Tensor) -> bool:
        if a.shape != b.shape:
            return False
        a, b = a.detach().double(), b.detach().double().to(a.device)
        finite = b[torch.isfinite(b)]
        scale = max(float(finite.abs().max()), 1e-30) if finite.numel() else 1.0
        return torch.allclose(a, b, rtol=ROWS_MIX_TOLERANCE, atol=ROWS_MIX_TOLERANCE * scale, equal_nan=True)

    whole = reference(0, rows)
    if whole is None:
        return True
    for cut in sorted({rows // 2, 1}):
        parts = []
        for a, b in ((0, cut), (cut, rows)):
            part = reference(a, b)
            if part is None or not all(near(mine, w[a:b]) for mine, w in zip(part[0], whole[0])):
                return True
            for name, got, full in zip(spec.differentiable, part[1], whole[1]):
                if name in row_inputs and not near(got, full[a:b]):
                    return True
            parts.append(part[1])
        if not all(near(f + s, full) for name, f, s, full in zip(spec.differentiable, *parts, whole[1])
                   if name not in row_inputs):
            return True
    return False


def _large_float64(spec: KernelSpec, drawn_inputs: dict[str, torch.Tensor], drawn_cotangents, rows: int,
                   drawn: int, config) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The float64 gradients of the large case, computed on its drawn rows alone (the whole case would not fit
    in float64): a row-wise gradient's drawn rows as they are, and a row reduction (``spec.row_reductions``) over
    the drawn rows with each row's cotangent weighted by how often the case repeats it. A gradient is linear in
    its cotangent, so that is the reduction over every row of the case, exactly. The second item: each row
    reduction's root sum of squared terms, of the weighted terms (a repeated row repeats its rounding too)."""
    counts = torch.bincount(torch.arange(rows) % drawn, minlength=drawn).double()
    found: dict[str, torch.Tensor] = {}
    spread: dict[str, torch.Tensor] = {}
    for weighted in (False, True):
        if weighted and not spec.row_reductions:
            break
        given = []
        for c in drawn_cotangents:
            c = c.double()
            if weighted and c.dim() >= 1 and c.shape[0] == drawn:
                c = c * counts.to(c.device).reshape(-1, *[1] * (c.dim() - 1))
            given.append(c)
        grads, terms = float64_reference(spec, drawn_inputs, given, config)
        for name, value in grads.items():
            if name in spec.gradient_names() and (name in spec.row_reductions) == weighted:
                found[name] = value
        if weighted:
            spread = terms
    return found, spread


def _large_at_least_as_exact(verdict: dict[str, Any], out: torch.Tensor, ref: torch.Tensor, wide: torch.Tensor,
                             same: Tolerance, exact: Tolerance, spread: torch.Tensor | None = None,
                             ) -> dict[str, Any]:
    """``_at_least_as_exact`` in the large case, whose rows repeat a few drawn ones. A row reduction is judged
    whole against its weighted float64 value. A row-wise gradient is judged on its drawn rows, and every later
    row must then repeat the output's own drawn rows within the same-dtype tolerance: a mistake that shows only
    at large offsets (the case's purpose) still fails."""
    if verdict["verdict"] == "pass" or wide.shape == out.shape:
        return _at_least_as_exact(verdict, out, ref, wide, same, exact, spread)
    drawn = wide.shape[0]
    if out.dim() < 1 or out.shape[0] < drawn or out.shape[1:] != wide.shape[1:]:
        return verdict
    head = _at_least_as_exact(verdict, out[:drawn], ref[:drawn], wide, same, exact)
    if head["verdict"] != "pass":
        return verdict
    repeats = compare(out, _rows_repeated(out[:drawn].detach().clone(), out.shape[0], drawn), same)
    if repeats["verdict"] != "pass":
        return verdict
    return {**head, "reason": head["reason"] + f"; rows {drawn} onwards repeat the output's first {drawn}"}


def _borderline(rows: list[dict[str, Any]]) -> bool:
    used = [r["tolerance_used"] for r in rows if r["verdict"] == "pass"]
    return bool(used) and max(used) > BORDERLINE


def run_case(spec: KernelSpec, variant: Variant, gate_case: GateCase, device: Device, seed: int = FIXED_SEED,
             fresh: int = 0) -> list[dict[str, Any]]:
    """A case with its fixed seed, ``fresh`` fresh draws, and re-draws while it stays borderline."""
    fresh = 0 if gate_case.kind == "large" else fresh  # its outcome is the offsets', not the values'
    seeds = [gate_case.seed(seed), *(int.from_bytes(os.urandom(4), "little") % 2**31 for _ in range(fresh))]
    rows: list[dict[str, Any]] = []
    redraws = 0
    while seeds:
        seed_now = seeds.pop(0)
        try:
            drawn = check_case(spec, variant, gate_case, device, seed_now)
        except DeviceFault as fault:
            raise DeviceFault(rows + fault.rows) from None
        except Exception as e:
            if not _out_of_memory(e):
                raise
            return rows + [_case_row(spec, gate_case, seed_now, "*", "-", _not_run(_memory_text(spec, gate_case,
                                                                                                device, e)))]
        rows.extend(drawn)
        if any(r["verdict"] != "pass" for r in drawn):
            break
        if not seeds and redraws < REDRAWS and _borderline(rows) and gate_case.kind != "large":
            redraws += 1
            seeds.append((rows[-1]["seed"] + 7919 * redraws) % 2**31)
    return rows


# -- the whole gate -------------------------------------------------------------------------------------------

def gate_cases(spec: KernelSpec, variant: Variant, device: Device, cases: list[Case] | None = None,
               ) -> list[GateCase]:
    """Every case of the gate, cheapest first: the spec's check cases, each with a probe (the layouts, N-D
    shapes and gradient layouts alternate so that each meets every shape, dtype and option), the edge-value
    cases, the variant's boundary sizes and, on the GPU, the large case."""
    from liger_perf.kernel.variants import knobs_in, read_dispatch, read_knobs

    suite = device.suite
    shapes = [tuple(s) for s in spec.check_shapes[suite]]
    configs = [dict(c) for c in spec.check_configs]
    dtypes = list(spec.dtypes[suite])
    sweep = spec.cases(suite, "check") if cases is None else cases
    chosen = []
    for case in sweep:
        s = shapes.index(tuple(case.shape)) if tuple(case.shape) in shapes else 0
        c = configs.index(dict(case.config)) if dict(case.config) in configs else 0
        d = dtypes.index(case.dtype) if case.dtype in dtypes else 0
        # Chosen so that the whole sweep, and a cover of it that meets each shape in each option once with the
        # dtype alternating, both meet every gradient layout, and N-D inputs in every option.
        probe = Probe(inputs="padded" if s % 2 else "contiguous",
                      cotangents=COTANGENT_LAYOUTS[(s + c + 2 * d) % len(COTANGENT_LAYOUTS)],
                      batched=(c + d) % 2 == 1)
        chosen.append(GateCase(case, probe))
    # Edge values: every option in every dtype, on rows of the check suite's second width.
    width = shapes[min(1, len(shapes) - 1)][1:]
    for config in configs:
        for dtype in dtypes:
            for values in ("edges", "nonfinite"):
                chosen.append(GateCase(Case((8, *width), dtype, config), Probe(values=values), "values"))
    # The sizes the variant's own knobs name: each in every option, the dtype alternating.
    knobs, _ = read_knobs(variant.source, variant.path)
    for i, shape in enumerate(spec.boundary_shapes(knobs, suite)):
        for j, config in enumerate(configs):
            chosen.append(GateCase(Case(tuple(shape), dtypes[(i + j) % len(dtypes)], config),
                                   Probe(inputs="padded" if (i + j) % 2 else "contiguous"), "boundary"))
    # Every bucket of the variant's dispatch table, in its own dtype (the sweep may have no shape in it), with the
    # sizes its entry's knobs name: each in every option.
    dispatch = read_dispatch(variant.source, variant.path)
    for bucket in sorted(dispatch):
        sized = _bucket_dtypes(spec, bucket, dtypes)
        for i, shape in enumerate(spec.bucket_shapes(bucket, knobs_in(knobs, dispatch, bucket), suite)):
            for j, config in enumerate(configs):
                k = i + j  # layouts, N-D inputs and the bucket's dtypes take turns
                chosen.append(GateCase(Case(tuple(shape), sized[k % len(sized)], config),
                                       Probe(inputs="padded" if k % 2 else "contiguous",
                                             cotangents=COTANGENT_LAYOUTS[k % len(COTANGENT_LAYOUTS)],
                                             batched=(k // 2) % 2 == 1), "boundary"))
    # The edges of every block along the row: each width once, options and dtypes taking turns (a width and its
    # neighbours meet different options), inputs padded or not.
    for i, shape in enumerate(spec.width_sweep(suite)):
        config, dtype = configs[i % len(configs)], dtypes[(i // len(configs)) % len(dtypes)]
        chosen.append(GateCase(Case(tuple(shape), dtype, config),
                               Probe(inputs="padded" if (i // 2) % 2 else "contiguous"), "boundary"))
    chosen.sort(key=lambda g: math.prod(g.shape(spec)))
    if not device.interpreted:
        smallest = min(dtypes, key=lambda d: torch.tensor([], dtype=d).element_size())
        chosen.append(GateCase(Case(spec.large_shape(), smallest, dict(spec.bench_config)), Probe(), "large"))
    return chosen


def _bucket_dtypes(spec: KernelSpec, bucket: str, dtypes: list[torch.dtype]) -> list[torch.dtype]:
    """The dtypes a dispatch bucket's cases take turns in: the suite's own of the bucket's element size, then
    the others of that size the spec has tolerances for (float16 beside bfloat16 on a GPU: the model suite times
    both). bfloat16 is never added under the interpreter, whose bfloat16 rounding no GPU shares."""
    size = int(bucket.partition("x")[2])
    found = [d for d in dtypes if d.itemsize == size]
    found += [d for d in spec.tolerances if d.itemsize == size and d not in found
              and not (d == torch.bfloat16 and torch.bfloat16 not in dtypes)]
    if not found:
        raise UserError(f"DISPATCH bucket {bucket!r} is for {size}-byte elements, which none of the dtypes "
                        f"{spec.name} is checked in has: drop that entry")
    return found


def quick_gate_cases(spec: KernelSpec, device: Device) -> list[GateCase]:
    """The quick gate, run before any timing: every option (casting mode...) in every dtype once, on the check
    suite's odd shapes in turn, inputs padded or not and incoming gradients in every layout, outputs poisoned as
    in every case. A few seconds, and it stops most wrong variants before they are timed; what it cannot see
    (edge values, boundary sizes, the large case, races, convergence) the full gate checks before anything is
    accepted."""
    shapes = [tuple(s) for s in spec.check_shapes[device.suite]]
    # Odd shapes first (a row count or width that no block divides), the single row last.
    shapes.sort(key=lambda s: (math.prod(s) == s[-1], -sum(d % 2 for d in s)))
    dtypes = list(spec.dtypes[device.suite])
    configs = [dict(c) for c in spec.check_configs]
    options = [(config, dtype) for config in configs for dtype in dtypes]
    chosen = []
    # At least one case per incoming-gradient layout, even for a kernel of one option in two dtypes.
    for k in range(max(len(options), len(COTANGENT_LAYOUTS))):
        config, dtype = options[k % len(options)]
        probe = Probe(inputs="padded" if k % 2 else "contiguous",
                      cotangents=COTANGENT_LAYOUTS[k % len(COTANGENT_LAYOUTS)])
        chosen.append(GateCase(Case(shapes[k % len(shapes)], dtype, config), probe, "quick"))
    return chosen


def check_variant(spec: KernelSpec, variant: Variant, device: Device, convergence: bool = True,
                  progress=None, fail_fast: bool = False, cases: list[Case] | None = None, seed: int = FIXED_SEED,
                  fresh: int = 0, large: bool = True, stage: str = "full", start: int = 0,
                  resumer=None) -> GateResult:
    """Run the whole gate: every case, the determinism and race check on the GPU, then (only if all pass) the
    convergence run.

    ``fail_fast`` stops at the first failing case (a verdict is all the loop needs; a person wants every row).
    ``cases``: a subset of the spec's check cases instead (the tests'; the other kinds still run). ``seed``
    moves every case's fixed draw; ``fresh``: fresh draws per case besides it (a trial takes one). ``large``:
    the GPU's case of more than 2**31 elements. ``stage="quick"``: the quick gate only (``quick_gate_cases``:
    fixed draws, no determinism check, no convergence run). ``start``: the gate from its case of this index on
    (where a fresh process takes over).

    A case that faults the device is a FAIL row naming it. CUDA's error is sticky, so nothing more runs in this
    process: ``fail_fast`` stops there anyway, else ``resumer`` (``liger_perf.gate.resume.resume``: a fresh
    process) runs the rest of the gate and its rows follow; without one, a row says the rest did not run. A case
    the device has no memory for is a row ``not run`` saying how much it needs: the machine's limit, not the
    variant's verdict."""
    from liger_perf.gate.convergence import check_convergence

    from liger_perf.kernel.variants import changed_harness, harness_snapshot

    quick = stage == "quick"
    chosen = quick_gate_cases(spec, device) if quick else gate_cases(spec, variant, device, cases)
    rows: list[dict[str, Any]] = []
    # The import was watched (``load_variant``); so are the variant's calls: a patch made when it is first called
    # (torch.Tensor.numel set through an autograd method called with torch.Tensor as its ctx) would make every
    # comparison after it pass.
    if not device.interpreted:  # CUDA's lazy start rebinds some of torch.cuda: done before the snapshot
        import torch

        torch.cuda.init()
    watched = harness_snapshot(while_running=True)

    def tampered() -> dict[str, Any] | None:
        changed = changed_harness(watched, harness_snapshot(while_running=True), while_running=True)
        return _row({"case": "the harness", "shape": "", "dtype": "", "config": "", "layout": "", "seed": math.nan},
                    "*", "-", _failure(f"the variant changed {', '.join(changed[:3])} while it ran: a variant may "
                                       "not touch torch, triton, the timers or liger-perf, which judge it")
                    ) if changed else None

    for index, gate_case in enumerate(chosen):
        if index < start or (gate_case.kind == "large" and not large):
            continue
        shortfall = _memory_shortfall(spec, gate_case, device)
        try:
            case_rows = ([_case_row(spec, gate_case, gate_case.seed(seed), "*", "-", _not_run(shortfall))]
                         if shortfall else run_case(spec, variant, gate_case, device, seed, 0 if quick else fresh))
        except DeviceFault as fault:
            rows.extend(fault.rows)
            if progress is not None:
                progress(gate_case.case)
            if fail_fast:
                return GateResult(pd.DataFrame(rows, columns=COLUMNS), interpreted=device.interpreted)
            if resumer is None:
                rows.append(_row({"case": "the rest of the gate", "shape": "", "dtype": "", "config": "",
                                  "layout": "", "seed": math.nan}, "*", "-", _failure(
                                      "not run: the device faulted, and no fresh process was asked for")))
                return GateResult(pd.DataFrame(rows, columns=COLUMNS), convergence_skipped=True,
                                  interpreted=device.interpreted)
            rest = resumer(spec, variant, device, convergence=convergence, cases=cases, seed=seed, fresh=fresh,
                           large=large, stage=stage, start=index + 1)
            rest.rows = pd.DataFrame(rows + rest.rows.to_dict("records"), columns=COLUMNS)
            return rest
        rows.extend(case_rows)
        if progress is not None:
            progress(gate_case.case)
        patched = tampered()
        if patched:  # every row after it would be judged by the patched harness
            rows.append(patched)
            return GateResult(pd.DataFrame(rows, columns=COLUMNS), convergence_skipped=True,
                              interpreted=device.interpreted)
        if fail_fast and any(r["verdict"] != "pass" for r in case_rows):
            break
    if quick:
        return GateResult(pd.DataFrame(rows, columns=COLUMNS), interpreted=device.interpreted)
    if not device.interpreted and not (fail_fast and any(r["verdict"] != "pass" for r in rows)):
        rows.extend(determinism_rows(spec, variant, device, seed))
        patched = tampered()
        if patched:
            rows.append(patched)
    result = GateResult(pd.DataFrame(rows, columns=COLUMNS), interpreted=device.interpreted)
    if convergence:
        if result.failures().empty:
            result.convergence = check_convergence(spec, variant, device)
            patched = tampered()
            if patched:
                result.rows = pd.DataFrame([*rows, patched], columns=COLUMNS)
        else:
            result.convergence_skipped = True
    return result


# -- the GPU's determinism and race check ------------------------------------------------------------------------

RACE_RUNS = 3  # sequential runs, then as many at once on streams of their own


def determinism_rows(spec: KernelSpec, variant: Variant, device: Device, seed: int = FIXED_SEED,
                     ) -> list[dict[str, Any]]:
    """For each option and dtype, on the widest-grid check shape: forward and backward run ``RACE_RUNS`` times
    one after another, then ``RACE_RUNS`` times at once on separate CUDA streams (programs of different calls
    interleave; a buffer a variant shares between calls is clobbered). Every output must be bit-identical to
    the first run's, unless the variant declares ``DETERMINISTIC = False``: then each run is held to the
    same-dtype tolerances against the reference instead."""
    deterministic = getattr(variant.module, "DETERMINISTIC", True) is not False
    shape = max((tuple(s) for s in spec.check_shapes[device.suite]), key=lambda s: s[0])
    names = (*spec.outputs, *spec.gradient_names())
    rows = []
    for config in spec.check_configs:
        for dtype in spec.dtypes[device.suite]:
            case = Case(shape, dtype, dict(config))
            gate_case = GateCase(case, Probe(), "determinism")
            base = {"case": case.label(), "shape": shape_label(shape), "dtype": dtype_name(dtype),
                    "config": case.config_label(), "layout": "repeated and concurrent calls",
                    "seed": gate_case.seed(seed)}
            generator = torch.Generator().manual_seed(base["seed"])
            inputs = spec.make_inputs(shape, dtype, device.torch_device, generator, case.config)
            forward = spec.variant_forward(variant.module)
            tol = spec.tolerance(dtype, case.config)

            reference = call_reference(spec, inputs, case.config, base["seed"])
            cotangents = spec.grad_outputs(tuple(reference[n] for n in spec.outputs),
                                           torch.Generator().manual_seed(base["seed"]))

            def call():
                leaves = _leaves(inputs, spec.differentiable, "contiguous")
                outputs = _forward(forward, leaves, case.config)
                given = [c.clone() for c in cotangents]  # an in-place option may write into them
                return dict(zip(names, (*outputs, *_backward(spec, outputs, leaves, given))))

            try:
                runs = [call() for _ in range(RACE_RUNS)]
                streams = [torch.cuda.Stream(device=device.torch_device) for _ in range(RACE_RUNS)]
                current = torch.cuda.current_stream(device.torch_device)
                for stream in streams:
                    stream.wait_stream(current)
                concurrent = []
                for stream in streams:
                    with torch.cuda.stream(stream):
                        concurrent.append(call())
                device.synchronize()
                runs += concurrent
            except Exception as e:
                rows.append(_row(base, "*", "-", _failure(f"raised {type(e).__name__}: {e}"[:500])))
                continue
            if deterministic:
                for name in names:
                    differ = [i for i, run in enumerate(runs[1:], 1) if not _bitwise_equal(run[name], runs[0][name])]
                    rows.append(_row(base, name, "first run, bitwise", {
                        "max_abs_err": max((float((runs[i][name].double() - runs[0][name].double()).abs().max())
                                            for i in differ), default=0.0),
                        "max_rel_err": math.nan, "norm_rel_err": math.nan, "tolerance_used": 0.0 if not differ
                        else math.inf, "verdict": "FAIL" if differ else "pass",
                        "reason": _nondeterminism(differ) if differ else ""}))
            else:
                for name in names:
                    same = tol.for_output(name, spec.row_reductions)[0]
                    verdicts = [compare(run[name], reference[name], same, check_dtype=True) for run in runs]
                    worst = max(verdicts, key=lambda v: v["tolerance_used"])
                    rows.append(_row(base, name, "same-dtype, every run", worst))
    return rows


def _nondeterminism(differ: list[int]) -> str:
    when = "concurrent" if differ[-1] >= RACE_RUNS else "repeated"
    return (f"runs {differ} differ from the first ({when} calls): a race between programs or calls, or atomics "
            "the variant does not declare (DETERMINISTIC = False)")


def call_reference(spec: KernelSpec, inputs, config, seed: int) -> dict[str, torch.Tensor]:
    """The reference's outputs and gradients, with the cotangents drawn from ``seed``."""
    names = (*spec.outputs, *spec.gradient_names())
    leaves = _leaves(inputs, spec.differentiable, "contiguous")
    outputs = _forward(spec.reference_forward(), leaves, config)
    cotangents = spec.grad_outputs(tuple(o.detach() for o in outputs), torch.Generator().manual_seed(seed))
    return dict(zip(names, (*outputs, *_backward(spec, outputs, leaves, cotangents))))
