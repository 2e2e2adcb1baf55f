"""What the loop must know about a kernel without reading its Triton code.

A kernel lives in ``kernels/<name>/``: ``spec.py`` defines one ``KernelSpec`` subclass (the math, the inputs,
the passes, the suites, the tolerances, the byte counts) and ``baseline.py`` is variant zero.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import Tensor

PASSES = ("forward", "backward", "full")
#: The benchmark suites drawn from real models, by split (``liger_perf.kernel.model_shapes``): the loop may tune
#: on the first; only ``liger-perf bench --suite models`` reads the second.
MODEL_SUITES = {"models-tune": "tune", "models-held-out": "held-out"}

Shape = tuple[int, ...]
Inputs = dict[str, Tensor]
Outputs = tuple[Tensor, ...]
# Runs a kernel's forward: the variant's public interface, or the PyTorch reference.
ForwardFn = Callable[[Inputs, Mapping[str, Any]], Outputs]


@dataclass(frozen=True)
class Tolerance:
    """When a result counts as equal to its reference.

    An element passes when ``|out - ref| <= atol + rtol * |ref|``; the whole tensor must also satisfy
    ``||out - ref|| / ||ref|| <= norm``. The norm bound is what catches a systematic error (a wrong casting
    mode shifts every element of a row by a fraction of an ulp) that stays inside the per-element bound.
    """

    atol: float
    rtol: float
    norm: float


@dataclass(frozen=True)
class Tolerances:
    same_dtype: Tolerance  # against the casting-faithful PyTorch reference in the same dtype: tight
    float64: Tolerance  # against the same math in float64: scaled to the dtype's precision
    convergence: float  # relative difference allowed in a training loss or a trained weight
    #: For outputs that sum over rows (``KernelSpec.row_reductions``), against the same-dtype reference: their
    #: rounding legitimately depends on the order of summation, which PyTorch's CPU and GPU reductions differ in.
    row_reduction: Tolerance | None = None

    def for_output(self, name: str, row_reductions: Sequence[str]) -> tuple[Tolerance, Tolerance]:
        """(against the same-dtype reference, against float64) for one output."""
        if name not in row_reductions:
            return self.same_dtype, self.float64
        # A sum over thousands of rows of half-precision products can cancel to a value far smaller than its
        # terms, so one element's relative error against float64 says nothing; the norm bound still holds.
        return self.row_reduction or self.same_dtype, replace(self.float64, atol=math.inf)


@dataclass(frozen=True)
class Remedy:
    """A knob change that answers a diagnosis, with the reason it should help and the effect to expect."""

    changes: Mapping[str, Any]
    why: str
    effect: str


@dataclass(frozen=True)
class Footprint:
    """What one kernel launch asks of the GPU, as the kernel author estimates it for given knobs.

    ``threads``: per block (warps x 32); ``shared_bytes``: shared memory per block (software-pipelining buffers,
    reduction scratch); ``registers``: an estimate of the registers per thread the live values need, or None;
    ``elements``: the largest block-level tensor, in elements."""

    kernel: str
    threads: int
    shared_bytes: int = 0
    registers: int | None = None
    elements: int = 0


@dataclass(frozen=True)
class Case:
    """One point of a check or a benchmark: a shape, a dtype and the kernel's options."""

    shape: Shape
    dtype: torch.dtype
    config: Mapping[str, Any] = field(default_factory=dict)

    def config_label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.config.items())

    def label(self) -> str:
        opts = self.config_label()
        return f"{shape_label(self.shape)} {dtype_name(self.dtype)}" + (f" [{opts}]" if opts else "")


#: Rows of the gate's width cases: several programs (a row each where rows are split), and cheap.
BOUNDARY_ROWS = 3


def _prime_below(n: int) -> int:
    """The largest prime below ``n`` (``n`` >= 3)."""
    for candidate in range(n - 1, 1, -1):
        if all(candidate % d for d in range(2, math.isqrt(candidate) + 1)):
            return candidate
    return 2


