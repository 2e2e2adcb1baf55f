"""Side-by-side timing: contenders interleaved in one process, on the same inputs, compared as ratios.

Absolute times drift between runs and machines (clocks, neighbours, thermal state), so nothing here is ever
compared with a number from another run. Per repetition every contender runs once, in a fresh random order,
after an L2 flush; on a GPU each run is timed with CUDA events. The result per (pass, shape, dtype) is each
contender's median and its ratio to the reference contender with a paired bootstrap confidence interval.
The intervals of one trial are simultaneous (Bonferroni over all of its ratios), so an A/A trial's
intervals all contain 1.0 at the stated confidence, not just each one on its own.

Where a contender's buffers sit in memory is randomised into the repetition noise. Every contender has its own
buffers (inputs cloned into its own leaves, the backward pass's saved activations), and a memory-bound kernel
moves by a percent or two with where they sit: allocated once, in a fixed order, that placement is a fixed
effect of the role (candidate, current best), the same in every repetition, which the bootstrap (it resamples
repetitions) cannot see. Two copies of one kernel then differ "significantly" (H200 A/A trials: 3-4 of 36
intervals excluding 1, by 0.5-1 %, the same sign in every trial). So each contender gets a pool of input slots,
allocated in a random order interleaved across contenders, each repetition runs it on a slot drawn at random,
and on a GPU the pool is re-allocated a few times per case: placement varies from repetition to repetition,
where the bootstrap sees it, and no role keeps the first (or last) allocations.

What no randomisation reaches is the timer itself: a difference of two medians of CUDA-event times is known to
no better than the events' resolution (about half a microsecond, the CUDA Runtime API says of
``cudaEventElapsedTime``). With placement randomised, six H200 A/A trials still had the copy 1.8-3.3 % faster
at the shortest backward (2048x1024 float32, 23 us, the same sign every time: 0.4-0.8 us), and three of those
intervals excluded 1 (reports/evidence/2026-12-01-aa/, -aa-70bfdac/). So each ratio's interval is widened by
that resolution over the reference's median (``TimingPlan.resolution_ms``): at 23 us by 2.2 %, at 1 ms by
0.05 %. A gain at a shape shorter than this allows is not claimed.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from liger_perf.kernel.device import Device
from liger_perf.kernel.passes import as_tuple, case_inputs, prepare_pass
from liger_perf.kernel.spec import Case, ForwardFn, KernelSpec, dtype_name, shape_label
from liger_perf.core.wording import count

SAMPLE_COLUMNS = ["pass", "shape", "dtype", "contender", "rep", "ms"]
SUMMARY_COLUMNS = ["pass", "shape", "dtype", "contender", "median_ms", "relative_to", "ratio", "ci_low", "ci_high",
                   "reps", "min_bytes", "bandwidth_fraction"]
CUDA_EVENT_RESOLUTION_MS = 0.5e-3  # "around 0.5 microseconds" (CUDA Runtime API, cudaEventElapsedTime)
L2_FLUSH_BYTES = 256 * 2**20  # several times the L2 of any current GPU (an H200 has 60 MiB)


@dataclass(frozen=True)
class TimingPlan:
    repetitions: int
    warmup: int
    confidence: float = 0.95
    bootstrap: int = 2000
    seed: int = 0
    #: Input slots per contender (see ``time_case``); 0: the device's default (``default_slots``).
    slots: int = 0
    #: Re-allocate the slot pool every this many repetitions; 0: the device's default (``default_rebuild``),
    #: negative: never.
    rebuild_every: int = 0
    #: The timer's resolution: each ratio's interval is widened by this over the reference's median (see the
    #: module's docstring). ``default`` sets the CUDA events' on a GPU; the CPU wall clock needs none.
    resolution_ms: float = 0.0

    @staticmethod
    def default(device: Device, repetitions: int = 0) -> "TimingPlan":
        slots = default_slots(device)
        resolution = 0.0 if device.interpreted else CUDA_EVENT_RESOLUTION_MS
        if repetitions > 0:
            return TimingPlan(repetitions=repetitions, warmup=2 if device.interpreted else 5, slots=slots,
                              resolution_ms=resolution)
        # The interpreter runs a kernel thousands of times slower; its timings only exercise the machinery.
        return (TimingPlan(repetitions=5, warmup=1, slots=slots) if device.interpreted
                else TimingPlan(repetitions=100, warmup=5, slots=slots, resolution_ms=resolution))

    def slots_on(self, device: Device) -> int:
        return self.slots if self.slots > 0 else default_slots(device)

    def rebuild_on(self, device: Device) -> int:
        """Repetitions between re-allocations of the slot pool; 0: never."""
        if self.rebuild_every < 0:
            return 0
        return self.rebuild_every if self.rebuild_every > 0 else default_rebuild(device, self.repetitions)


def default_slots(device: Device) -> int:
    """Four placements per contender on a GPU; one under the interpreter, whose CPU timings have no placement
    effect worth the cost (a slot's warm-up and a backward slot's forward are interpreted programs)."""
    return 1 if device.interpreted else 4


def default_rebuild(device: Device, repetitions: int) -> int:
    """On a GPU, a fresh pool halfway through the case (two pools: twice the placements); under the
    interpreter (a handful of repetitions, CPU timings), one pool."""
    return 0 if device.interpreted else max(1, repetitions // 2)


class _Timer:
    """CUDA events on a GPU (queued, read after one synchronize); the wall clock on the CPU.

    On a GPU each run is preceded by a short device-side spin, during which the CPU queues the L2 flush, the
    start event, the pass's kernel launches and the end event: the events then time the kernels back to back,
    not the Python and autograd overhead of launching them (which at small shapes is larger than the kernels
    and identical for every contender)."""

    SPIN_CYCLES = 2_000_000  # about 1 ms at H100/H200 clocks: longer than launching any pass takes

    def __init__(self, device: Device):
        self.device = device
        self.flush_buffer = None
        if not device.interpreted:
            self.flush_buffer = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device.torch_device)

    def measure(self, thunk: Callable[[], Any]):
        if self.flush_buffer is None:
            start = time.perf_counter()
            thunk()
            return (time.perf_counter() - start) * 1e3
        _spin(self.SPIN_CYCLES)
        self.flush_buffer.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        thunk()
        end.record()
        return start, end

    def read(self, measured) -> float:
        if isinstance(measured, float):
            return measured
        return measured[0].elapsed_time(measured[1])

    def synchronize(self):
        self.device.synchronize()


def _spin(cycles: int) -> None:
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(cycles)


def copy_bandwidth(device: Device, nbytes: int = 2**30, repetitions: int = 10) -> float:
    """Bytes per second of a device-to-device copy, counting bytes read plus bytes written (as ``min_bytes``
    does): the practical floor against which every pass is stated."""
    if device.interpreted:
        nbytes, repetitions = 64 * 2**20, 3
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device.torch_device).fill_(1.0)
    dst = torch.empty_like(src)
    timer = _Timer(device)
    dst.copy_(src)
    measured = [timer.measure(lambda: dst.copy_(src)) for _ in range(repetitions)]
    timer.synchronize()
    ms = float(np.median([timer.read(m) for m in measured]))
    return 2 * nbytes / (ms / 1e3)


def peers_here(spec: KernelSpec, interpreted: bool) -> tuple[list[str], dict[str, str]]:
    """The names of the peers a kernel is timed against here (PyTorch eager, ``torch.compile``, the upstream
    liger-kernel), and for each one that cannot be, why."""
    names, unavailable = ["eager"], {}
    if interpreted:
        unavailable["torch.compile"] = "not measured under the interpreter (CPU timings)"
    else:
        names.append("torch.compile")
    if spec.upstream_forward() is None:
        unavailable["liger-kernel"] = "liger-kernel is not installed (optional)"
    elif interpreted:
        unavailable["liger-kernel"] = "not measured under the interpreter (CPU timings)"
    else:
        names.append("liger-kernel")
    return names, unavailable


def peer_contenders(spec: KernelSpec, device: Device) -> tuple[dict[str, ForwardFn], dict[str, str]]:
    """The peers a kernel is timed against here (``peers_here``) ready to run, and why any other is not."""
    names, unavailable = peers_here(spec, device.interpreted)
    found: dict[str, ForwardFn] = {"eager": spec.reference_forward()}
    if "torch.compile" in names:
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
        found["torch.compile"] = torch.compile(spec.reference_forward(), dynamic=False)
    if "liger-kernel" in names:
        found["liger-kernel"] = spec.upstream_forward()
    return found, unavailable


def instances(contender: ForwardFn | Sequence[ForwardFn]) -> list[ForwardFn]:
    """A contender's loaded instances: one forward, or several (the same module imported more than once)."""
    return list(contender) if isinstance(contender, (list, tuple)) else [contender]


