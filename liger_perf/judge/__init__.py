"""The judge: accepted, rejected or inconclusive, from one trial's side-by-side measurements and the guardrails.

Every number judged was measured in the trial itself, the candidate interleaved with the current best; nothing
is compared with a time from another run to accept it. (Another run's times serve one cross-check only: the
current best's medians against its own in an earlier trial on the same stack, which can make a trial
suspicious, never better: ``best_slowdown``.) The suite-level target is the geometric mean of the per-shape
ratios (candidate / current best) over every shape and dtype, or over the shapes of one bucket of the variant's
dispatch table where every change the trial made is to that bucket's entry. Its interval is the geometric mean of
the per-shape interval bounds, which holds at the trial's confidence because those intervals are simultaneous.
A trial whose correctness gate ran under the Triton interpreter is at best provisional, never accepted; a staged
trial that ran only the quick gate is never accepted either (it runs the full gate itself when its timing would
be accepted, so this holds only where the loop's judgement and the trial's own differ).

A guardrail regression (any pass's time at any shape and dtype, candidate / current best) is decided on its
interval too: rejected only when the whole interval lies above the limit (``max_regression``; for the drift
from the baseline, the interval's low end times the accepted variants' ratio above
``max_cumulative_regression``). When only the point is above, the trial is inconclusive: possibly slower,
never accepted, re-measured. A ratio without an interval (one repetition) is decided on its point, and peak
memory (deterministic, no interval) on its ratio, as a regression. So is accuracy: an output or gradient whose
error against float64 (per dtype and options, on the inputs both contenders were given) grows by more than
``max_accuracy_regression`` over the current best's is a regression; one that shrinks as much is reported.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from liger_perf.judge.guardrails import Guardrails
from liger_perf.record.history import (accuracy_ratios, accuracy_reductions, baseline_trials, geomean,
                                        geomean_interval, measured_ratios, target_ratio, warn)
from liger_perf.record.schema import NCU_DURATION, JudgedRatio, Key, TrialResult, Verdict, VerdictName
from liger_perf.core.errors import UserError
from liger_perf.core.wording import count, speedup, speedup_limit
from liger_perf.kernel.registry import baseline_path, get_spec
from liger_perf.kernel.variants import (canonical_source, changes_between, dispatch_bucket, read_dispatch, read_knobs,
                                     source_hash, target_buckets, with_knobs)


#: A contender's median CUDA-event time over the sum of its kernels' NCU durations in the same case: at least
#: the kernels' own time (less a margin for clocks and noise), at most twice it (launch gaps). Over the H200
#: trials in notebooks/nvidia-h200/fused_add_rms_norm/ (0002-0014) it lies between 0.95 and 1.54. Outside, the trial's
#: timings are not to be trusted: a timer patched at run time, or the current best slowed by the candidate.
NCU_AGREEMENT = (0.8, 2.0)
#: Where the history holds a case's ratio in at least ``NCU_HISTORY_MIN`` of its last ``NCU_HISTORY_TRIALS``
#: complete, fully profiled trials, the upper bound is this factor times their median (and never above
#: NCU_AGREEMENT's): over the H200 history since the timing code's last change (fused_add_rms_norm 0015-0028,
#: relu_squared 0000-0005) a case's ratios lie within ±12 % of their median, which is 1.01-1.55 by case.
NCU_HISTORY_MARGIN = 1.3
NCU_HISTORY_MIN, NCU_HISTORY_TRIALS = 3, 20
#: The current best's medians here over its medians in the last trial that timed it on the same stack (GPU,
#: driver, torch, Triton): over the H200 history a pass's geometric mean lies within 0.976-1.024 and no case
#: beyond 1.083 (the timing code's own changes only ever made the times shorter). A best slower than this, when
#: nothing but the candidate beside it changed, was slowed by the candidate: (a pass's geomean, any one case).
BEST_SLOWDOWN = (1.10, 1.25)
STACK = ("gpu", "driver", "torch", "triton")


INTERPRETER_ONLY = ("provisional, never accepted: its correctness gate ran under the Triton interpreter, which runs "
                    "programs one at a time (no race shows) and rounds bfloat16 as no GPU does; a GPU trial decides")


#: A sum over rows (dW) summed in another order moves its float32 error by about ±12 %: the best against the
#: baseline on the H200, 0.888-0.946 (reports/evidence/2026-12-01-accuracy/0000-best-vs-baseline.ipynb), 1.06-1.13 the other way
#: round. Its guard allows this much at least: it is there for a rounding more (a half-precision accumulator
#: moves the error tenfold), not for the order of a sum.
SUM_ORDER_SLACK = 0.25


NO_FULL_GATE = ("never accepted without the full correctness gate, which this trial did not run (its own provisional "
                "judgement differed): re-measure")


def ncu_ratios(result: TrialResult) -> dict[tuple[str, Key], tuple[float, float, float]]:
    """(contender, case) -> (CUDA-event median ms, NCU kernels ms, their ratio), where both were measured."""
    found = {}
    for contender in ("candidate", "against"):
        kernels: dict[Key, float] = {}
        for launch in result.launches(contender=contender):
            duration = launch.metrics.get(NCU_DURATION)
            if duration is not None:
                kernels[launch.key] = kernels.get(launch.key, 0.0) + duration / 1e6  # ns -> ms
        for row in result.timing_rows(contender):
            if row.key in kernels and row.median_ms is not None and kernels[row.key] > 0:
                found[(contender, row.key)] = (row.median_ms, kernels[row.key], row.median_ms / kernels[row.key])
    return found


def ncu_bounds(history: list[TrialResult]) -> dict[Key, float]:
    """The upper bound of each case's events/NCU ratio that the history supports (``NCU_HISTORY_MARGIN``)."""
    recent = [t for t in history if t.status == "complete" and t.ncu is not None and t.ncu.scope == "full"
              and t.timing is not None][-NCU_HISTORY_TRIALS:]
    seen: dict[Key, list[float]] = {}
    for trial in recent:
        for (_, key), (_, _, ratio) in ncu_ratios(trial).items():
            seen.setdefault(key, []).append(ratio)
    return {key: min(NCU_AGREEMENT[1], sorted(ratios)[len(ratios) // 2] * NCU_HISTORY_MARGIN)
            for key, ratios in seen.items() if len(ratios) >= NCU_HISTORY_MIN}


def _stack(trial: TrialResult) -> tuple:
    fingerprint = trial.fingerprint.model_dump() if trial.fingerprint is not None else {}
    return tuple(fingerprint.get(k) for k in STACK)


def best_slowdown(result: TrialResult, history: list[TrialResult]) -> list[str]:
    """Why the current best ran slower in this trial than in the last one that timed it on the same stack
    (``BEST_SLOWDOWN``: a pass's geomean, or one case where the candidate's time did not rise with the best's);
    empty when it did not, or when nothing on this stack timed it before."""
    if not result.against_sha or result.fingerprint is None or _stack(result)[0] is None:
        return []
    now = {r.key: r.median_ms for r in result.timing_rows("against") if r.median_ms}
    ratios = {r.key: r.ratio for r in result.candidate_ratios()}
    for earlier in reversed([t for t in history if t.trial_id != result.trial_id]):
        if earlier.status != "complete" or earlier.timing is None or _stack(earlier) != _stack(result):
            continue
        contender = ("candidate" if earlier.variant_sha == result.against_sha else
                     "against" if earlier.against_sha == result.against_sha else None)
        if contender is None:
            continue
        before = {r.key: r.median_ms for r in earlier.timing_rows(contender) if r.median_ms}
        if not before.keys() & now.keys():  # timed on another suite's shapes: nothing to compare with
            continue
        found = []
        for pass_name in sorted({k[0] for k in now}):
            slower = {k: now[k] / before[k] for k in now if k[0] == pass_name and k in before}
            if not slower:
                continue
            geo = geomean(list(slower.values()))
            # One case alone: only where the candidate's time did not rise with the best's (its time now over the
            # best's then, ratio x slowdown, within the bound), the one way a slower best flatters it. Where the
            # candidate ran about as slow, the run slowed both (0041 on the H200, full pass: 2.49x at 1024x896
            # float16, a 25 us call bound by the host, the candidate 1.08x the best's time there: 2.68; 1.59x at
            # 8192x2304 bfloat16, the candidate 0.97x: 1.54; at both it ran the best's own code).
            alone = [k for k in slower if slower[k] > BEST_SLOWDOWN[1]
                     and (ratios.get(k) is None or ratios[k] * slower[k] <= BEST_SLOWDOWN[1])]
            if geo > BEST_SLOWDOWN[0] or alone:
                worst = max(alone or slower, key=slower.get)
                found.append(f"the current best's {pass_name} ran {geo:.2f}x its times in trial "
                             f"{earlier.trial_id:04d} on this stack ({worst[1]} {worst[2]}: {slower[worst]:.2f}x): "
                             "the candidate beside it may have changed how it runs")
        return found
    return []


#: A variant module is a few tens of kB; a recorded path to anything larger (or to a FIFO) is not read.
_MAX_SOURCE_BYTES = 1 << 20


def _best_source(result: TrialResult, history: list[TrialResult]) -> str:
    """The current best's source, whichever record holds it: the trial, the history (the trial that ran it), or
    the module the trial ran against, read back; each only where its sha256 is the one recorded ("" if none)."""
    against = result.against
    if against is None or not against.sha256:
        return ""
    candidates = [against.source, *(t.variant.source for t in reversed(history) if t.variant.sha256 == against.sha256)]
    if against.path:
        try:
            path = Path(against.path)
            if path.is_file() and path.stat().st_size < _MAX_SOURCE_BYTES:
                candidates.append(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            pass
    return next((source for source in candidates if source and source_hash(source) == against.sha256), "")


def made_by(source: str, base: str, changes: dict) -> bool:
    """Whether ``source`` is ``base`` with ``changes`` made to its knobs and nothing else (tables compared as
    ``canonical_source`` writes them)."""
    try:
        return _made_by_cached(source, base, tuple(sorted(changes.items())))
    except TypeError:  # a change whose value cannot be a cache key (a list): asked afresh
        return _made_by_uncached(source, base, changes)


@functools.lru_cache(maxsize=128)
def _made_by_cached(source: str, base: str, changes: tuple) -> bool:
    # The accepted chain's steps are asked again at every judgement (``drift_ratios``), each ask a few parses.
    return _made_by_uncached(source, base, dict(changes))


def _made_by_uncached(source: str, base: str, changes: dict) -> bool:
    try:
        return canonical_source(with_knobs(base, changes)) == canonical_source(source)
    except UserError:
        return False


def _dispatches_as_the_baseline(kernel: str, best_source: str, history: list[TrialResult]) -> bool:
    """Whether the best's code is the kernel's baseline but for its knob values and ``DISPATCH`` entries: only
    then is it known to look its table up by ``dispatch_bucket``'s key (a model's rewrite might not). Today's
    baseline, or one the loop's baseline trial of the history ran (a chain built before the baseline last
    changed): a complete trial of the kernel's ``baseline.py`` against nothing. A hand-run trial of another file
    is no baseline, whatever it ran against."""
    try:
        path = baseline_path(kernel)
        baselines = [path.read_text()]
    except OSError:
        return False
    baselines += [t.variant.source for t in baseline_trials(history)
                  if t.variant.source and Path(t.variant.path or "").parts[-3:] == path.parts[-3:]]
    return any(_knobs_apart(baseline, best_source) for baseline in dict.fromkeys(baselines))


@functools.lru_cache(maxsize=64)
def _knobs_apart(baseline: str, source: str) -> bool:
    """Whether ``source`` is ``baseline`` but for knob values and ``DISPATCH`` entries."""
    try:
        changes = changes_between(read_knobs(baseline)[0], read_dispatch(baseline), read_knobs(source)[0],
                                  read_dispatch(source))
    except UserError:
        return False
    return made_by(source, baseline, changes)


def same_code_cases(result: TrialResult, history: list[TrialResult] | None = None) -> set[Key]:
    """The timed cases at which the candidate ran the current best's code, for a move confined to dispatch
    buckets when the candidate's recorded source is the best's recorded source with exactly the trial's knob
    changes (checked here, not taken on the proposer's word) and the best's code is the baseline's but for its
    knobs (so its table is looked up by ``dispatch_bucket``'s key): every case outside the move's buckets, and
    every case inside them whose pass runs with the same settings under both tables by the kernel's launch
    model (``KernelSpec.effective_settings``: a backward knob leaves the forward pass as it was). There both
    contenders launched the same kernels with the same settings, so a ratio away from 1 is the run's noise or
    the candidate slowing the best's code, never the move itself. Empty for any other trial."""
    buckets = target_buckets(result.changes)
    best_source = _best_source(result, history or []) if buckets else ""
    if not best_source or not confined_buckets(result.kernel, result.variant.source, best_source, result.changes,
                                               history or []):
        return set()
    unchanged = _passes_unchanged(result.kernel, best_source, result.variant.source)
    same = set()
    for row in result.timing_rows("candidate"):
        try:
            bucket = dispatch_bucket(row.shape, row.dtype)
        except (ValueError, TypeError, AttributeError):  # a row label no bucket reads: nothing known of it
            continue
        if bucket not in buckets or unchanged(row):
            same.add(row.key)
    return same


def confined_buckets(kernel: str, source: str, best_source: str, changes: dict | None,
                     history: list[TrialResult]) -> set[str]:
    """The dispatch buckets outside which ``source`` runs ``best_source``'s code at every shape: those its
    ``changes`` name, when every change names one, ``source`` is ``best_source`` with exactly those changes
    (checked, not taken on the proposer's word) and the best looks its table up by ``dispatch_bucket``'s key (its
    code is the baseline's but for its knobs). Empty otherwise. What ``same_code_cases`` rests on, and what lets
    the loop time such a move on its buckets' shapes alone (``TrialRequest.buckets``)."""
    buckets = target_buckets(changes)
    if not buckets or not source or not best_source \
            or not _dispatches_as_the_baseline(kernel, best_source, history) \
            or not made_by(source, best_source, dict(changes or {})):
        return set()
    return set(buckets)


def _confinement_broken(result: TrialResult, history: list[TrialResult]) -> str:
    """Why a trial whose timing left cases out (``TrialResult.left_out_keys``) may not have: its candidate is
    not the best with only some buckets' entries changed (``confined_buckets``), or a case it left out lies in one
    of those buckets. "" where nothing was left out, or rightly."""
    left_out = result.left_out_keys
    if not left_out:
        return ""
    buckets = confined_buckets(result.kernel, result.variant.source, _best_source(result, history), result.changes,
                               history)
    if not buckets:
        return ("its timing left out every shape outside bucket " + ", ".join(result.timing.buckets or ["?"])
                + ", but its source is not the current best's with only that bucket's DISPATCH entries changed, so "
                "elsewhere it may not run the best's code: run it over the whole suite")
    inside = sorted({f"{shape} {dtype}" for _, shape, dtype in left_out if dispatch_bucket(shape, dtype) in buckets})
    if inside:
        return (f"its timing left out {count(len(inside), 'case')} of bucket {', '.join(sorted(buckets))}, which "
                f"its move changes ({', '.join(inside[:3])}{', ...' if len(inside) > 3 else ''}): run it again on "
                "that bucket's shapes")
    return ""


def _passes_unchanged(kernel: str, best_source: str, source: str):
    """A test of a timed row: whether the launch model says its pass runs with the same settings under both
    variants' knobs in its bucket (the ``full`` pass: every pass's). False wherever the kernel has no model or
    the model cannot answer."""
    import torch

    try:
        spec = get_spec(kernel)
        tables = [(read_knobs(text)[0], read_dispatch(text)) for text in (best_source, source)]
    except Exception:  # noqa: BLE001 - kernel code; a model that cannot load exempts nothing
        return lambda row: False

    def unchanged(row) -> bool:
        try:
            shape, dtype = tuple(int(n) for n in row.shape.split("x")), getattr(torch, row.dtype)
            bucket = dispatch_bucket(row.shape, row.dtype)
        except (ValueError, TypeError, AttributeError):  # a row label no model reads
            return False
        best, candidate = ({**knobs, **table.get(bucket, {})} for knobs, table in tables)
        return spec.runs_the_same(best, candidate, shape, dtype, row.pass_name)
    return unchanged


def drift_ratios(accepted: list[TrialResult], history: list[TrialResult]) -> dict[Key, float]:
    """The current best against the baseline for the cumulative guardrail: ``chain_ratios``, but a step's ratio
    at a case where its candidate ran its best's code (``same_code_cases``) counts as 1. There the step changed
    nothing, and its measured ratio is that run's noise: multiplied in, step after step, it drifts (0044's forward
    at 2047x5120 met a chain of 0.96x from steps that never touched that kernel)."""
    total: dict[Key, float] | None = None
    for step in accepted:
        times, memory = measured_ratios(step)
        earlier = [t for t in history if t.trial_id < step.trial_id]
        same = same_code_cases(step, earlier)
        # Asked again only where nothing was same: where something was, same_code_cases found the source.
        if not same and target_buckets(step.changes) and not _best_source(step, earlier):
            warn(f"trial {step.trial_id:04d}: no record holds the source of the best it ran against, so the "
                 "cumulative guardrail counts every ratio it measured, its noise at cases it left as they were too")
        ratios = {**{key: 1.0 for key in step.left_out_keys},  # confined timing: the best's code, never measured
                  **{key: 1.0 if key in same else ratio for key, (ratio, _, _) in times.items()}, **memory}
        total = ratios if total is None else {key: value * ratios[key] for key, value in total.items() if key in ratios}
    return total or {}


def suspicions(result: TrialResult, history: list[TrialResult] | None = None) -> list[str]:
    """Why a complete trial's measurements are not to be trusted: a timed call whose outputs were wrong, a
    contender whose CUDA-event times disagree with its kernels' NCU durations (beyond the bound the history
    supports for the case, else ``NCU_AGREEMENT``), or a current best slower than the history recorded it on
    this stack. Empty when none."""
    of_candidate, of_run = _suspicions(result, history or [])
    return of_candidate + of_run


def _suspicions(result: TrialResult, history: list[TrialResult]) -> tuple[list[str], list[str]]:
    """``suspicions``, split: those that the candidate's own measurements raise (its outputs wrong when timed, its
    events against its kernels), and those the current best's raise, which a second run may clear (the run
    slowed it, or the candidate did: a re-check tells)."""
    of_candidate, of_run = [], []
    for c in (result.timing.spot_checks if result.timing else []):
        if not c.passed:
            (of_candidate if c.contender == "candidate" else of_run).append(
                f"spot check of a timed call: {c.contender} {c.pass_name} {c.shape} {c.dtype}: {c.reason}")
    # A light profile (a staged trial not accepted as measured) does not profile the best: nothing to hold to.
    if result.ncu is not None and result.ncu.scope == "full" and result.ncu.against_durations not in (None, "ok"):
        of_run.append(f"the current best's kernel durations could not be profiled ({result.ncu.against_durations}):"
                      " its times are held to nothing")
    bounds = ncu_bounds(history)
    for (contender, key), (events, kernels, ratio) in ncu_ratios(result).items():
        upper = bounds.get(key, NCU_AGREEMENT[1])
        if not NCU_AGREEMENT[0] <= ratio <= upper:
            (of_candidate if contender == "candidate" else of_run).append(
                f"{contender} {key[0]} {key[1]} {key[2]}: CUDA events {events:.4g} ms, NCU kernels "
                f"{kernels:.4g} ms (ratio {ratio:.2f}, outside {NCU_AGREEMENT[0]}-{upper:.2f}"
                + (", the bound the history supports for this case)" if key in bounds else ")"))
    return of_candidate, of_run + best_slowdown(result, history)


def recheck_owed(trial: TrialResult, trials: list[TrialResult]) -> bool:
    """Whether ``trial`` was rejected only on suspicions of the current best's measurements (``Verdict.recheck``)
    and no earlier trial of the same source was found suspicious: then nothing was learnt of its variant, and
    the loop runs it once more. A second suspicious run of it stands, and rules its move out."""
    if trial.verdict != "rejected" or not trial.judged.recheck:
        return False
    return not any(t.variant_sha == trial.variant_sha and t.judged is not None and t.judged.suspicious
                   for t in trials if t.trial_id < trial.trial_id)


@dataclass
class Judgement:
    verdict: VerdictName
    reasons: list[str]
    target_ratio: float = math.nan  # geomean candidate / current best on the target (< 1 is better)
    target_interval: tuple[float, float] = (math.nan, math.nan)
    ratios: dict[Key, float] = field(default_factory=dict)  # every judged metric, candidate / current best
    suspicious: list[str] = field(default_factory=list)
    recheck: bool = False  # suspicious of the current best's measurements only (``recheck_owed``)
    #: The target's geomean over the whole suite, where ``target_ratio`` is one dispatch bucket's (else NaN).
    suite_ratio: float = math.nan

    @property
    def gain(self) -> float:
        return 1 - self.target_ratio if math.isfinite(self.target_ratio) else 0.0

    def record(self, target: str, proposer: str) -> Verdict:
        """The verdict as the trial's notebook records it."""
        suite_gain = 1 - self.suite_ratio if math.isfinite(self.suite_ratio) else None
        return Verdict(verdict=self.verdict, reasons=self.reasons, target=target, proposer=proposer,
                       target_ratio=_finite(self.target_ratio),
                       target_interval=[_finite(x) for x in self.target_interval], gain=self.gain,
                       suite_gain=suite_gain,
                       ratios=[JudgedRatio(pass_name=k[0], shape=k[1], dtype=k[2], ratio=v)
                               for k, v in self.ratios.items()], suspicious=self.suspicious,
                       recheck=self.recheck)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None  # JSON has no NaN


def _pct(ratio: float) -> str:
    return f"{abs(ratio - 1) * 100:.1f}%"


def judge(result: TrialResult, guardrails: Guardrails, best_vs_baseline: dict[Key, float] | None = None,
          history: list[TrialResult] | None = None) -> Judgement:
    """The verdict on one complete trial against its current best. ``best_vs_baseline``: the accepted chain's
    ratios (the cumulative guardrail); ``history``: the earlier trials of this device, which the measurements
    are cross-checked with (``suspicions``). Where the target is one dispatch bucket's, the judgement also
    carries the target's geomean over the whole suite (``suite_ratio``), which rounds and chains compare."""
    judgement = _judge(result, guardrails, best_vs_baseline, history)
    if target_buckets(result.changes) and result.status == "complete" and result.timing is not None:
        judgement.suite_ratio = target_ratio(result, guardrails.target)
    return judgement


def _judge(result: TrialResult, guardrails: Guardrails, best_vs_baseline: dict[Key, float] | None,
           history: list[TrialResult] | None) -> Judgement:
    best_vs_baseline = best_vs_baseline or {}
    status = result.status
    if status != "complete":
        what = {"failed-correctness": "failed the correctness gate", "invalid-variant": "is not a valid variant",
                "crashed": "crashed or timed out"}.get(status, f"ended as {status}")
        return Judgement("rejected", [f"the variant {what}: {result.reason}".strip()])
    if not result.against:
        raise ValueError("a trial without --against has no current best to be judged against")
    if result.against_sha == result.variant_sha:
        return Judgement("rejected", ["the variant is identical to the current best"])

    broken = _confinement_broken(result, history or [])
    if broken:
        return Judgement("rejected", [f"unjudgeable: {broken}"])
    of_candidate, of_run = _suspicions(result, history or [])
    suspicious = of_candidate + of_run
    if suspicious:
        return Judgement("rejected", [f"suspicious measurements, never accepted: {suspicious[0]}"
                                      + (f" (and {len(suspicious) - 1} more)" if len(suspicious) > 1 else "")],
                         suspicious=suspicious, recheck=not of_candidate)
    times, memory = measured_ratios(result)
    reasons, remeasure = [], []  # regressions (rejected); possible regressions (never accepted, re-measured)
    same_code, noise = same_code_cases(result, history), []  # possible regressions where both ran the best's code
    buckets = target_buckets(result.changes)
    targeted = {row.key for row in result.candidate_ratios(guardrails.target)
                if dispatch_bucket(row.shape, row.dtype) in buckets}
    if targeted and targeted <= same_code:
        # Whatever its timing says, the move launches the best's kernels at every case it is judged on (a knob the
        # bucket's paths never read): a measured gain there is the run's noise (the rules proposer never makes
        # such a move; another proposer may).
        return Judgement("rejected", [f"the move changes nothing {guardrails.target} runs in bucket "
                                      f"{', '.join(sorted(buckets))} by the kernel's launch model: "
                                      f"its {count(len(targeted), 'case')} there ran the current best's code"])
    limit, cumulative = 1 + guardrails.max_regression, 1 + guardrails.max_cumulative_regression
    for key, (ratio, low, high) in times.items():
        label = f"{key[0]} {key[1]} {key[2]}"
        measured = speedup(ratio, low, high)
        # A shape the chain has no product for (some accepted step timed another suite): only the step's limit.
        chain = best_vs_baseline.get(key, 1.0)
        step_limit = f"{speedup_limit(guardrails.max_regression)} the guardrails allow (max_regression " \
                     f"{guardrails.max_regression:.0%})"
        chain_limit = f"{speedup_limit(guardrails.max_cumulative_regression)} the guardrails allow " \
                      f"(max_cumulative_regression {guardrails.max_cumulative_regression:.0%})"
        through = (f"{speedup(ratio * chain, low * chain, high * chain)} over the baseline through the accepted "
                   f"variants (this trial's {measured} times the accepted variants' {speedup(chain)})")
        # A regression is decided on the interval's better end: slower for certain only when the whole interval
        # lies above the limit. Without an interval (fewer than two repetitions) the point decides, as it must.
        sure = low if math.isfinite(low) else ratio
        if sure > limit:
            reasons.append(f"{label}: {measured} over the current best, "
                           f"{'wholly ' if math.isfinite(low) else ''}below the {step_limit}")
        elif sure * chain > cumulative:
            reasons.append(f"{label}: {through}, {'wholly ' if math.isfinite(low) else ''}below the {chain_limit}")
        elif key in same_code and (ratio > limit or ratio * chain > cumulative):
            # Only the point is beyond the limit, at a case where the candidate ran the best's code: a re-measure
            # would measure the same two kernels again (0040 and 0041 on the H200: a move in bucket 16384x4
            # held up twice by the full pass at 1024x896, [0.32x, 2.59x] and [0.29x, 2.73x]). A regression there
            # for certain (above) still rejects: the candidate beside it slowed the best's code.
            noise.append(f"{label} {measured}")
        elif ratio > limit:
            remeasure.append(f"{label}: possibly slower than allowed: {measured} over the current best, an "
                             f"interval that contains the {step_limit}: re-measure")
        elif ratio * chain > cumulative:
            remeasure.append(f"{label}: possibly slower than allowed: {through}, an interval that contains the "
                             f"{chain_limit}: re-measure")
    for key, ratio in memory.items():
        label = f"peak memory {key[1]} {key[2]}"
        if ratio > limit:
            reasons.append(f"{label}: {_pct(ratio)} more than the current best (ratio {ratio:.3f}; at most "
                           f"{guardrails.max_regression:.0%} allowed)")
        elif ratio * best_vs_baseline.get(key, 1.0) > cumulative:
            reasons.append(f"{label}: {_pct(ratio * best_vs_baseline.get(key, 1.0))} more than the baseline "
                           f"through the accepted variants")

    better = []  # accuracy gained, reported beside the target
    reductions = accuracy_reductions(result)
    for key, (mine, best, ratio) in accuracy_ratios(result).items():
        dtype, config, output = key
        label = f"accuracy of {output} {dtype}" + (f" [{config}]" if config else "")
        allowed = guardrails.max_accuracy_regression
        if key in reductions:
            allowed = max(allowed, SUM_ORDER_SLACK)
        if math.isinf(ratio):
            reasons.append(f"{label}: results that are not finite where the float64 reference and the current "
                           "best's are")
        elif ratio > 1 + allowed:
            reasons.append(f"{label}: error against float64 {ratio:.2f}x the current best's ({mine:.3g} vs "
                           f"{best:.3g}; at most {allowed:.0%} more allowed)")
        elif ratio < 1 / (1 + allowed):
            better.append(f"{label}: error against float64 {ratio:.2f}x the current best's ({mine:.3g} vs {best:.3g})")

    ratios = {**{k: v[0] for k, v in times.items()}, **memory}
    # A move of one dispatch bucket is judged on the shapes of that bucket (elsewhere it runs the same code, and
    # its ratios of 1 would only dilute the target); the guardrails above still hold at every shape.
    buckets = target_buckets(result.changes)
    over = f"bucket {', '.join(sorted(buckets))} of the suite" if buckets else "the suite"

    def in_buckets(key) -> bool:
        return not buckets or dispatch_bucket(key[1], key[2]) in buckets

    if guardrails.target == "memory":
        values = [v for k, v in memory.items() if in_buckets(k)]
        point = geomean(values)
        low = high = point
        improved, worse = point < 1 - 1e-9, point >= 1 - 1e-9
    else:
        rows = [v for k, v in times.items() if k[0] == guardrails.target and in_buckets(k)]
        if not rows:
            where = f" in {over}" if buckets else ""
            return Judgement("rejected", [f"the trial has no {guardrails.target} timings{where} to judge"],
                             ratios=ratios)
        point, low, high = geomean_interval(rows)
        improved, worse = high < 1, low >= 1
    if not math.isfinite(point):
        return Judgement("rejected", [f"no {guardrails.target} measurement to judge"], ratios=ratios)
    if guardrails.target == "memory":
        target = f"memory: peak memory {point:.3f} of the current best's (geomean over {over})"
    else:
        target = f"{guardrails.target}: {speedup(point, low, high)} over the current best (geomean over {over})"
    if noise:
        target += (f"; {count(len(noise), 'case')} where the candidate ran the current best's code (outside "
                   f"{over.removesuffix(' of the suite')}, or a pass the move leaves as it was) only possibly slower, "
                   "the run's noise, not re-measured: "
                   + ", ".join(noise[:3]) + (", ..." if len(noise) > 3 else ""))
    if reasons:
        return Judgement("rejected", [*reasons, *remeasure, target], point, (low, high), ratios)
    interpreted = result.device == "interpret" or bool(result.correctness and result.correctness.interpreted)
    if worse:
        return Judgement("rejected", [f"{target}: not better than the current best", *remeasure], point,
                         (low, high), ratios)
    if remeasure:
        return Judgement("inconclusive", [*remeasure, f"{target}; a possible regression is never accepted"],
                         point, (low, high), ratios)
    if improved and result.correctness is not None and result.correctness.stage != "full":
        return Judgement("inconclusive", [target, NO_FULL_GATE], point, (low, high), ratios)
    if improved and interpreted:
        return Judgement("provisional", [target, INTERPRETER_ONLY], point, (low, high), ratios)
    if improved:
        return Judgement("accepted", [target, *better], point, (low, high), ratios)
    return Judgement("inconclusive", [f"{target}: the interval straddles 1, noise is larger than the effect; "
                                      "re-measure, never accept"], point, (low, high), ratios)
