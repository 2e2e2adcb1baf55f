"""The rules proposer: diagnose the current best from its NCU metrics, turn the knob the diagnosis points to.

Diagnoses are read from the dominant kernel (the longest) of the target pass at each shape and dtype of the
best trial: register spills (local-memory traffic), occupancy limited by registers, achieved occupancy far
under theoretical, fewer than one wave of blocks, and memory latency (long-scoreboard stalls while DRAM is far
from its peak). Which knob changes answer which diagnosis is kernel knowledge, declared by the spec
(``KernelSpec.remedies``); this module only ranks, filters and writes them.

It never proposes a variant the history already holds, and it learns from rejections: a knob moved in one
direction from a given value by a trial that did not improve the target is not moved that way from that value
again (a trial that improved the target but broke a guardrail elsewhere rules nothing out).
"""

from __future__ import annotations

from dataclasses import dataclass

from liger_perf.proposers import Context, Proposal, Stop, tried_sources
from liger_perf.schema import NCU_DURATION, NcuLaunch, TrialResult
from liger_perf.spec import Remedy
from liger_perf.variants import read_knobs, source_hash, with_knobs


@dataclass
class Diagnosis:
    name: str
    severity: float
    evidence: str


def _numel(shape: str) -> int:
    n = 1
    for part in shape.split("x"):
        n *= int(part)
    return n


def diagnose(trial: TrialResult, pass_name: str) -> list[Diagnosis]:
    """What the NCU metrics of ``trial`` say about ``pass_name``, most severe first (empty without NCU)."""
    dominant: dict[tuple[str, str], NcuLaunch] = {}
    for launch in trial.launches(pass_name):
        key = (launch.shape, launch.dtype)
        time = launch.metric(NCU_DURATION)
        if key not in dominant or time > dominant[key].metric(NCU_DURATION):
            dominant[key] = launch
    found: dict[str, Diagnosis] = {}

    def note(name: str, severity: float, evidence: str) -> None:
        if severity > 0 and (name not in found or severity > found[name].severity):
            found[name] = Diagnosis(name, severity, evidence)

    for (shape, dtype), launch in sorted(dominant.items(), key=lambda kv: _numel(kv[0][0])):
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
        if theoretical is not None and by_regs is not None and by_warps is not None:
            if by_regs < by_warps and theoretical < 50:
                note("register_limited_occupancy", (50 - theoretical) / 50,
                     f"{where}: theoretical occupancy {theoretical:.0f}%, limited by registers ({regs:.0f}/thread)")
        if theoretical and achieved is not None and achieved < 0.6 * theoretical:
            note("low_achieved_occupancy", 1 - achieved / theoretical,
                 f"{where}: achieved occupancy {achieved:.0f}% of a theoretical {theoretical:.0f}%")
        waves = m.get("launch__waves_per_multiprocessor")
        if waves is not None and waves < 1:
            note("under_one_wave", 1 - waves, f"{where}: {waves:.2f} waves of blocks ("
                 f"{m.get('launch__grid_size', 0):.0f} blocks): part of the GPU idles")
        stalls = launch.stalls()
        dram_pct = m.get("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")
        if stalls and dram_pct is not None and dram_pct < 60:
            top = max(stalls, key=stalls.get)
            if top == "long_scoreboard":
                note("memory_latency", (60 - dram_pct) / 60, f"{where}: DRAM at {dram_pct:.0f}% of peak and "
                     f"long-scoreboard stalls dominate ({stalls[top]:.1f} cycles per issued instruction)")
    return sorted(found.values(), key=lambda d: -d.severity)


def _direction(choices: list, old, new):
    """+1 / -1 along an ordered knob, or the new value itself for a categorical one."""
    numeric = [c for c in choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
    if isinstance(old, (int, float)) and isinstance(new, (int, float)) and not isinstance(new, bool) \
            and old in numeric and new in numeric:
        return 1 if new > old else -1
    return repr(new)


class RulesProposer:
    name = "rules"

    def propose(self, context: Context) -> Proposal | Stop:
        spec, best = context.spec, context.best
        knobs, choices = read_knobs(context.best_source)
        tried = tried_sources(context)
        rejected_moves = self._rejected_moves(context.trials, choices)
        passes = ["forward", "backward"] if context.target == "full" else [context.target]
        diagnoses = [(p, d) for p in passes for d in diagnose(best, p)] if context.target != "memory" else []
        diagnoses.sort(key=lambda pd: -pd[1].severity)
        skipped = []
        plan = [(p, d, r) for p, d in diagnoses for r in spec.remedies.get(p, {}).get(d.name, ())]
        plan += [(p, None, r) for p in passes for r in spec.remedies.get(p, {}).get("explore", ())]
        for pass_name, diagnosis, remedy in plan:
            changes = {k: v for k, v in remedy.changes.items() if knobs.get(k) != v}
            if not changes or any(v not in choices.get(k, [v]) for k, v in changes.items()):
                continue
            moves = {(k, repr(knobs.get(k)), _direction(choices.get(k, []), knobs.get(k), v))
                     for k, v in changes.items()}
            if moves & rejected_moves:
                skipped.append(f"{changes} (moves a knob the way a rejected trial did)")
                continue
            source = with_knobs(context.best_source, changes)
            if source_hash(source) in tried:
                continue
            evidence = diagnosis.evidence if diagnosis else (
                "no NCU diagnosis left to act on" if best.ncu and best.ncu.status == "ok"
                else f"no NCU profile to diagnose ({best.ncu.reason if best.ncu else 'none recorded'})")
            return Proposal(
                name="-".join(f"{k}-{v}" for k, v in changes.items()).replace("_", "-").lower(), source=source,
                hypothesis=f"{evidence}. {remedy.why}", prediction=remedy.effect, changes=changes,
                diagnosis=diagnosis.name if diagnosis else "explore")
        names = ", ".join(f"{p}:{d.name}" for p, d in diagnoses) or "none"
        return Stop(f"nothing left to try for {context.target}: diagnoses [{names}]; every remedy the spec lists "
                    f"for them and every exploration move is already in the history"
                    + (f" or was ruled out by a rejection ({'; '.join(skipped[:3])})" if skipped else ""))

    @staticmethod
    def _rejected_moves(trials: list[TrialResult], choices: dict) -> set:
        knobs_by_sha = {t.variant_sha: t.variant.knobs or {} for t in trials}
        moves = set()
        for t in trials:
            if t.verdict != "rejected" or not t.changes or not t.against:
                continue
            if t.gain > 0:
                # It won on the target and lost only on a guardrail somewhere: the direction is right, the
                # step was too broad; the next remedy on the list may take it more narrowly.
                continue
            before = knobs_by_sha.get(t.against_sha, {})
            for knob, value in t.changes.items():
                if knob in before:
                    moves.add((knob, repr(before[knob]), _direction(choices.get(knob, []), before[knob], value)))
        return moves


__all__ = ["Diagnosis", "RulesProposer", "Remedy", "diagnose"]