def time_case(spec: KernelSpec, contenders: Mapping[str, ForwardFn], case: Case, pass_name: str, device: Device,
              plan: TimingPlan, rng: np.random.Generator, judged: Iterable[str] = ("candidate", "against"),
              spot_checks: list[dict] | None = None, drawn: tuple | None = None,
              spot_drawn: tuple | None = None) -> dict[str, np.ndarray]:
    """Milliseconds per repetition for each contender, on the same inputs, interleaved in random order.

    Every contender (not only the judged ones) gets a pool of ``plan.slots`` input slots: prepared passes with
    their own leaves cloned from the case's inputs and, for a backward pass, their own saved activations. The
    pool is allocated in a random order interleaved across contenders and slots; each repetition runs every
    contender, in a fresh random order, on a slot drawn at random for it; on a GPU the pool is freed and
    allocated afresh (in a new random order) every ``plan.rebuild_every`` repetitions. Why: where a buffer sits
    in memory moves a memory-bound kernel's time by a percent or two. Allocated once per contender in a fixed
    order, placement is a per-role effect, the same in every repetition: the bootstrap, which resamples
    repetitions, cannot see it, and two copies of one kernel come out "different" (it did on the H200).
    Randomised, placement is part of the repetition noise that the interval is built from. A contender given as
    several forwards (its module imported more than once: separately loaded kernels, at other code addresses)
    has them dealt over its slots, so an effect of one loaded copy is randomised the same way (four A/A trials
    on the H200 with input slots alone showed one copy 3 % faster at the shortest backward twice).

    ``judged``: the contenders whose timed calls are spot-checked (any names: the judged pair of a trial, or
    every candidate and the current best of a screening; names not among ``contenders`` are ignored).
    ``spot_checks``: where to add, for each of them, the check of one timed call, at a repetition drawn at
    random, run on inputs drawn afresh for it and compared with the float64 reference: what is timed is what
    computes the right result (not a call patched, or one that returns what it returned before).

    ``drawn`` and ``spot_drawn``: the case's inputs and cotangents (``case_inputs``), and the spot check's, when
    the caller drew them for several passes (every call clones what it is given: they are never written)."""
    inputs, cotangents = drawn or case_inputs(spec, case, device)
    names = list(contenders)
    checked = [name for name in dict.fromkeys(judged) if name in contenders]
    slots, rebuild = plan.slots_on(device), plan.rebuild_on(device)
    spot_rep = int(rng.integers(plan.repetitions)) if spot_checks is not None and plan.repetitions else -1
    spot: dict[str, Any] = {}
    spot_outputs: dict[str, Any] = {}
    if spot_rep >= 0:
        spot_inputs, spot_cotangents = spot_drawn or case_inputs(spec, case, device)
        spot = {name: prepare_pass(spec, instances(contenders[name])[0], spot_inputs, case.config, pass_name,
                                   spot_cotangents)
                for name in checked}
    timer = _Timer(device)

    def allocate() -> dict[str, list]:
        """Every contender's slots, allocated in a random order across contenders and slots."""
        order = [(name, slot) for name in names for slot in range(slots)]
        pool: dict[str, list] = {name: [None] * slots for name in names}
        for i in rng.permutation(len(order)):
            name, slot = order[i]
            loaded = instances(contenders[name])
            pool[name][slot] = prepare_pass(spec, loaded[slot % len(loaded)], inputs, case.config, pass_name,
                                            cotangents)
        return pool

    def warm(pool: dict[str, list], rounds: int) -> None:
        for _ in range(rounds):  # JIT compilation, autotuning and allocator growth stay out of the numbers
            for name in names:
                for prepared in pool[name]:
                    prepared.arm()()
        timer.synchronize()

    pool = allocate()
    warm(pool, plan.warmup)
    measured: dict[str, list] = {name: [] for name in names}
    for rep in range(plan.repetitions):
        if rebuild and rep and rep % rebuild == 0:
            pool = None  # the old pool is freed before the new one is allocated: one pool in memory at a time
            if not device.interpreted:
                timer.synchronize()
                torch.cuda.empty_cache()  # fresh allocations, not only the old blocks dealt out anew
            pool = allocate()
            warm(pool, min(1, plan.warmup))
        slot_of = rng.integers(slots, size=len(names))  # independently per contender and repetition
        for i in rng.permutation(len(names)):
            name = names[i]
            if rep == spot_rep and name in spot:
                call = spot[name].arm()

                def thunk(call=call, name=name):
                    spot_outputs[name] = call()
            else:
                thunk = pool[name][slot_of[i]].arm()
            measured[name].append(timer.measure(thunk))
            del thunk  # holds a slot's buffers: none outlives its pool
    timer.synchronize()
    del pool
    if spot_rep >= 0:
        spot_checks.extend(_spot_check(spec, case, pass_name, spot_inputs, spot_cotangents, spot_outputs))
    return {name: np.array([timer.read(m) for m in ms]) for name, ms in measured.items()}


