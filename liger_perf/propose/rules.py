"""The rules proposer: diagnose the current best from its NCU metrics, turn the knob the diagnosis points to.

Diagnoses are read from the dominant kernel (the longest) of the target pass at each shape and dtype of the
best trial: register spills (local-memory traffic), occupancy limited by registers, achieved occupancy far
under theoretical, fewer than one wave of blocks, memory latency (long-scoreboard stalls while DRAM is far
from its peak) and shared-memory stalls (short-scoreboard and MIO-throttle stalls above the waits on memory);
and from all of the pass's launches: extra launches (kernels beside the dominant one that take a large share of
the pass's time). Which knob changes answer which diagnosis is kernel knowledge, declared by the spec
(``KernelSpec.remedies``); this module only ranks, filters and writes them.

When the spec's remedies are used up (or a spec declares none), it searches the variant's ``KNOB_CHOICES``:
one knob changed at a time from the current best, to a value the knob lists, in an order the diagnoses set
(``_knob_moves``; the keyword tables ``PASS_PREFIXES``, ``KNOB_KINDS`` and ``DIAGNOSIS_PREFERENCES``). Only
when every such move is in the history too does it stop.

Before it proposes anything it asks the spec's launch model (``resources``) whether every launch of the
variant fits the device the best ran on, at every suite and gate shape: a configuration that cannot launch
(shared memory, threads, tile size) is skipped, never spent a trial on.

A screening batch (candidates asked for one after another, the earlier ones pending) spreads over the problems:
while another problem (a diagnosis, or a bucket where a peer is ahead) has a remedy left, it holds at most
``BATCH_PER_DIAGNOSIS`` remedies of one problem (a dispatch bucket in one pass; without a table, a diagnosis).

When the best carries a dispatch table and the baseline trial timed peers (liger-kernel, torch.compile), the
buckets where a peer is faster than the current best by more than ``PEER_LEAD_MARGIN`` come first, the furthest
behind first (``peer_leads``: the best's time there over the peer's, from the baseline trial's side-by-side times
and the accepted steps' ratios since; with a full target, in the full pass); the rest by the diagnoses' severity.
A bucket to tune gets the spec's remedies for no diagnosis in particular (``"explore"``) in that bucket, after its
diagnoses' remedies and before the walk (most such buckets have no diagnosis: their profiled case trips no rule):
the buckets ``--buckets`` names, and without it those where a peer is ahead, ranked by the lead among the
diagnosed buckets' remedies. Within the bucket the history ranks that list by each move's latest result in every
bucket it was measured in (``_moves_measured``): faster in this very bucket against an earlier best first, then
by the other buckets it was faster in less those it was slower in, slower in this very bucket last. A move the
history found faster beyond its interval in some bucket (``carried_moves``) joins that list in every explored
bucket where each of its changes would be written, its knobs of the pass being tuned.

A variant that carries a dispatch table (``DISPATCH``) is tuned one bucket at a time: each bucket's worst case
is diagnosed on its own, a remedy for a diagnosis goes into the bucket of the shape it was read at, and the walk
over ``KNOB_CHOICES`` moves each bucket's knobs in turn (the bucket furthest from the copy-bandwidth floor
first) before the defaults. Such a trial is judged on its bucket's shapes (``liger_perf.judge``).

It never proposes a variant the history already holds, nor settings a trial or a screening measured (in one
bucket: the settings that bucket runs, whatever the others run now), and it learns from rejections: a knob moved
in one direction from a given value by a trial that did not improve the target is not moved that way from that
value again (a trial that improved the target but broke a guardrail elsewhere rules nothing out).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

from liger_perf.propose import Context, Proposal, Stop, tried_sources
from liger_perf.judge import drift_ratios, recheck_owed
from liger_perf.propose.resources import footprints, launch_problem, limits_for, spilling_shapes
from liger_perf.record.history import accepted_chain, best_as_profiled, best_timing_rows, geomean
from liger_perf.record.schema import NCU_DURATION, TUNING_SUITES, NcuLaunch, TrialResult
from liger_perf.kernel.spec import Remedy
from liger_perf.kernel.variants import (apply_changes, bucket_columns, bucket_order, carries_dispatch,
                                       changes_between, dispatch_bucket, knobs_in, qualified, read_dispatch,
                                       read_knobs, recorded_dispatch, source_hash, split_qualified, target_buckets,
                                       with_knobs)


@dataclass
class Diagnosis:
    name: str
    severity: float
    evidence: str
    shape: str = ""  # the case it was read at (a shape label and a dtype name): its dispatch bucket
    dtype: str = ""


def _numel(shape: str) -> int:
    n = 1
    for part in shape.split("x"):
        n *= int(part)
    return n


#: The peers the kernels are to beat (eager is always slower, and not a target).
TARGET_PEERS = ("liger-kernel", "torch.compile")
#: A peer leads a bucket when the best takes this many times its time there: below it, side-by-side noise
#: (baseline trial 0035 on the H200: liger-kernel's per-case backward intervals are +-1.2 % at the median).
PEER_LEAD_MARGIN = 1.02

#: How many of a screening batch's candidates may answer one problem: a bucket, or a diagnosis (``propose``).
BATCH_PER_DIAGNOSIS = 2

#: DRAM throughput (NCU's percentage of the peak) under which a kernel whose warps wait on memory most is latency-bound,
#: not bandwidth-bound: 85 % of the copy floor, the targets' mark, where a copy runs at 88 % of the peak (on the H200,
#: 4241 GB/s measured in 0085's bench, reports/evidence/2026-12-04-bench-models-best-0085/, of a 4.8 TB/s peak).
#: At 60 % (until 2026-12-05) a bucket at 60-75 % tripped no rule, so its screenings drew on the exploration list,
#: which holds no pipelining (0087's 12289x896 float32: DRAM at 66 %, long-scoreboard stalls first; its screening was
#: to be tile sizes and rows per program).
MEMORY_LATENCY_DRAM_PCT = 75

#: Launches beside a pass's longest kernel (a separate reduction, a cast) that take this share of its kernel
#: time are a diagnosis of their own: fusing them away is worth more than tuning the main kernel.
EXTRA_LAUNCH_SHARE = 0.15


def diagnose(trial: TrialResult, pass_name: str, per_bucket: bool = False) -> list[Diagnosis]:
    """What the NCU metrics of ``trial`` say about ``pass_name``, most severe first (empty without NCU): each
    diagnosis at its most severe case, or with ``per_bucket`` at the most severe case of each dispatch bucket
    (a variant with a dispatch table is remedied bucket by bucket, and every bucket's worst case counts)."""
    dominant: dict[tuple[str, str], NcuLaunch] = {}
    for launch in trial.launches(pass_name):
        key = (launch.shape, launch.dtype)
        time = launch.metric(NCU_DURATION)
        if key not in dominant or time > dominant[key].metric(NCU_DURATION):
            dominant[key] = launch
    found: dict[tuple[str, str], Diagnosis] = {}

    def note(name: str, severity: float, evidence: str) -> None:  # read at the loop's case (shape, dtype) below
        key = (name, dispatch_bucket(shape, dtype) if per_bucket else "")
        if severity > 0 and (key not in found or severity > found[key].severity):
            found[key] = Diagnosis(name, severity, evidence, shape, dtype)

    launch_time: dict[tuple[str, str], float] = {}
    for launch in trial.launches(pass_name):
        key = (launch.shape, launch.dtype)
        launch_time[key] = launch_time.get(key, 0.0) + (launch.metric(NCU_DURATION) or 0.0)
    for (shape, dtype), launch in sorted(dominant.items(), key=lambda kv: _numel(kv[0][0])):
        total = launch_time.get((shape, dtype), 0.0)
        others = total - (launch.metric(NCU_DURATION) or 0.0)
        if total > 0 and others / total >= EXTRA_LAUNCH_SHARE:
            extra = sorted({x.kernel for x in trial.launches(pass_name) if (x.shape, x.dtype) == (shape, dtype)}
                           - {launch.kernel})
            note("extra_launches", others / total, f"{pass_name} {shape} {dtype}: {', '.join(extra)} beside "
                 f"{launch.kernel} take {others / total:.0%} of the pass's kernel time ({others / 1e3:.1f} of "
                 f"{total / 1e3:.1f} us)")

        m = {k: v for k, v in launch.metrics.items() if v is not None}  # an unreadable counter says nothing
        where = f"{pass_name} {shape} {dtype}, kernel {launch.kernel}"
        local = m.get("l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum", 0) + m.get(
            "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum", 0)
        dram = m.get("dram__bytes_read.sum", 0) + m.get("dram__bytes_write.sum", 0)
        regs = m.get("launch__registers_per_thread")
        if local > 0:
            note("spills", 1 + local / max(dram, 1), f"{where}: {regs:.0f} registers per thread and "
                 f"{local / 1e6:.0f} MB of local-memory traffic (register spills) beside {dram / 1e6:.0f} MB of DRAM")
        theoretical = m.get("sm__maximum_warps_per_active_cycle_pct")
        achieved = m.get("sm__warps_active.avg.pct_of_peak_sustained_active")
        by_regs, by_warps = m.get("launch__occupancy_limit_registers"), m.get("launch__occupancy_limit_warps")
        waves = m.get("launch__waves_per_multiprocessor")
        # Under one wave every block is resident at once (a grid of one program per SM): a higher register limit
        # would find no block to add, so the limit is not what keeps warps away.
        if theoretical is not None and by_regs is not None and by_warps is not None \
                and (waves is None or waves > 1):
            if by_regs < by_warps and theoretical < 50:
                note("register_limited_occupancy", (50 - theoretical) / 50,
                     f"{where}: theoretical occupancy {theoretical:.0f}%, limited by registers ({regs:.0f}/thread)")
        if theoretical and achieved is not None and achieved < 0.6 * theoretical:
            note("low_achieved_occupancy", 1 - achieved / theoretical,
                 f"{where}: achieved occupancy {achieved:.0f}% of a theoretical {theoretical:.0f}%")
        if waves is not None and waves < 1:
            note("under_one_wave", 1 - waves, f"{where}: {waves:.2f} waves of blocks ("
                 f"{m.get('launch__grid_size', 0):.0f} blocks): part of the GPU idles")
        stalls = launch.stalls()
        dram_pct = m.get("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")
        if stalls and dram_pct is not None and dram_pct < MEMORY_LATENCY_DRAM_PCT:
            top = max(stalls, key=stalls.get)
            if top == "long_scoreboard":
                note("memory_latency", (MEMORY_LATENCY_DRAM_PCT - dram_pct) / MEMORY_LATENCY_DRAM_PCT,
                     f"{where}: DRAM at {dram_pct:.0f}% of peak and "
                     f"long-scoreboard stalls dominate ({stalls[top]:.1f} cycles per issued instruction)")
            # Short-scoreboard and MIO-throttle stalls wait on the shared-memory pipe (a reduction or a layout
            # change across warps); more of them than waits on DRAM: the kernel is bound by that, not by memory.
            shared = stalls.get("short_scoreboard", 0.0) + stalls.get("mio_throttle", 0.0)
            if shared > stalls.get("long_scoreboard", 0.0):
                note("shared_memory_stalls", shared / sum(stalls.values()), f"{where}: short-scoreboard and "
                     f"MIO-throttle stalls (the shared-memory pipe) take {shared:.1f} cycles per issued instruction, "
                     f"waits on memory {stalls.get('long_scoreboard', 0.0):.1f}, with DRAM at {dram_pct:.0f}% of "
                     f"peak and {m.get('launch__shared_mem_per_block_dynamic', 0):.0f} bytes of shared memory per "
                     "block")
    return sorted(found.values(), key=lambda d: -d.severity)


def _direction(choices: list, old, new):
    """+1 / -1 along an ordered knob, or the new value itself for a categorical one."""
    numeric = [c for c in choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
    if isinstance(old, (int, float)) and isinstance(new, (int, float)) and not isinstance(new, bool) \
            and old in numeric and new in numeric:
        return 1 if new > old else -1
    return repr(new)


# -- searching KNOB_CHOICES when the spec's remedies are used up -----------------------------------------------
# Knob names say which pass and which kind of work they size; these tables read that from the name alone
# (case-insensitive), so a new kernel needs no entry here, only the usual naming.

#: A knob whose name starts with one of these belongs to that pass alone; any other knob is shared by both.
PASS_PREFIXES = {"forward": ("fwd_", "forward_"), "backward": ("bwd_", "backward_")}

#: Keyword in a knob's name (its pass prefix dropped) -> the kind of knob; the first keyword found decides.
KNOB_KINDS = (
    ("warps", "warps"),  # warps per program
    ("stages", "stages"),  # software-pipelining depth
    ("rows", "rows"),  # rows per program
    ("block", "block"),  # elements or columns a program holds at once
    ("tile", "block"),
    ("chunk", "block"),
)

#: Diagnosis -> the kinds of knob it points to, most telling first, each with the direction the diagnosis
#: suggests (+1 larger, -1 smaller, 0 either way). Kinds a diagnosis does not name come after the named ones.
DIAGNOSIS_PREFERENCES = {
    # Too much live state per thread: spread a tile over more threads, hold less of it, pipeline less.
    "spills": (("warps", +1), ("block", -1), ("stages", -1), ("rows", -1)),
    # Registers cap the warps an SM holds: change the warps per program, hold less, pipeline less.
    "register_limited_occupancy": (("warps", 0), ("block", -1), ("stages", -1), ("rows", -1)),
    # Too few programs for the SMs: smaller blocks and fewer rows per program make more of them; more warps
    # fill the SMs that do get one.
    "under_one_wave": (("block", -1), ("rows", -1), ("warps", +1)),
    # The SMs hold fewer warps than they could: more, shorter programs; smaller blocks; other warp counts.
    "low_achieved_occupancy": (("rows", -1), ("block", -1), ("warps", 0)),
    # Loads wait on DRAM while it idles: deeper pipelining and larger tiles keep more loads in flight.
    "memory_latency": (("stages", +1), ("block", +1), ("rows", +1), ("warps", +1)),
    # Waits on shared memory: fewer warps keep a row's sums inside fewer warps, a larger tile pays one cross-warp
    # sum for more elements.
    "shared_memory_stalls": (("warps", -1), ("block", +1)),
    # Another kernel beside the main one: more rows per program leave fewer partials for it to reduce.
    "extra_launches": (("rows", +1),),
}

_DIRECTION_WORDS = {1: "larger", -1: "smaller", 0: "either way"}


def knob_pass(knob: str) -> str | None:
    """The pass a knob belongs to by its name's prefix (``bwd_``, ``fwd_``), or None for a shared knob."""
    lowered = knob.lower()
    return next((p for p, prefixes in PASS_PREFIXES.items() if lowered.startswith(prefixes)), None)


def knob_kind(knob: str) -> str | None:
    """The kind of a knob (``warps``, ``stages``, ``rows``, ``block``) by a keyword in its name, or None."""
    lowered = knob.lower()
    for prefix in PASS_PREFIXES.get(knob_pass(knob), ()):
        lowered = lowered.removeprefix(prefix)
    return next((kind for keyword, kind in KNOB_KINDS if keyword in lowered), None)


@dataclass
class KnobMove:
    """One knob changed from the current best to another value it lists, with why it comes where it does."""

    knob: str
    old: object
    new: object
    pass_name: str | None
    diagnosis: Diagnosis | None
    reason: str


def _knob_moves(knobs: dict, choices: dict, target: str, plans: list[tuple[str | None, Diagnosis | None]],
                anchors: dict | None = None):
    """Every single-knob move the choices allow, once each, in the order of ``plans``: for each (pass, diagnosis)
    in turn (the most severe first; a diagnosis of None is the plain walk), the moves sorted by

    1. the knob's pass: the diagnosed pass's own knobs (``bwd_*`` for the backward), then shared knobs, then
       the other pass's;
    2. the diagnosis's direction for the knob's kind: a move the way it suggests, then a move it has no view on
       (a kind it does not name, or a value such as "auto" that is no step along the list), then the other way;
    3. how near the new value is to the current one in the knob's list of choices;
    4. the kind's place in the diagnosis's preferences, then the knob's place in ``KNOBS``.

    ``anchors``: knob -> a listed value that runs what its current value runs (``"auto"`` warps that come to 16 at
    every case of a bucket): the direction and the nearness of a move are read from there. Without it a move from
    ``"auto"`` is near the list's head (one warp first, at rows of 8192 elements).

    A knob that belongs to a pass the target does not time (``bwd_*`` for ``forward``) is never moved."""
    timed = {"forward": {"forward"}, "backward": {"backward"}}.get(target, {"forward", "backward"})
    movable = [k for k in knobs if k in choices and (knob_pass(k) is None or knob_pass(k) in timed)]
    seen = set()
    for pass_name, diagnosis in plans:
        preferences = dict(DIAGNOSIS_PREFERENCES.get(diagnosis.name, ())) if diagnosis else {}
        kinds = list(preferences)
        ranked = []
        for order, knob in enumerate(movable):
            old, listed = knobs[knob], list(choices[knob])
            owner, kind = knob_pass(knob), knob_kind(knob)
            pass_rank = 0 if owner == pass_name else 1 if owner is None else 2
            wanted = preferences.get(kind)
            anchor = (anchors or {}).get(knob, old)
            for index, new in enumerate(listed):
                if new == old:
                    continue
                distance = abs(index - listed.index(anchor)) if anchor in listed else index + 1
                step = _direction(listed, anchor, new)
                if diagnosis is None:
                    tier, view = 0, "no diagnosis to order by: nearest values first"
                elif wanted is None:
                    tier, view = 1, f"{diagnosis.name} points to no knob of this kind: after the kinds it names"
                elif not isinstance(step, int):
                    tier, view = 1, (f"{diagnosis.name} points to {kind} {_DIRECTION_WORDS[wanted]}, but "
                                     f"{old!r} -> {new!r} is no step along the list: after the moves it points to")
                elif wanted == 0 or step == wanted:
                    tier, view = 0, f"{diagnosis.name} points to {kind} {_DIRECTION_WORDS[wanted]}"
                else:
                    tier, view = 2, (f"{diagnosis.name} points to {kind} {_DIRECTION_WORDS[wanted]}: "
                                     "this opposite move comes late")
                where = (f"a {owner} knob" if owner else "a knob shared by both passes") + (
                    f", {pass_name} diagnosed" if diagnosis else "")
                rank = kinds.index(kind) if kind in kinds else len(kinds)
                ranked.append(((pass_rank, tier, distance, rank, order), KnobMove(
                    knob, old, new, pass_name, diagnosis, f"{where}; {view}")))
        for _, move in sorted(ranked, key=lambda item: item[0]):
            if (move.knob, repr(move.new)) not in seen:
                seen.add((move.knob, repr(move.new)))
                yield move


class RulesProposer:
    name = "rules"

    def propose(self, context: Context) -> Proposal | Stop:
        spec, best = context.spec, context.best
        knobs, choices = read_knobs(context.best_source)
        dispatch = read_dispatch(context.best_source)
        buckets, cases = (_buckets_to_tune(best_timing_rows(best, context.trials), context.target)
                          if carries_dispatch(context.best_source) else ([], {}))
        if context.buckets:
            # Told which buckets to tune: their diagnoses and moves only, never a default (it moves every bucket).
            if not carries_dispatch(context.best_source):
                return Stop(f"only buckets {', '.join(context.buckets)} may change, but the best has no DISPATCH "
                            "table to change them in")
            buckets = [b for b in buckets if b in context.buckets]
            if not buckets:
                return Stop(f"none of buckets {', '.join(context.buckets)} holds a shape the best's trial timed "
                            f"(it timed {', '.join(sorted(cases)) or 'none'})")
        tried = tried_sources(context)
        ran = _KnobsRan(context.trials, knobs, context.baseline_source, dispatch, spec, cases)
        rejected_moves = self._rejected_moves(context.trials, choices)
        passes = ["forward", "backward"] if context.target == "full" else [context.target]
        # A move that leaves the target's pass as it runs at every case of its bucket cannot improve the target
        # (num_stages, which pipelines the backward's row loop, in a forward screening): compared on that pass.
        target_pass = context.target if context.target in ("forward", "backward") else None
        profiled = best_as_profiled(best, context.trials)  # its profile over the suite, where it was confined
        diagnoses = [(p, d) for p in passes for d in diagnose(profiled, p, per_bucket=bool(buckets))] \
            if context.target != "memory" else []
        # Where a peer is faster than the best, its bucket's problems come first (the furthest behind first): a
        # remedy there is what the suite's targets need, whatever a slower bucket's NCU severity says.
        # With a full target the judge scores the full pass: a peer ahead there puts both passes' problems of
        # the bucket first.
        def scored(pass_name: str) -> str:
            return "full" if context.target == "full" else pass_name

        leads = peer_leads(context.trials, context.baseline_source, [scored(p) for p in passes]) if buckets else {}

        def lead_in(pass_name: str, bucket: str | None) -> PeerLead | None:
            lead = leads.get((scored(pass_name), bucket)) if bucket else None
            return lead if lead is not None and lead.ahead else None

        def behind(pass_name: str, diagnosis: Diagnosis) -> float:
            lead = lead_in(pass_name, dispatch_bucket(diagnosis.shape, diagnosis.dtype) if diagnosis.shape else None)
            return lead.lead if lead else 1.0

        if context.buckets:
            diagnoses = [(p, d) for p, d in diagnoses
                         if d.shape and dispatch_bucket(d.shape, d.dtype) in context.buckets]
        diagnoses.sort(key=lambda pd: (-behind(*pd), -pd[1].severity))
        skipped = []
        unlaunchable = _LaunchModel(context, knobs, dispatch)

        pending = []
        for source in context.pending_sources:
            try:
                theirs = read_knobs(source)[0], recorded_dispatch(source)
            except Exception:  # noqa: BLE001 - a proposer-written candidate whose knobs cannot be read
                continue
            # Only a move of the best's knobs: a candidate that also changes code runs other code, whatever its knobs.
            if with_knobs(context.best_source, changes_between(knobs, dispatch, *theirs)) == source:
                pending.append(theirs)

        def runs_as_pending(changes: dict) -> bool:
            """Whether a pending candidate (of the batch being filled; the history's are ``ran``'s) runs what
            ``changes`` would at every case the best was timed at, in the target's pass (two forward candidates
            that differ in the backward alone measure one forward)."""
            mine = apply_changes(knobs, dispatch, changes)
            every = [(bucket, case) for bucket, bucket_cases in cases.items() for case in bucket_cases]
            return bool(every) and any(
                all(_runs_the_same(spec, knobs_in(*mine, bucket), knobs_in(theirs, table, bucket), *case,
                                   target_pass)
                    for bucket, case in every)
                for theirs, table in pending)

        def fresh_source(changes: dict) -> tuple[str | None, bool]:
            """``(the best's source with changes, False)``; ``(None, True)`` where the history holds it or ran
            those settings; ``(None, False)`` where it cannot launch (noted in ``skipped``) or a pending candidate
            runs the same at every timed case."""
            source = with_knobs(context.best_source, changes)
            if source_hash(source) in tried or ran(changes):
                return None, True
            if runs_as_pending(changes):
                return None, False
            problem = unlaunchable(changes)
            if problem:
                skipped.append(f"{changes} (cannot launch: {problem})")
                return None, False
            return source, False

        def bucket_of(diagnosis: Diagnosis | None) -> str | None:
            """Where a remedy goes: the diagnosed case's bucket when the best carries a dispatch table."""
            if not buckets or diagnosis is None or not diagnosis.shape:
                return None
            return dispatch_bucket(diagnosis.shape, diagnosis.dtype)

        def pin_in(bucket: str | None, here: dict, moved: dict) -> dict:
            """The change (``knob@bucket``) that keeps the pass the target does not time as it ran where ``moved``
            (to ``here``, the knobs the bucket runs) would change it (``other_pass_pin``); empty elsewhere."""
            pin = other_pass_pin(spec, here, moved, cases.get(bucket, []), target_pass, choices) if bucket else {}
            return {qualified(k, bucket): v for k, v in pin.items()}

        def remedy_changes(bucket: str | None, remedy: Remedy) -> tuple[dict, dict]:
            """(the knobs the best runs in the remedy's bucket, the changes it makes to them)."""
            here = knobs_in(knobs, dispatch, bucket)
            return here, {qualified(k, bucket): v for k, v in remedy.changes.items() if here.get(k) != v}

        def explore(pass_name: str) -> tuple[Remedy, ...]:
            return tuple(spec.remedies.get(pass_name, {}).get("explore", ()))

        # Each entry: (pass, diagnosis or None, remedy, the bucket it goes into or None for the defaults).
        plan = [(p, d, r, bucket_of(d)) for p, d in diagnoses for r in spec.remedies.get(p, {}).get(d.name, ())]
        # A bucket to tune gets the spec's remedies for no diagnosis in particular, in that bucket, after its
        # diagnoses' remedies and before the blind walk over KNOB_CHOICES: the buckets --buckets names, and without
        # it those where a peer is ahead (by the lead). Many such buckets have no diagnosis at all: their profiled
        # case trips no rule (0087's float32 43690x1536 runs DRAM at 81 % of its peak, above the memory-latency
        # rule's MEMORY_LATENCY_DRAM_PCT). 2026-12-03: with --buckets 2048x4 the walk's first screening held one
        # row per program and two tile sizes while the spec's split (bwd_programs_per_sm) was never offered.
        explored = [(p, b) for b in buckets for p in passes if context.buckets or lead_in(p, b)]
        diagnosed_in = {(p, bucket_of(d)) for p, d in diagnoses}
        # Within such a bucket the history ranks the spec's list by what the same move did where it was measured:
        # one faster in this very bucket (against an earlier best) first, then by the other buckets it was faster
        # in less those it was slower in, one slower in this very bucket after all of them. Screening 0072 spent a
        # slot on the in-launch dW sum, clearly slower where it had been screened, while the split of each SM's
        # rows waited fourth. (Read only when some bucket is explored: it rewrites every screened source.)
        measured = _moves_measured(context.trials, context.target) if explored else {}
        # A move the history measured faster beyond its interval in some bucket joins the spec's list in every
        # explored bucket, ranked with it: what won next door is a better guess than the spec's untried ones.
        # 2026-12-04: num_stages 3 was accepted in 2048x2 (0071) and 4096x2 (0085, 1.28x), but no rule offered it
        # in a bucket whose profiled case trips no diagnosis.
        carried = {p: carried_moves(measured, p) for p in passes}
        won_in = {id(remedy): buckets for moves in carried.values() for remedy, buckets in moves}

        def explore_in(pass_name: str) -> tuple[Remedy, ...]:
            own = explore(pass_name)
            listed = {_move_key(dict(r.changes)) for r in own}
            return own + tuple(r for r, _ in carried[pass_name] if _move_key(dict(r.changes)) not in listed)

        def is_carried(remedy: Remedy) -> bool:
            return id(remedy) in won_in

        def written(remedy: Remedy, bucket: str) -> dict:
            return remedy_changes(bucket, remedy)[1]

        def rank(remedy: Remedy, bucket: str) -> tuple[bool, bool, int]:
            outcomes = measured.get(_move_key(written(remedy, bucket)), {})
            own = outcomes.get(bucket)
            return own == -1, own != 1, -sum(o for b, o in outcomes.items() if b != bucket)

        plan += [(p, None, r, b) for p, b in explored for r in sorted(explore_in(p), key=lambda r: rank(r, b))]
        if not context.buckets:  # then an undiagnosed remedy goes to the defaults: every bucket
            plan += [(p, None, r, None) for p in passes for r in explore(p)]
        # A remedy may name a knob the best's source predates (a knob added to the baseline since): it is for a
        # later best that has it.
        plan = [(p, d, r, b) for p, d, r, b in plan
                if all(k in knobs and v in choices.get(k, [v]) for k, v in r.changes.items())]
        # A batch (the candidates of one screening) spreads over the problems: while another problem
        # has a remedy left, at most BATCH_PER_DIAGNOSIS remedies of one problem are pending at once, so that the
        # screening compares the best remedy of several problems, not four answers to the worst one. With a
        # dispatch table a problem is a bucket (its diagnoses all ask one thing: a faster bucket, and moves in two
        # buckets combine), else a diagnosis. Each pending candidate counts once, for the first plan entry that
        # writes it.
        def problem(pass_name: str, diagnosis: Diagnosis | None, bucket: str | None) -> tuple:
            return (pass_name, bucket) if bucket else (pass_name, diagnosis.name if diagnosis else "explore")

        crowded: dict[tuple, int] = {}
        counted: set[str] = set()
        for pass_name, diagnosis, remedy, bucket in plan if context.pending else ():  # nothing pending, nothing counted
            _, changes = remedy_changes(bucket, remedy)
            sha = source_hash(with_knobs(context.best_source, changes)) if changes else ""
            if sha in context.pending and sha not in counted:
                counted.add(sha)
                key = problem(pass_name, diagnosis, bucket)
                crowded[key] = crowded.get(key, 0) + 1

        def remedy_proposal(pass_name: str, diagnosis: Diagnosis | None, remedy: Remedy,
                            bucket: str | None) -> Proposal | None:
            here, changes = remedy_changes(bucket, remedy)
            if not changes or (bucket and _changes_nothing(spec, here, dict(remedy.changes), cases.get(bucket, []),
                                                           target_pass)):
                return None
            if is_carried(remedy) and len(changes) < len(remedy.changes):
                return None  # part of the move runs here already: the rest is another move, never measured
            moves = {(name, repr(here.get(split_qualified(name)[0])),
                      _direction(choices.get(split_qualified(name)[0], []), here.get(split_qualified(name)[0]), v))
                     for name, v in changes.items()}
            if moves & rejected_moves:
                skipped.append(f"{changes} (moves a knob the way a rejected trial did)")
                return None
            pin = pin_in(bucket, here, dict(remedy.changes))
            changes = {**changes, **pin}
            source, _ = fresh_source(changes)
            if source is None:
                return None
            profiled = best.ncu is not None and best.ncu.status == "ok"
            if diagnosis:
                evidence = diagnosis.evidence
            elif bucket and (pass_name, bucket) in diagnosed_in:
                evidence = "the remedies for this bucket's NCU diagnoses are tried or ruled out"
            elif bucket:
                evidence = ("no NCU diagnosis reaches this bucket (its profiled case, if any, trips no rule)"
                            if profiled else
                            f"no NCU profile to diagnose ({best.ncu.reason if best.ncu else 'none recorded'})")
            else:
                evidence = ("no NCU diagnosis left to act on" if profiled else
                            f"no NCU profile to diagnose ({best.ncu.reason if best.ncu else 'none recorded'})")
            scope = (f" Only in bucket {bucket} ({_bucket_words(bucket)}), " + (
                "where it was diagnosed." if diagnosis else
                (f"a move faster in {'another bucket' if set(won_in[id(remedy)]) - {bucket} else 'this one'}, tried "
                 "with the spec's remedies for no diagnosis in particular, before the walk over KNOB_CHOICES.")
                if is_carried(remedy) else
                "one of the spec's remedies for no diagnosis in particular, tried before the walk over "
                "KNOB_CHOICES.")
                if bucket else "")
            if bucket and not diagnosis and measured.get(_move_key(changes)):
                scope += " " + _measured_words(measured[_move_key(changes)], bucket)
            lead = lead_in(pass_name, bucket)
            if lead:
                scope += (f" A peer is faster there: the best takes {lead.lead:.2f}x {lead.peer}'s "
                          f"{scored(pass_name)} time (geomean over {lead.cases} of the "
                          f"bucket's {lead.of_cases} cases: the baseline trial's side-by-side times, times the "
                          "accepted steps' ratios since), so this bucket comes first.")
            return Proposal(
                name=_proposal_name(changes), source=source,
                hypothesis=(f"{evidence}. {remedy.why.rstrip('.')}.{_pin_words(pin, target_pass)}{scope}"
                            f"{unlaunchable.spill_note(changes, diagnosis)}"),
                prediction=remedy.effect, changes=changes,
                diagnosis=diagnosis.name if diagnosis else "explore")

        # Where a peer is ahead, an undiagnosed bucket's remedies rank with the diagnosed ones, by the lead.
        def lead_of(entry: tuple) -> float:
            lead = lead_in(entry[0], entry[3])
            return lead.lead if lead else 1.0

        directed = [e for e in plan if e[1] is not None or (e[3] and lead_in(e[0], e[3]))]
        uncrowded = [e for e in directed if crowded.get(problem(e[0], e[1], e[3]), 0) < BATCH_PER_DIAGNOSIS]
        # The capped ones still come before exploring: a third remedy of a diagnosed problem is a better guess
        # than an undirected move.
        ordered = [*sorted(uncrowded, key=lambda e: -lead_of(e)),
                   *sorted((e for e in directed if e not in uncrowded), key=lambda e: -lead_of(e)),
                   *(e for e in plan if e not in directed)]
        for pass_name, diagnosis, remedy, bucket in ordered:
            proposal = remedy_proposal(pass_name, diagnosis, remedy, bucket)
            if proposal is not None:
                return proposal
        remedies_left = "all tried or ruled out" if plan else "none for this target and its diagnoses"
        # The walk over KNOB_CHOICES: the buckets take turns, a move each (the diagnoses read in a bucket first
        # within it), and the defaults, which every shape without an entry of its own runs, take the last turn.
        # A move the history holds keeps its place, so each call goes on where the last one stopped.
        walks = [(bucket, knobs_in(knobs, dispatch, bucket),
                  [*((p, d) for p, d in diagnoses if bucket_of(d) == bucket), *((p, None) for p in passes)])
                 for bucket in buckets]
        if not context.buckets:
            walks.append((None, knobs, [*diagnoses, *((p, None) for p in passes)]))
        def first_untried(bucket: str | None, here: dict, plans: list
                          ) -> tuple[int, KnobMove, dict, dict, str] | None:
            """A walk's next move: (how many of its moves the history tried before it, the move, its changes, its
            source); None when it has none left. A move that cannot launch, changes nothing at the bucket's shapes
            or was ruled out by a rejection takes no turn."""
            turns = 0

            def anchor(knob: str, old):
                """The listed number that a non-numeric ``old`` ("auto") runs as at every case of the bucket (the
                walk steps from there), else ``old`` (a number, a bool: its own place in the list)."""
                if isinstance(old, (int, float)) or not bucket or not cases.get(bucket):
                    return old
                return next((v for v in choices.get(knob, ()) if isinstance(v, (int, float))
                             and not isinstance(v, bool)
                             and _changes_nothing(spec, here, {knob: v}, cases[bucket], target_pass)), old)

            anchors = {knob: anchor(knob, old) for knob, old in here.items()}
            for move in _knob_moves(here, choices, context.target, plans, anchors):
                name = qualified(move.knob, bucket)
                changes = {name: move.new}
                if bucket and _changes_nothing(spec, here, {move.knob: move.new}, cases.get(bucket, []), target_pass):
                    continue  # e.g. a chunk at least as wide as every row of the bucket, or a move of another pass
                pin = pin_in(bucket, here, {move.knob: move.new})
                changes.update(pin)
                source, ran_before = fresh_source(changes)
                if ran_before:  # it took its turn
                    turns += 1
                    continue
                if (name, repr(move.old), _direction(choices[move.knob], move.old, move.new)) in rejected_moves:
                    skipped.append(f"{changes} (moves a knob the way a rejected trial did)")
                    continue
                if source is not None:
                    return turns, move, changes, pin, source
            return None

        nexts = [(found, order, bucket) for order, (bucket, here, plans) in enumerate(walks)
                 if (found := first_untried(bucket, here, plans)) is not None]
        if nexts:
            (_, move, changes, pin, source), _, bucket = min(nexts, key=lambda n: (n[0][0], n[1]))
            diagnosis = move.diagnosis
            ordered_by = (f"the {move.pass_name} diagnosis {diagnosis.name} ({diagnosis.evidence})" if diagnosis
                          else "no diagnosis (" + ("the NCU profile shows none" if best.ncu and
                                                   best.ncu.status == "ok" else "no NCU profile") + ")")
            scope = (f" in bucket {bucket} ({_bucket_words(bucket)}) only (the buckets take turns, the one "
                     "furthest from the copy floor first)" if bucket else "")
            return Proposal(
                name=f"explore-{_proposal_name(changes)}", source=source,
                hypothesis=(f"Exploring KNOB_CHOICES, not a hand-written remedy (the spec's remedies: "
                            f"{remedies_left}): knob {move.knob} from {move.old!r} to {move.new!r}{scope}, the "
                            + ("one move from the current best." + _pin_words(pin, target_pass) if pin else
                               "only knob changed from the current best.")
                            + f" Ordered by {ordered_by}: {move.reason}."),
                prediction=(f"unknown: a search step; the trial measures what {move.knob}={move.new!r} does to "
                            f"{context.target}" + (f" in bucket {bucket}" if bucket else "")),
                changes=changes, diagnosis=f"explore-knobs:{diagnosis.name}" if diagnosis else "explore-knobs")
        names = ", ".join(f"{p}:{d.name}" for p, d in diagnoses) or "none"
        return Stop(f"nothing left to try for {context.target}: diagnoses [{names}]; every remedy the spec lists "
                    f"for them and every exploration move is already in the history, and the knob choices are "
                    f"exhausted too (every one-knob move KNOB_CHOICES allows from the current best"
                    + (f", in each of its {len(buckets)} dispatch buckets and in its defaults," if buckets else "")
                    + " is in it)"
                    + (f" or was ruled out ({'; '.join(skipped[:3])})" if skipped else ""))

    @staticmethod
    def _rejected_moves(trials: list[TrialResult], choices: dict) -> set:
        """(change name, value it moved from, direction) of every move a rejected trial made without gaining; a
        move in one bucket (``knob@bucket``) from the value that bucket ran rules out that bucket's move only."""
        by_sha = {t.variant_sha: t for t in trials}
        moves = set()
        for t in trials:
            if t.verdict != "rejected" or not t.changes or not t.against or recheck_owed(t, trials):
                continue  # (a re-check owed: nothing was judged of the move yet, the loop runs it again)
            if t.gain > 0:
                # It won on the target and lost only on a guardrail somewhere: the direction is right, the
                # step was too broad; the next remedy on the list may take it more narrowly.
                continue
            against = by_sha.get(t.against_sha)
            before = (against.variant.knobs or {}) if against else {}
            table = recorded_dispatch(against.variant.source) if against else {}
            for name, value in t.changes.items():
                knob, bucket = split_qualified(name)
                here = knobs_in(before, table, bucket)
                if knob in here:
                    moves.add((name, repr(here[knob]), _direction(choices.get(knob, []), here[knob], value)))
        return moves


def _move_key(changes: dict) -> tuple:
    """A move whatever bucket it is written for: its knobs (unqualified) and values."""
    return tuple(sorted((split_qualified(name)[0], repr(value)) for name, value in changes.items()))


def _moves_measured(trials: list[TrialResult], target: str) -> dict[tuple, dict[str, int]]:
    """Each move the history made in one dispatch bucket (every change ``knob@bucket`` of one bucket), judged on
    ``target``: per bucket, how its latest measurement there came out (by trial number: a screening's row or a
    judged trial's target interval), 1 faster beyond its interval, -1 slower beyond it, 0 neither. Only a variant
    that is the source it ran against with just those changes counts: a proposer's code edit beside a knob is not
    the knob's doing. A screened candidate counts as faster only where the screening kept it (one that computed a
    wrong result is dropped whatever its time); one clearly slower counts as slower, whatever else was wrong."""
    by_sha = {t.variant_sha: t for t in trials}
    latest: dict[tuple, dict[str, tuple[int, int]]] = {}

    def note(changes: dict | None, before: str, source: str, interval: tuple, when: int, may_be_faster: bool) -> None:
        low, high = interval
        buckets = {split_qualified(name)[1] for name in changes or {}}
        if not changes or len(buckets) != 1 or None in buckets or low is None or high is None:
            return
        try:
            if not before or with_knobs(before, changes) != source:
                return
        except Exception:  # noqa: BLE001 - changes the source it ran against cannot take: not a plain move
            return
        outcome = 1 if high < 1 and may_be_faster else -1 if low > 1 else 0
        bucket, slot = buckets.pop(), latest.setdefault(_move_key(changes), {})
        if bucket not in slot or slot[bucket][0] <= when:
            slot[bucket] = (when, outcome)

    for t in trials:
        against = by_sha.get(t.against_sha) if t.against_sha else None
        if against is None:
            continue
        if t.screening and t.screening.target == target:  # its candidates were screened against its "against"
            for row in t.screening.rows:
                note(row.changes, against.variant.source, row.source, (row.ci_low, row.ci_high), t.trial_id,
                     row.kept)
        elif t.judged and t.judged.target == target:
            note(t.changes, against.variant.source, t.variant.source, t.judged.target_bounds, t.trial_id, True)
    return {key: {bucket: outcome for bucket, (_, outcome) in slot.items()} for key, slot in latest.items()}


def carried_moves(measured: dict[tuple, dict[str, int]], pass_name: str) -> tuple[tuple[Remedy, tuple[str, ...]], ...]:
    """The moves ``_moves_measured`` found faster beyond their interval in at least one bucket whose knobs are
    ``pass_name``'s or shared, as remedies for a bucket (unqualified changes), each with the buckets it was faster
    in, those faster in the most buckets first. A move whose values do not read back as literals is left out."""
    remedies = []
    for key, outcomes in sorted(measured.items(), key=lambda item: (-list(item[1].values()).count(1), item[0])):
        buckets = sorted(b for b, o in outcomes.items() if o == 1)
        if not buckets or not all(knob_pass(knob) in (None, pass_name) for knob, _ in key):
            continue
        try:
            changes = {knob: ast.literal_eval(value) for knob, value in key}
        except (ValueError, SyntaxError):  # e.g. a float's inf: no literal
            continue
        remedies.append((Remedy(changes, f"the same move ran faster beyond its interval in {', '.join(buckets)}",
                                f"faster over the bucket, as in {', '.join(buckets)}"), tuple(buckets)))
    return tuple(remedies)


def _measured_words(outcomes: dict[str, int], bucket: str) -> str:
    """What a move's latest measurement in each bucket said, for a hypothesis."""
    others = {b: o for b, o in outcomes.items() if b != bucket}
    said = [f"{words} in {', '.join(sorted(b for b, o in others.items() if o == outcome))}"
            for outcome, words in ((1, "faster beyond the interval"), (-1, "slower beyond it"),
                                   (0, "within the noise")) if outcome in others.values()]
    parts = [f"Measured in other buckets (the latest result in each): {'; '.join(said)}"] if said else []
    if bucket in outcomes:
        parts.append("in this bucket against an earlier best " + {
            1: "faster (so it comes first)", -1: "slower (so it comes last)", 0: "within the noise"}[outcomes[bucket]])
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + ". Ranked by that among the spec's remedies."


def _proposal_name(changes: dict) -> str:
    return "-".join(f"{k}-{v}" for k, v in changes.items()).replace("_", "-").replace("@", "-in-").lower()


def _bucket_words(bucket: str) -> str:
    """``"8192x2"`` -> ``"4097-8192 columns, 2-byte elements"``."""
    return f"{bucket_columns(bucket)} columns, {bucket.partition('x')[2]}-byte elements"


def _buckets_to_tune(rows: list, target: str) -> tuple[list[str], dict[str, list]]:
    """The dispatch buckets of the shapes the best was timed at on the target (its candidate ``rows``:
    ``history.best_timing_rows``), the one whose worst shape is furthest from the copy-bandwidth floor first (its
    share of the floor as the best ran it; unmeasured: last), and each bucket's (shape, dtype name) cases."""
    passes = ("forward", "backward") if target in ("full", "memory") else (target,)
    worst: dict[str, float] = {}
    cases: dict[str, list] = {}
    for row in rows:
        if row.pass_name not in passes:
            continue
        bucket = dispatch_bucket(row.shape, row.dtype)
        fraction = row.bandwidth_fraction if row.bandwidth_fraction is not None else math.inf
        worst[bucket] = min(worst.get(bucket, math.inf), fraction)
        case = (tuple(int(d) for d in row.shape.split("x")), row.dtype)
        if case not in cases.setdefault(bucket, []):
            cases[bucket].append(case)
    return sorted(worst, key=lambda b: (worst[b], bucket_order(b))), cases


@dataclass
class PeerLead:
    """How far a peer is ahead of the current best in one pass and dispatch bucket."""

    peer: str
    lead: float  # the best's time over the peer's, geomean over the cases (above 1: the peer is faster)
    cases: int  # the bucket's cases both were measured at
    of_cases: int  # the bucket's cases the baseline trial timed

    @property
    def ahead(self) -> bool:
        return self.lead > PEER_LEAD_MARGIN


def peer_leads(trials: list[TrialResult], baseline_source: str,
               passes: list[str]) -> dict[tuple[str, str], PeerLead]:
    """Per (pass, dispatch bucket): the peer furthest ahead of the current best there (``TARGET_PEERS``; ties
    broken by name). The baseline trial timed the peers beside the baseline; the accepted chain's ratios since
    take that to the current best (``judge.drift_ratios``: the estimate of the best against the baseline that the
    cumulative guardrail uses, on the cases every step timed, a step's noise at a case it left as it was not
    counted). Empty without a baseline trial that timed a peer."""
    if not baseline_source:
        return {}
    baseline, chain = accepted_chain(trials, source_hash(baseline_source))
    if baseline is None:
        return {}
    to_best = drift_ratios(chain, trials) if chain else {}
    ours = {r.key: r.median_ms for r in baseline.timing_rows("candidate")
            if r.median_ms and r.pass_name in passes and (not chain or r.key in to_best)}
    timed: dict[tuple[str, str], int] = {}
    for key in {r.key for r in baseline.timing_rows("candidate") if r.pass_name in passes}:
        bucket_key = (key[0], dispatch_bucket(key[1], key[2]))
        timed[bucket_key] = timed.get(bucket_key, 0) + 1
    per_peer: dict[tuple[str, str, str], list[float]] = {}
    for row in baseline.timing_rows():
        if row.contender in TARGET_PEERS and row.median_ms and row.key in ours:
            best_ms = ours[row.key] * to_best.get(row.key, 1.0)
            per_peer.setdefault((row.pass_name, dispatch_bucket(row.shape, row.dtype), row.contender), []).append(
                best_ms / row.median_ms)
    leads: dict[tuple[str, str], PeerLead] = {}
    for (pass_name, bucket, peer), ratios in sorted(per_peer.items()):
        lead = PeerLead(peer, geomean(ratios), len(ratios), timed.get((pass_name, bucket), len(ratios)))
        if (pass_name, bucket) not in leads or lead.lead > leads[(pass_name, bucket)].lead:
            leads[(pass_name, bucket)] = lead
    return leads


def _runs_the_same(spec, knobs: dict, other: dict, shape: tuple, dtype: str, pass_name: str | None = None) -> bool:
    import torch

    return isinstance(getattr(torch, dtype, None), torch.dtype) and spec.runs_the_same(
        knobs, other, shape, getattr(torch, dtype), pass_name)


def _changes_nothing(spec, knobs: dict, changes: dict, cases: list, pass_name: str | None = None) -> bool:
    """Whether ``changes`` leave what every one of ``cases`` runs as it was (``KernelSpec.effective_settings``), in
    ``pass_name`` alone where given; False where the spec cannot tell, or there is no case to tell by."""
    return bool(cases) and all(_runs_the_same(spec, knobs, {**knobs, **changes}, shape, dtype, pass_name)
                               for shape, dtype in cases)


OTHER_PASS = {"forward": "backward", "backward": "forward"}


def _pin_words(pin: dict, target_pass: str | None) -> str:
    """``other_pass_pin``'s change (``knob@bucket`` -> value), said in a hypothesis."""
    return "".join(f" With {split_qualified(name)[0]}={value!r}, which runs the "
                   f"{OTHER_PASS.get(target_pass, 'other pass')} there as the best does: the move is the "
                   f"{target_pass}'s alone." for name, value in pin.items())


def other_pass_pin(spec, knobs: dict, changes: dict, cases: list, target_pass: str | None, choices: dict) -> dict:
    """Where ``changes`` (to the knobs a bucket runs, ``knobs``) also change the pass the target does not time at
    ``cases``, the one change to that pass's own knob that runs it there as before; empty where they leave it
    alone, the target times both passes, or no such value is listed.

    A shared knob moves both passes: ``num_warps`` 32 in a forward screening gave the backward 32 warps too, where
    ``bwd_num_warps`` "same" follows it (``plan --target forward --buckets 8192x4``, at trial 0087). The forward
    was timed and the backward left to the full trial's guardrail, which a slower backward fails whatever the
    forward gained. Paired with ``bwd_num_warps`` at the value that runs what "same" ran (here "auto"), the move
    is the forward's alone."""
    other = OTHER_PASS.get(target_pass)
    if other is None or not cases or _changes_nothing(spec, knobs, changes, cases, other):
        return {}
    for knob, old in knobs.items():
        if knob_pass(knob) != other or knob in changes:
            continue
        for value in choices.get(knob, ()):
            if value != old and _changes_nothing(spec, knobs, {**changes, knob: value}, cases, other):
                return {knob: value}
    return {}


class _KnobsRan:
    """Knob settings the history has measured, whatever baseline source they ran on: called with changes to the
    best's knobs, whether a complete trial ran exactly those settings, or a screening found them clearly slower.

    A changed baseline (a fix, a new knob) changes every variant's source, so a source hash no longer finds the
    old trials: without this the proposer repeats them (trials 0019 and 0020 of the H200 history re-ran 0009
    and 0011 after the baseline changed under them). A trial that failed its gate or crashed does not count: a
    fixed baseline may make those settings work. A knob an older variant lacks counts at the value today's
    baseline gives it, so a new knob should default to the behaviour before it; where it does not (the fused
    kernel's ``bwd_grad_rounding`` defaults to ``"once"``; trials before 0022 rounded as autograd), settings
    measured before are taken as measured with the new default.

    With the spec and the best's timed cases per bucket, a move confined to one bucket also counts as measured
    where another value ran there alike (``KernelSpec.effective_settings`` at every timed case of the bucket):
    after screening 0060 dropped ``bwd_fused_dw_max_cols@1024x2=8192``, 4096 sums dW inside the backward at 896
    columns just as 8192 did."""

    def __init__(self, trials: list[TrialResult], knobs: dict, baseline_source: str = "",
                 dispatch: dict | None = None, spec=None, cases: dict | None = None):
        baselines = [t for t in trials if t.name == "baseline" and t.variant.knobs]
        self.defaults = dict(baselines[-1].variant.knobs) if baselines else {}
        if baseline_source:
            self.defaults.update(read_knobs(baseline_source)[0])
        self.knobs, self.dispatch = knobs, dispatch or {}
        self.spec, self.cases = spec, cases or {}
        self.ran = set()
        # A move confined to one bucket was measured on that bucket's shapes alone, which run its settings and
        # nothing else: those settings count as measured there whatever the other buckets run now (after 0039
        # changed 16384x2, screening 0037's drop of a 16384x4 move still held).
        self.ran_in_bucket = set()
        self.ran_alike = set()  # what each bucket's timed cases ran (``_runs_key``)
        for t in trials:
            if t.kind == "screening" and t.screening is not None:
                for row in t.screening.rows:
                    if not row.kept and row.source:
                        try:
                            self._add(read_knobs(row.source)[0], recorded_dispatch(row.source), row.changes)
                        except Exception:  # noqa: BLE001 - a candidate whose KNOBS cannot be read: not a setting
                            continue
            elif t.status == "complete" and t.variant.knobs:
                self._add(t.variant.knobs, recorded_dispatch(t.variant.source), t.changes)

    def _add(self, knobs: dict, table: dict, changes: dict | None) -> None:
        self.ran.add(self._key(knobs, table))
        if len(buckets := target_buckets(changes)) == 1:
            self.ran_in_bucket.add(self._bucket_key(knobs, table, *buckets))
            if (alike := self._runs_key(knobs, table, *buckets)) is not None:
                self.ran_alike.add(alike)

    def _bucket_key(self, knobs: dict, table: dict, bucket: str) -> str:
        return repr((bucket, sorted((k, repr(v)) for k, v in knobs_in({**self.defaults, **knobs}, table,
                                                                       bucket).items())))

    def _runs_key(self, knobs: dict, table: dict, bucket: str) -> str | None:
        """What the bucket's timed cases run under these settings; None where the spec cannot tell."""
        cases = self.cases.get(bucket)
        if self.spec is None or not cases:
            return None
        import torch

        here = knobs_in({**self.defaults, **knobs}, table, bucket)
        runs = []
        for shape, dtype in cases:
            try:
                settings = self.spec.effective_settings(here, shape, getattr(torch, dtype))
            except Exception:  # noqa: BLE001 - kernel code; a model that cannot answer tells nothing
                return None
            if settings is None:
                return None
            runs.append(repr(settings))
        return repr((bucket, runs))

    def _key(self, knobs: dict, table: dict) -> str:
        # The settings every bucket runs: the defaults, and each entry as far as it differs from them.
        full, table = apply_changes({**self.defaults, **knobs}, table, {})
        return repr((sorted((k, repr(v)) for k, v in full.items()),
                     sorted((b, sorted((k, repr(v)) for k, v in e.items())) for b, e in table.items())))

    def __call__(self, changes: dict) -> bool:
        knobs, table = apply_changes(self.knobs, self.dispatch, changes)
        if self._key(knobs, table) in self.ran:
            return True
        buckets = target_buckets(changes)
        if len(buckets) != 1:
            return False
        if self._bucket_key(knobs, table, *buckets) in self.ran_in_bucket:
            return True
        alike = self._runs_key(knobs, table, *buckets)
        return alike is not None and alike in self.ran_alike


class _LaunchModel:
    """The spec's launch model asked about the best's knobs with some changed: called with the changes, the
    reason a launch cannot run (at a suite or check shape, on the device the best trial ran on), or None."""

    def __init__(self, context: Context, knobs: dict, dispatch: dict | None = None):
        spec, best = context.spec, context.best
        self.dispatch = dispatch or {}
        # The device's suite gives the check shapes and dtypes; the shapes the best was timed at may be another
        # suite's (a trial on "models-tune" runs on the GPU's).
        suite = best.suite if best.suite in spec.suites else "interpret" if best.device == "interpret" else "gpu"
        suite = suite if suite in spec.suites else next(iter(spec.suites), "")
        timed = best.suite if best.suite in TUNING_SUITES and best.device == "cuda" else suite
        self.spec, self.knobs = spec, knobs
        self.suite_shapes = list(dict.fromkeys(tuple(c.shape) for c in spec.cases(timed, "bench"))) if timed else []
        self.shapes = [*self.suite_shapes, *map(tuple, spec.check_shapes.get(suite, ()))]
        self.dtypes = list(spec.dtypes.get(suite, ()))
        self.passes = [p for p in ("forward", "backward") if p in spec.passes]
        self.limits = limits_for(best.fingerprint.compute_capability if best.fingerprint else None)

    def __call__(self, changes: dict) -> str | None:
        knobs, table = apply_changes(self.knobs, self.dispatch, changes)
        return launch_problem(self.spec, knobs, self.passes, self.shapes, self.dtypes, self.limits, table)

    def spill_note(self, changes: dict, diagnosis: Diagnosis | None) -> str:
        """For a remedy of spills: where the register model still expects them (an estimate: it informs, the
        trial decides); empty where the spec has no model."""
        if diagnosis is None or diagnosis.name != "spills" or not self.suite_shapes or not self.dtypes:
            return ""
        knobs, table = apply_changes(self.knobs, self.dispatch, changes)
        pass_name = "backward" if diagnosis.evidence.startswith("backward") else "forward"
        if not footprints(self.spec, knobs, pass_name, self.suite_shapes[0], self.dtypes[0], table):
            return ""
        still = spilling_shapes(self.spec, knobs, pass_name, self.suite_shapes, self.dtypes, self.limits, table)
        return (f" (The launch model expects spills still at {', '.join(still)}.)" if still
                else " (The launch model expects no spills at any suite shape.)")


__all__ = ["DIAGNOSIS_PREFERENCES", "Diagnosis", "KNOB_KINDS", "KnobMove", "PASS_PREFIXES", "RulesProposer",
           "Remedy", "diagnose", "knob_kind", "knob_pass"]