def shape_label(shape: Shape) -> str:
    return "x".join(map(str, shape))


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class KernelSpec(ABC):
    """Everything the loop needs to know about one kernel. Subclass it in ``kernels/<name>/spec.py``."""

    name: str
    #: The math, stated once; shown by ``liger-perf kernels`` and handed to code-writing proposers.
    math: str
    #: Names a variant module must define (its public interface).
    interface: tuple[str, ...]
    #: Inputs that receive gradients, in the order ``make_inputs`` returns them.
    differentiable: tuple[str, ...]
    #: Names of the forward's outputs, in order.
    outputs: tuple[str, ...]
    #: Outputs (or gradients, named ``d<input>``) that are sums over rows, such as a weight's gradient.
    row_reductions: tuple[str, ...] = ()
    #: Whether each output row, and each row of a row input's gradient, depends on that row of the inputs alone
    #: (a weight's gradient then sums over rows): the gate's large case may take its reference a piece of rows
    #: at a time (``correctness._large_reference``), in about 14 inputs' worth of GPU memory instead of 24. The gate
    #: checks the claim on the drawn rows first (``correctness._rows_mix``): where the rows mix, ``check`` stops with
    #: one line that says to set it False (a spec that leaves it False and mixes rows has its reference taken whole).
    rows_independent: bool = False
    passes: tuple[str, ...] = PASSES
    #: Dtypes per suite. The Triton interpreter rounds float32 -> bfloat16 by truncation where a GPU rounds to
    #: nearest even, so a casting-faithful comparison in bfloat16 is only meaningful on a GPU; the interpreter
    #: suite checks the half-precision casting paths in float16, whose conversions it rounds correctly.
    dtypes: Mapping[str, tuple[torch.dtype, ...]] = {
        "gpu": (torch.float32, torch.bfloat16),
        "interpret": (torch.float32, torch.float16),
    }
    #: Benchmark shapes: "gpu" for a CUDA device, "interpret" (small) for the Triton interpreter. The model suites
    #: ("models-tune", "models-held-out", ``MODEL_SUITES``) are drawn from real models' widths instead
    #: (``liger_perf.kernel.model_shapes``), of the kind ``model_widths`` names.
    suites: Mapping[str, Sequence[Shape]]
    #: Which of a model's widths a row of this kernel spans: "hidden" (the residual stream: a norm) or
    #: "intermediate" (the MLP's: an activation).
    model_widths: str = "hidden"
    #: Shapes the correctness gate sweeps per suite: odd widths, one row, rows that do not divide evenly.
    check_shapes: Mapping[str, Sequence[Shape]]
    #: Kernel options the gate sweeps (casting modes and the like); the benchmark uses ``bench_config``.
    check_configs: Sequence[Mapping[str, Any]] = ({},)
    bench_config: Mapping[str, Any] = {}
    tolerances: Mapping[torch.dtype, Tolerances]
    #: Kernel knowledge for the rules proposer: per pass, per diagnosis (``spills``,
    #: ``register_limited_occupancy``, ``low_achieved_occupancy``, ``under_one_wave``, ``memory_latency``,
    #: ``shared_memory_stalls``, ``extra_launches``), the knob changes worth trying, best first; ``explore`` lists
    #: moves to try when no diagnosis is left.
    remedies: Mapping[str, Mapping[str, Sequence[Remedy]]] = {}

    @abstractmethod
    def make_inputs(self, shape: Shape, dtype: torch.dtype, device: torch.device,
                    generator: torch.Generator | None = None, config: Mapping[str, Any] | None = None) -> Inputs:
        """Fresh random inputs (never zeros: they hide unwritten outputs); seeded only through ``generator``.

        Seeded draws (the gate, the accuracy step: ``generator`` is a CPU generator) are made on the CPU, so that a
        seed gives the same values on every device. Unseeded ones (timing, screening, precompile, NCU) need values of
        the same distribution, not the same values everywhere (they come from the device's default generator: the
        same from run to run on one kind of device, not across kinds), and are best made on ``device``: torch draws
        normal values on the CPU in one thread, a trial's timing draws every case's inputs twice, and
        ``scripts/draw_cost.py`` measures what that cost on a GPU machine.

        ``config`` is the case's kernel options: a spec may shape its inputs to what the options must survive
        (activation outliers for a casting mode that promises float32 statistics, say)."""

    def tolerance(self, dtype: torch.dtype, config: Mapping[str, Any]) -> Tolerances:
        """Tolerances for a case; override where an option (a casting mode, say) changes what is achievable."""
        return self.tolerances[dtype]

    @abstractmethod
    def reference(self, inputs: Inputs, config: Mapping[str, Any]) -> Outputs:
        """The PyTorch reference, casting-faithful in the inputs' dtype and valid in float64."""

    @abstractmethod
    def call(self, variant: ModuleType, inputs: Inputs, config: Mapping[str, Any]) -> Outputs:
        """Run a variant's forward through its public interface."""

    @abstractmethod
    def min_bytes(self, pass_name: str, shape: Shape, dtype: torch.dtype) -> int:
        """Fewest bytes the pass must move through device memory: each input read once, each output written once."""

    @abstractmethod
    def convergence_model(self, forward: ForwardFn, config: Mapping[str, Any], generator: torch.Generator,
                          device: torch.device, dtype: torch.dtype) -> tuple[torch.nn.Module, Tensor, Tensor]:
        """A small model that uses the kernel through ``forward``, and its training data ``(inputs, targets)``.

        Built from ``generator`` alone, so two calls with equally seeded generators give the same model and data.
        """

    def launch_footprints(self, knobs: Mapping[str, Any], pass_name: str, shape: Shape,
                          dtype: torch.dtype) -> list[Footprint]:
        """The launches ``pass_name`` makes at ``shape`` and ``dtype`` with the variant's ``knobs`` (read from its
        source, never imported), for the rules proposer's launch model (``liger_perf.propose.resources``).
        Empty (the default): no model, nothing is ruled out."""
        return []

    def effective_settings(self, knobs: Mapping[str, Any], shape: Shape,
                           dtype: torch.dtype) -> Mapping[str, Any] | None:
        """What a launch at ``shape`` and ``dtype`` really runs with under ``knobs``: the block sizes, warps, paths
        and options the variant derives from them (a block larger than the row, say, is no change). The rules
        proposer skips a move of a dispatch bucket that changes none of them at the bucket's shapes, and the judge
        takes a pass whose settings a move leaves as they were for the best's own code (noise there is not
        re-measured, and counts for nothing along the chain). Keyed by pass name (``forward``, ``backward``) where
        the passes' settings differ. None (the default): unknown, nothing is skipped."""
        return None

    def runs_the_same(self, knobs: Mapping[str, Any], other: Mapping[str, Any], shape: Shape, dtype: torch.dtype,
                      pass_name: str | None = None) -> bool:
        """Whether ``pass_name`` runs with the same ``effective_settings`` under ``knobs`` and ``other`` at
        ``shape`` and ``dtype`` (every pass's where it is None or a pass the settings are not keyed by, such as
        ``full``). False where the model cannot tell."""
        try:
            before, after = self.effective_settings(knobs, shape, dtype), self.effective_settings(other, shape, dtype)
        except Exception:  # noqa: BLE001 - kernel code; a model that cannot answer tells nothing
            return False
        if before is None or after is None:
            return False
        if pass_name is not None and pass_name in before and pass_name in after:
            return before[pass_name] == after[pass_name]
        return before == after

    def upstream_forward(self) -> ForwardFn | None:
        """The upstream ``liger-kernel`` implementation, a peer to compare against; None when that package (an
        optional dependency) is not installed or has no such kernel."""
        return None

    def variant_forward(self, variant: ModuleType) -> ForwardFn:
        return lambda inputs, config: self.call(variant, inputs, config)

    def reference_forward(self) -> ForwardFn:
        return self.reference

    def grad_outputs(self, outputs: Outputs, generator: torch.Generator | None = None) -> Outputs:
        """Random cotangents for every output, so that every output's gradient path is exercised. Seeded
        (``generator`` is a CPU generator) they are drawn on the CPU, so a seed gives the same values on every
        device; unseeded, on the outputs' device (``make_inputs`` says why)."""
        return tuple(torch.randn(o.shape, generator=generator, device="cpu" if generator is not None else o.device
                                 ).to(device=o.device, dtype=o.dtype) for o in outputs)

    # -- what the correctness gate derives from the spec (``liger_perf.gate.correctness``) -------------------------

    def batched_shape(self, shape: Shape) -> Shape:
        """The check shape ``(rows, *row)`` as a model hands it over, with its rows split over two leading
        dimensions (batch, sequence): ``make_inputs`` must accept it, and the outputs come back in it."""
        rows, *row = shape
        return (2, rows // 2, *row) if rows % 2 == 0 else (1, rows, *row)

    def boundary_shapes(self, knobs: Mapping[str, Any], suite: str) -> list[Shape]:
        """Shapes at the sizes a variant's knobs name: a power of two ``v`` >= 16 among the knob values (a block,
        a chunk, a threshold between two paths) gives widths ``v - 1``, ``v`` and ``v + 1`` (a last block one
        short, exactly full, one element into the next), a small integer ``n`` (rows per program, tile rows)
        gives ``n - 1``, ``n`` and ``n + 1`` rows. The gate runs each in every option. Override where a kernel's
        blocks run along another dimension."""
        limit = 1 << (15 if suite == "interpret" else 17)
        values = sorted({v for v in knobs.values() if isinstance(v, int) and not isinstance(v, bool)})
        shapes = []
        for v in values:
            if 16 <= v < limit and v & (v - 1) == 0:
                shapes += [(1, v + 1), (3, v - 1), (3, v)]
            elif 2 <= v <= 128:
                shapes += [(v + 1, 33), (v - 1, 33), (v, 33)]
        return list(dict.fromkeys(shapes))

    def bucket_shapes(self, bucket: str, knobs: Mapping[str, Any], suite: str) -> list[Shape]:
        """Shapes inside one bucket of a variant's ``DISPATCH`` table (``"<row block>x<bytes>"``: widths from half
        the block, exclusive, to the block), where that entry's ``knobs`` run: the narrowest width, one short of
        full and full, on ``BOUNDARY_ROWS`` rows; the widest on a prime number of rows (programs that share rows
        unevenly); the widths the entry's knobs name inside the bucket (``boundary_shapes``); and, at one short of
        full, ``n - 1``, ``n`` and ``n + 1`` rows for every value ``n`` of a knob that counts rows (``rows`` in
        its name), whatever its size. Override where a kernel's blocks run along another dimension."""
        block = int(bucket.partition("x")[0])
        widths = [w for w in dict.fromkeys((block // 2 + 1, block - 1, block)) if block // 2 < w <= block]
        inner = widths[-2] if len(widths) > 1 else widths[-1]  # one short of full where the bucket has room
        shapes = [(BOUNDARY_ROWS, w) for w in widths] + [(37, widths[-1])]
        shapes += [(rows, width) for rows, width in self.boundary_shapes(knobs, suite) if block // 2 < width <= block]
        counts = {v for k, v in knobs.items() if "rows" in k.lower() and isinstance(v, int) and not isinstance(v, bool)}
        shapes += [(n + d, inner) for n in sorted(counts) for d in (-1, 0, 1) if n + d >= 1]
        return list(dict.fromkeys(shapes))

    def width_sweep(self, suite: str) -> list[Shape]:
        """Widths at the edges of every block the variant runs along the row: a Triton block is a power of two,
        at least the row where the row is held whole, so at the widths of the suite and of the check shapes the
        blocks are the powers of two up to the next one above the widest. Each power of two ``p`` up to that
        gives ``p - 1``, ``p`` and (below the largest) ``p + 1`` columns, and a prime width no block divides;
        ``BOUNDARY_ROWS`` rows each (several programs, and the smallest case that has them). The gate runs each
        width once, the options and dtypes taking turns. Override (to return ``[]``, say) where a kernel's
        blocks do not run along the row."""
        widths = [s[-1] for s in (*self.suites[suite], *self.check_shapes[suite])]
        largest = 1 << max(w - 1 for w in widths).bit_length()
        found, p = [], 2
        while p <= largest:
            found += [p - 1, p] + ([p + 1] if p < largest else [])
            p *= 2
        found.append(_prime_below(largest * 3 // 4))
        return [(BOUNDARY_ROWS, w) for w in dict.fromkeys(found)]

    def large_shape(self) -> Shape:
        """A GPU check shape of more than 2**31 elements: an offset computed in 32 bits overflows in it."""
        return (2**31 // 8192 + 1, 8192)

    def may_overwrite_cotangents(self, config: Mapping[str, Any]) -> bool:
        """Whether the backward may write into the gradients it is given (an in-place option); otherwise the gate
        fails a variant that does, since autograd may hand the same gradient to other consumers."""
        return False

    def gradient_names(self) -> tuple[str, ...]:
        return tuple(f"d{name}" for name in self.differentiable)

    def cases(self, suite: str, kind: str = "check") -> list[Case]:
        """The check cases (every shape x dtype x config) or the benchmark cases of a suite. A model suite has
        benchmark cases only: each shape in bfloat16 and float32, every fourth in float16 too."""
        if suite in MODEL_SUITES:
            from liger_perf.kernel.model_shapes import model_shapes

            if kind == "check":
                raise ValueError(f"the suite {suite} has benchmark cases only")
            shapes = model_shapes(self.model_widths, MODEL_SUITES[suite])
            return [Case(s, d, dict(self.bench_config)) for i, s in enumerate(shapes)
                    for d in (torch.bfloat16, torch.float32, *((torch.float16,) if i % 4 == 0 else ()))]
        if kind == "check":
            return [Case(tuple(s), d, dict(c)) for c in self.check_configs for d in self.dtypes[suite]
                    for s in self.check_shapes[suite]]
        return [Case(tuple(s), d, dict(self.bench_config)) for d in self.dtypes[suite] for s in self.suites[suite]]