def _spot_check(spec: KernelSpec, case: Case, pass_name: str, inputs, cotangents, outputs: dict[str, Any],
                ) -> list[dict]:
    """Each contender's timed outputs against the float64 reference, with the gate's float64 tolerances."""
    from liger_perf.gate.correctness import compare

    wide = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    reference = prepare_pass(spec, spec.reference_forward(), wide, case.config, pass_name,
                             tuple(c.double() for c in cotangents)).arm()()
    names = spec.outputs if pass_name == "forward" else spec.gradient_names()
    tolerances = spec.tolerance(case.dtype, case.config)
    rows = []
    for contender, got in outputs.items():
        got = as_tuple(got)
        reasons = []
        for name, value, expected in zip(names, got, as_tuple(reference)):
            verdict = compare(value.detach(), expected.detach(), tolerances.for_output(name, spec.row_reductions)[1])
            if verdict["verdict"] != "pass":
                reasons.append(f"{name}: {verdict['reason']}")
        if len(got) != len(names):
            reasons.append(f"{count(len(got), 'output')} where {len(names)} were expected")
        rows.append({"pass": pass_name, "shape": shape_label(case.shape), "dtype": dtype_name(case.dtype),
                     "contender": contender, "passed": not reasons, "reason": "; ".join(reasons)[:500]})
    return rows


def time_suite(spec: KernelSpec, contenders: Mapping[str, ForwardFn], cases: list[Case], passes: list[str],
               device: Device, plan: TimingPlan, progress: Callable[[str], None] | None = None,
               spot_checks: list[dict] | None = None,
               judged: Iterable[str] = ("candidate", "against"), keep: dict | None = None) -> pd.DataFrame:
    """Every repetition of every contender, one row each (``SAMPLE_COLUMNS``); each case's spot checks of the
    ``judged`` contenders' timed calls are added to ``spot_checks`` (see ``time_case``). ``keep``: where to
    keep each case's inputs (by ``Case.label()``) for ``peak_memory``."""
    judged = tuple(judged)
    rng = np.random.default_rng(plan.seed)
    rows = []
    # Each case's inputs are drawn once for all its passes (and once more, fresh, for their spot checks): when the
    # specs drew them on the CPU, drawing per pass took longer than the timing at the suite's widest shapes (now
    # unseeded draws are made on the device: ``KernelSpec.make_inputs``).
    for case in cases:
        drawn = case_inputs(spec, case, device)
        if keep is not None:
            keep[case.label()] = drawn
        spot_drawn = case_inputs(spec, case, device) if spot_checks is not None else None
        for pass_name in passes:
            if progress is not None:
                progress(f"{pass_name} {case.label()}")
            times = time_case(spec, contenders, case, pass_name, device, plan, rng, judged=judged,
                              spot_checks=spot_checks, drawn=drawn, spot_drawn=spot_drawn)
            for name, ms in times.items():
                rows.extend({"pass": pass_name, "shape": shape_label(case.shape), "dtype": dtype_name(case.dtype),
                             "contender": name, "rep": i, "ms": float(t)} for i, t in enumerate(ms))
        del drawn, spot_drawn
    # In the passes' order, as before (tables and readers group by pass first).
    frame = pd.DataFrame(rows, columns=SAMPLE_COLUMNS)
    order = {p: i for i, p in enumerate(passes)}
    return frame.sort_values("pass", key=lambda col: col.map(order), kind="stable").reset_index(drop=True)


def ratio_interval(times: np.ndarray, reference: np.ndarray, alpha: float, resamples: int,
                   rng: np.random.Generator) -> tuple[float, float, float]:
    """``median(times) / median(reference)`` and its percentile-bootstrap interval at level ``1 - alpha``.

    Repetitions are resampled in pairs (the i-th run of each was interleaved with the other), so slow drift
    over the run affects both sides of a resample alike."""
    n = min(len(times), len(reference))
    times, reference = times[:n], reference[:n]
    ratio = float(np.median(times) / np.median(reference))
    if n < 2:
        return ratio, math.nan, math.nan
    idx = rng.integers(0, n, size=(resamples, n))
    boot = np.median(times[idx], axis=1) / np.median(reference[idx], axis=1)
    low, high = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    return ratio, float(low), float(high)


def widened(low: float, high: float, resolution_ms: float, reference_ms: float) -> tuple[float, float]:
    """A ratio's interval widened by the timer's resolution over the reference's median on each side: the
    difference of two medians is not known more finely than the clock that measured them."""
    if resolution_ms <= 0 or not reference_ms > 0 or not (math.isfinite(low) and math.isfinite(high)):
        return low, high
    margin = resolution_ms / reference_ms
    return max(low - margin, 0.0), high + margin


def summarize(samples: pd.DataFrame, reference: str, spec: KernelSpec, bandwidth: float,
              plan: TimingPlan) -> pd.DataFrame:
    """Per (pass, shape, dtype, contender): median, ratio to ``reference`` with a simultaneous interval, and
    the fraction of the memory-bandwidth floor (spec bytes / copy bandwidth, over the median time)."""
    rng = np.random.default_rng(plan.seed + 1)
    keys = ["pass", "shape", "dtype"]
    groups = list(samples.groupby(keys, sort=False))
    n_ratios = max(1, len(groups) * (samples["contender"].nunique() - 1))
    alpha = (1 - plan.confidence) / n_ratios
    rows = []
    for (pass_name, shape, dtype), group in groups:
        by_name = {name: g.sort_values("rep")["ms"].to_numpy() for name, g in group.groupby("contender", sort=False)}
        ref = by_name[reference]
        nbytes = spec.min_bytes(pass_name, tuple(int(s) for s in shape.split("x")), getattr(torch, dtype))
        for name, ms in by_name.items():
            median = float(np.median(ms))
            if name == reference:
                ratio, low, high = 1.0, 1.0, 1.0
            else:
                ratio, low, high = ratio_interval(ms, ref, alpha, plan.bootstrap, rng)
                low, high = widened(low, high, plan.resolution_ms, float(np.median(ref)))
            floor_ms = nbytes / bandwidth * 1e3
            rows.append({"pass": pass_name, "shape": shape, "dtype": dtype, "contender": name, "median_ms": median,
                         "relative_to": reference, "ratio": ratio, "ci_low": low, "ci_high": high, "reps": len(ms),
                         "min_bytes": nbytes, "bandwidth_fraction": floor_ms / median if median > 0 else math.nan})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def peak_memory(spec: KernelSpec, contenders: Mapping[str, ForwardFn], cases: list[Case],
                device: Device, drawn: Mapping[str, tuple] | None = None) -> pd.DataFrame:
    """Peak device memory of a forward plus backward, above what the inputs already hold, per contender.

    Measured with the CUDA caching allocator's statistics; the CPU has no such counter, so under the
    interpreter the column is empty (NaN) and the reason is stated. ``drawn``: inputs already drawn, by
    ``Case.label()`` (``time_suite``'s ``keep``)."""
    rows = []
    for case in cases:
        inputs, cotangents = (drawn or {}).get(case.label()) or case_inputs(spec, case, device)
        for name, loaded in contenders.items():
            fwd = instances(loaded)[0]
            peak = math.nan
            if not device.interpreted:
                prepared = prepare_pass(spec, fwd, inputs, case.config, "full", cotangents)
                prepared.arm()()  # compile outside the measurement
                thunk = prepared.arm()
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                thunk()
                torch.cuda.synchronize()
                peak = float(torch.cuda.max_memory_allocated() - base)
                del prepared, thunk
            rows.append({"shape": shape_label(case.shape), "dtype": dtype_name(case.dtype), "contender": name,
                         "peak_bytes": peak})
    return pd.DataFrame(rows, columns=["shape", "dtype", "contender", "peak_bytes"])


def timing_table(summary: pd.DataFrame, unit: str = "ms") -> pd.DataFrame:
    """Per pass, shape and dtype: every contender's median, and the ratios with their intervals."""
    table = summary.pivot_table(index=["pass", "shape", "dtype"], columns="contender", values="median_ms",
                                sort=False).add_suffix(f" {unit}")
    for row in summary[summary["contender"] != summary["relative_to"]].to_dict("records"):
        table.loc[(row["pass"], row["shape"], row["dtype"]), f"{row['contender']} / {row['relative_to']}"] = (
            f"{row['ratio']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]")
    reference = summary[summary["contender"] == summary["relative_to"]].set_index(["pass", "shape", "dtype"])
    table[f"{summary['relative_to'].iloc[0]} % of bandwidth floor"] = (100 * reference["bandwidth_fraction"]).round(1)
    return table
