"""The judge, fed recorded measurements so that verdicts do not depend on this machine's speed."""

import copy
import math

import pytest

from liger_perf.judge.guardrails import Guardrails
from liger_perf.record.history import chain_ratios, load_trials
from liger_perf.judge import judge
from liger_perf.record.schema import TrialResult, Verdict

from broken_variants import ROOT
from made_trials import confined_copy

SHAPES = ("2048x1024", "2048x8192")
DTYPES = ("float32", "bfloat16")


def _result(target_ratio=0.8, other_ratio=1.0, half_width=0.02, memory_ratio=1.0, overrides=None, status="complete",
            intervals=None):
    """A trial of a candidate against the current best: every pass, shape and dtype, side by side. ``overrides``:
    a ratio per key (interval +- ``half_width``); ``intervals``: a ``(ratio, low, high)`` per key."""
    rows = []
    for pass_name in ("forward", "backward", "full"):
        for shape in SHAPES:
            for dtype in DTYPES:
                ratio = target_ratio if pass_name == "backward" else other_ratio
                ratio = (overrides or {}).get((pass_name, shape, dtype), ratio)
                ratio, low, high = (intervals or {}).get((pass_name, shape, dtype),
                                                         (ratio, ratio - half_width, ratio + half_width))
                rows += [{"pass": pass_name, "shape": shape, "dtype": dtype, "contender": "candidate",
                          "relative_to": "against", "ratio": ratio, "ci_low": low, "ci_high": high},
                         {"pass": pass_name, "shape": shape, "dtype": dtype, "contender": "against",
                          "relative_to": "against", "ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0}]
    memory = [{"shape": s, "dtype": d, "contender": c, "peak_bytes": 1e9 * (memory_ratio if c == "candidate" else 1)}
              for s in SHAPES for d in DTYPES for c in ("candidate", "against")]
    return TrialResult.model_validate({
        "kernel": "fused_add_rms_norm", "status": status, "reason": "", "variant": {"sha256": "new"},
        "against": {"sha256": "best"}, "timing": {"rows": rows}, "memory": {"rows": memory}})


RULES = Guardrails(target="backward")


def test_a_clear_improvement_is_accepted():
    verdict = judge(_result(target_ratio=0.8), RULES)
    assert verdict.verdict == "accepted" and abs(verdict.gain - 0.2) < 1e-9


def test_a_trial_gated_on_the_interpreter_alone_is_never_accepted():
    for interpreted in (_result(target_ratio=0.5).model_copy(update={"device": "interpret"}),
                        TrialResult.model_validate({**_result(target_ratio=0.5).model_dump(),
                                                    "correctness": {"passed": True, "interpreted": True}})):
        verdict = judge(interpreted, RULES)
        assert verdict.verdict == "provisional" and "Triton interpreter" in verdict.reasons[-1]
    assert judge(_result(target_ratio=1.5).model_copy(update={"device": "interpret"}), RULES).verdict == "rejected"


def test_an_interval_whose_low_end_reached_zero_is_judged_not_a_crash():
    """On a GPU each interval is widened by the timer's resolution over the best's median, its low end clamped at
    0: a target shape whose median is shorter than the resolution reaches it. The suite's geometric mean is then
    0 at that end; the judge goes on (here: inconclusive, the high end still above 1)."""
    from liger_perf.record.history import geomean, geomean_interval

    assert geomean([0.0, 4.0]) == 0.0 and math.isnan(geomean([-1.0, 4.0])) and math.isnan(geomean([]))
    assert geomean_interval([(1.0, 0.0, 2.0), (1.0, 0.5, 1.5)])[1] == 0.0
    tiny = {("backward", "2048x1024", "float32"): (0.9, 0.0, 1.9)}
    verdict = judge(_result(target_ratio=0.95, half_width=0.01, intervals=tiny), RULES)
    assert verdict.verdict == "inconclusive" and verdict.target_interval[0] == 0.0


def test_faster_target_but_six_percent_slower_elsewhere_at_one_shape_is_rejected_with_that_reason():
    slower = {("forward", "2048x8192", "bfloat16"): (1.06, 1.055, 1.065)}  # wholly above the 5% limit
    verdict = judge(_result(target_ratio=0.8, intervals=slower), RULES)
    assert verdict.verdict == "rejected"
    assert any(r == "forward 2048x8192 bfloat16: 0.94x (slower) [0.94x, 0.95x] over the current best, wholly below the "
                    "0.952x the guardrails allow (max_regression 5%)" for r in verdict.reasons), verdict.reasons
    # 4% slower is within the guardrail.
    assert judge(_result(target_ratio=0.8, overrides={("forward", "2048x8192", "bfloat16"): 1.04}),
                 RULES).verdict == "accepted"


def test_a_possible_regression_whose_interval_contains_the_limit_is_inconclusive_never_accepted_nor_rejected():
    """As a new user saw it on the CPU: a 57% faster target, and a forward 18% slower at its point whose interval
    [0.19, 1.25] says nothing. Not a regression (rejected), not acceptable either: re-measured."""
    noisy = {("forward", "2048x8192", "float32"): (1.18, 0.19, 1.25)}
    for result in (_result(target_ratio=0.43, intervals=noisy),
                   _result(target_ratio=0.43, intervals=noisy).model_copy(update={"device": "interpret"})):
        verdict = judge(result, RULES)
        assert verdict.verdict == "inconclusive", verdict.reasons
        assert verdict.reasons[0] == ("forward 2048x8192 float32: possibly slower than allowed: 0.85x (slower) "
                                      "[0.80x, 5.26x] over the current best, an interval that contains the 0.952x "
                                      "the guardrails allow (max_regression 5%): re-measure")
        assert abs(verdict.gain - 0.57) < 1e-9
    # The target no better: rejected on the target, the possible regression noted.
    verdict = judge(_result(target_ratio=1.03, intervals=noisy), RULES)  # [1.01, 1.05]: worse, within the limit
    assert verdict.verdict == "rejected" and "not better" in verdict.reasons[0] and "possibly" in verdict.reasons[1]


def test_a_regression_whose_interval_lies_wholly_above_the_limit_is_rejected():
    slower = {("forward", "2048x8192", "float32"): (1.2, 1.10, 1.30)}
    for result in (_result(target_ratio=0.43, intervals=slower),
                   _result(target_ratio=0.43, intervals=slower).model_copy(update={"device": "interpret"})):
        verdict = judge(result, RULES)
        assert verdict.verdict == "rejected"
        assert verdict.reasons[0].startswith("forward 2048x8192 float32: 0.83x (slower) [0.77x, 0.91x] over the "
                                             "current best, wholly below the 0.952x the guardrails allow")
    # Without an interval (one repetition) the point decides: rejected, as before intervals decided.
    unmeasured = {("forward", "2048x8192", "float32"): (1.2, float("nan"), float("nan"))}
    assert judge(_result(target_ratio=0.43, intervals=unmeasured), RULES).verdict == "rejected"


def test_more_memory_is_a_regression_and_less_memory_can_be_the_target():
    verdict = judge(_result(target_ratio=0.8, memory_ratio=1.06), RULES)
    assert verdict.verdict == "rejected" and any("peak memory" in r and "6.0% more" in r for r in verdict.reasons)
    assert judge(_result(target_ratio=1.0, memory_ratio=0.7), Guardrails(target="memory")).verdict == "accepted"


def test_cumulative_drift_against_the_baseline_is_a_regression_when_the_interval_says_so():
    key = ("full", "2048x1024", "float32")
    chain = {key: 1.03}  # the current best is already 3% slower than the baseline
    # 1.03 [1.025, 1.035]: even its low end, times 1.03, is over 5% slower than the baseline.
    verdict = judge(_result(target_ratio=0.8, intervals={key: (1.03, 1.025, 1.035)}), RULES, chain)
    assert verdict.verdict == "rejected"
    assert any(r.startswith("full 2048x1024 float32: 0.94x (slower) [0.94x, 0.95x] over the baseline through the "
                            "accepted variants (this trial's 0.97x (slower) [0.97x, 0.98x] times the accepted "
                            "variants' 0.97x (slower)), wholly below the 0.952x")
               for r in verdict.reasons), verdict.reasons
    # 1.03 [1.01, 1.05]: 6.1% at the point, 4.0% at the low end: possibly, so re-measured, never accepted.
    verdict = judge(_result(target_ratio=0.8, intervals={key: (1.03, 1.01, 1.05)}), RULES, chain)
    assert verdict.verdict == "inconclusive"
    assert verdict.reasons[0].startswith("full 2048x1024 float32: possibly slower than allowed: 0.94x (slower) "
                                         "[0.92x, 0.96x] over the baseline through the accepted variants") \
        and verdict.reasons[0].endswith("re-measure")
    # Within the step's limit, and its interval contains it, but wholly over the chain's: rejected.
    verdict = judge(_result(target_ratio=0.8, intervals={key: (1.06, 1.04, 1.08)}), RULES, {key: 1.03})
    assert verdict.verdict == "rejected" and "through the accepted variants" in verdict.reasons[0]
    # No drift to speak of: accepted.
    assert judge(_result(target_ratio=0.8, intervals={key: (1.0, 0.99, 1.01)}), RULES, chain).verdict == "accepted"


def test_noise_larger_than_the_effect_is_inconclusive_never_accepted():
    verdict = judge(_result(target_ratio=0.99, half_width=0.03), RULES)
    assert verdict.verdict == "inconclusive" and "re-measure" in verdict.reasons[0]


def test_a_variant_identical_to_the_best_is_never_accepted():
    result = _result(target_ratio=0.5)
    result.variant.sha256 = result.against.sha256
    verdict = judge(result, RULES)
    assert verdict.verdict == "rejected" and "identical" in verdict.reasons[0]


def test_a_variant_that_fails_correctness_is_rejected_before_it_is_timed():
    result = TrialResult.model_validate({
        "kernel": "fused_add_rms_norm", "status": "failed-correctness",
        "reason": "the correctness gate failed: 13x100 float16 dW", "variant": {"sha256": "new"},
        "against": {"sha256": "best"}})
    verdict = judge(result, RULES)
    assert verdict.verdict == "rejected" and "correctness" in verdict.reasons[0]


@pytest.mark.parametrize("kernel", ["relu_squared", "fused_add_rms_norm"])
@pytest.mark.parametrize("target", ["forward", "backward", "full"])
def test_real_a_a_trials_from_the_h200_are_never_accepted(kernel, target):
    """The baseline against itself, recorded on the GPU: even posing as a different variant, never accepted."""
    a_a = next(t for t in load_trials(kernel, ROOT / "notebooks" / "nvidia-h200") if t.name == "a-a")
    assert judge(a_a, Guardrails(target=target)).verdict == "rejected"  # identical source
    posing = copy.deepcopy(a_a)
    posing.variant.sha256 = "0" * 64
    assert judge(posing, Guardrails(target=target)).verdict != "accepted"


def test_chain_ratios_multiply_along_the_accepted_variants():
    total = chain_ratios([_result(target_ratio=0.8), _result(target_ratio=0.5)])
    assert abs(total[("backward", "2048x1024", "float32")] - 0.4) < 1e-12


def test_the_chain_counts_an_accepted_trial_only_when_it_was_measured_against_the_tip():
    """Two candidates of one round accepted against the same best (a loop killed before it reconciled them):
    only the first joins the chain, so the chain's ratios never multiply two measurements of one round."""
    from liger_perf.record.history import accepted_chain

    def trial(n, sha, against, verdict="accepted"):
        return TrialResult.model_validate({
            "kernel": "k", "trial_id": n, "variant": {"sha256": sha}, "status": "complete",
            "against": {"sha256": against} if against else None,
            "judged": Verdict(verdict=verdict) if verdict else None})

    trials = [trial(0, "base", None, None), trial(1, "a", "base"), trial(2, "b", "base"), trial(3, "c", "a"),
              trial(4, "d", "b")]
    baseline, chain = accepted_chain(trials, "base")
    assert baseline.trial_id == 0 and [t.trial_id for t in chain] == [1, 3]


def test_a_ratio_without_its_interval_is_inconclusive_never_a_crash():
    """One repetition measures no interval (stored as null): the judge neither accepts nor crashes."""
    result = _result(target_ratio=0.5)
    for row in result.timing_rows("candidate"):
        row.ci_low = row.ci_high = None
    verdict = judge(result, RULES)
    assert verdict.verdict == "inconclusive" and abs(verdict.target_ratio - 0.5) < 1e-9


def _recorded_accepted_trial() -> TrialResult:
    """A real H200 trial that the loop accepted: candidate and current best, timed and profiled."""
    from pathlib import Path

    trials = load_trials("fused_add_rms_norm", Path(__file__).resolve().parent.parent / "notebooks" / "nvidia-h200")
    return next(t for t in trials if t.verdict == "accepted" and t.ncu and t.ncu.status == "ok")


def test_timings_that_disagree_with_the_ncu_kernel_durations_are_suspicious_and_never_accepted():
    from liger_perf.judge import suspicions
    from liger_perf.record.schema import NcuLaunch

    trial = _recorded_accepted_trial()
    rails = Guardrails(target="backward")
    assert suspicions(trial) == [] and judge(trial, rails).verdict == "accepted"
    # A timer patched at run time: the candidate's times a tenth of what its kernels took.
    fast = trial.model_copy(deep=True)
    for row in fast.timing_rows("candidate"):
        row.median_ms /= 10
    verdict = judge(fast, rails)
    assert verdict.verdict == "rejected" and "suspicious" in verdict.reasons[0] and verdict.suspicious
    assert verdict.record("backward", "rules").suspicious == verdict.suspicious
    # The current best slowed by the candidate: its times three times its own kernels' durations.
    slowed = trial.model_copy(deep=True)
    for row in slowed.timing_rows("against"):
        row.median_ms *= 3
    slowed.ncu.launches += [NcuLaunch(**{**launch.model_dump(by_alias=True), "contender": "against"},
                                      ) for launch in trial.launches()]
    assert any(s.startswith("against ") for s in suspicions(slowed)) and judge(slowed, rails).verdict == "rejected"
    # The current best's durations could not be profiled: nothing holds its times, so nothing is accepted.
    unprofiled = trial.model_copy(deep=True)
    unprofiled.ncu.against_durations = "ncu exited with 1"
    assert judge(unprofiled, rails).verdict == "rejected"
    assert "could not be profiled (ncu exited with 1)" in judge(unprofiled, rails).reasons[0]


def test_a_timed_call_whose_outputs_were_wrong_is_suspicious_and_never_accepted():
    from liger_perf.record.schema import SpotCheck

    trial = _recorded_accepted_trial().model_copy(deep=True)
    trial.timing.spot_checks = [SpotCheck(pass_name="backward", shape="2048x1024", dtype="float32",
                                          contender="candidate", passed=False, reason="dX: 12 elements beyond")]
    verdict = judge(trial, Guardrails(target="backward"))
    assert verdict.verdict == "rejected" and "spot check of a timed call" in verdict.reasons[0]


def _recorded(trial_id):
    """The recorded H200 history of the fused kernel before ``trial_id``, and that trial."""
    trials = load_trials("fused_add_rms_norm", ROOT / "notebooks" / "nvidia-h200")
    return [t for t in trials if t.trial_id < trial_id], next(t for t in trials if t.trial_id == trial_id)


def _chain_baseline_sha(history):
    """The baseline of the recorded chain 0036-0045: trial 0035's (the kernel's baseline has changed since)."""
    return next(t for t in history if t.trial_id == 35).variant.sha256


def test_a_candidate_that_slows_the_current_best_is_suspicious_by_the_best_s_own_history():
    """Trial 0024 (the carry-over, accepted) timed its best, the baseline of 0023, as 0023 had. Its best's times
    made 1.9x, as a candidate patching torch for the whole process made them on the H200: suspicious, by the
    best's medians on the same stack and by the events/NCU bound this case's history supports, where the fixed
    bound of 2.0 let a ratio of 2.05 through."""
    from liger_perf.judge import NCU_AGREEMENT, best_slowdown, ncu_bounds, suspicions

    history, trial = _recorded(24)
    assert suspicions(trial, history) == []  # as recorded: nothing wrong
    forged = copy.deepcopy(trial)
    for row in forged.timing.rows:
        if row.contender == "against" and row.median_ms:
            row.median_ms *= 1.9
    found = best_slowdown(forged, history)
    assert found and "its times in trial 0023 on this stack" in found[0] and "ran 1.8" in found[0]
    bounds = ncu_bounds(history)
    assert bounds and all(upper < NCU_AGREEMENT[1] for upper in bounds.values())
    reasons = suspicions(forged, history)
    assert any("against backward" in r and "the bound the history supports" in r for r in reasons)
    assert not any("bound the history" in r for r in suspicions(forged, []))  # without it: only the fixed bound
    # Another stack is no basis: the best's times there were never recorded.
    other = copy.deepcopy(forged)
    other.fingerprint.torch = "9.9"
    assert best_slowdown(other, history) == []


def test_the_target_reads_as_a_speedup_with_its_interval_inverted_never_as_a_ratio_or_a_percentage():
    """A new user read 'backward: geomean ratio 2.821 [1.916, 3.082] (-182.1% vs the current best)' beside
    '160.4% slower', and a trial the history listed as 1.569x as '+36.3%': one wording everywhere now."""
    from liger_perf.core.wording import speedup

    verdict = judge(_result(target_ratio=0.8, half_width=0.02), RULES)
    assert verdict.reasons[0] == ("backward: 1.25x (faster) [1.22x, 1.28x] over the current best (geomean over the "
                                  "suite)")
    slower = judge(_result(target_ratio=2.821, intervals={("backward", s, d): (2.821, 1.916, 3.082)
                                                          for s in SHAPES for d in DTYPES}), RULES)
    assert slower.verdict == "rejected"
    assert any(r.startswith("backward: 0.35x (slower) [0.32x, 0.52x] over the current best") for r in slower.reasons)
    assert not any("%" in r and "max_" not in r for r in slower.reasons + verdict.reasons), slower.reasons
    assert speedup(0.637, 0.613, 0.662) == "1.57x (faster) [1.51x, 1.63x]"
    assert speedup(1.0) == "1.00x (no change)" and speedup(0.999, float("nan"), float("nan")) == "1.00x (no change)"
    assert speedup(None) == speedup(float("nan")) == "-"
    assert speedup(2.0, no_interval="one step: no interval") == "0.50x (slower), one step: no interval"


def test_the_history_table_and_the_report_state_the_speedup_in_the_judges_words():
    """A trial the judge found 1.57x faster reads 1.57x (faster), with the same interval, in `history` and in
    report.md (the history printed 1.569x where the judge said '+36.3%')."""
    from rich.console import Console

    from liger_perf.cli import history_table
    from liger_perf.report import trials_table

    cases = {("backward", s, d): (0.637, 0.613, 0.662) for s in SHAPES for d in DTYPES}
    result = _result(intervals=cases).model_copy(update={"trial_id": 7, "name": "wider-tiles"})
    verdict = judge(result, RULES)
    stated = "1.57x (faster) [1.51x, 1.63x]"
    assert verdict.verdict == "accepted" and verdict.reasons[0].startswith(f"backward: {stated} over the current best")
    trial = result.model_copy(update={"judged": verdict.record("backward", "rules")})
    console = Console(width=160, record=True)
    console.print(history_table("fused_add_rms_norm", "nvidia-h200", [trial]))
    row = [line.split("│")[4].strip() for line in console.export_text().splitlines() if line.count("│") > 3]
    assert row[:2] == ["1.57x (faster)", "[1.51x, 1.63x]"], row
    table = trials_table([trial], ["forward", "backward", "full"])
    assert table.loc[0, "backward speedup"] == stated
    assert table.loc[0, "forward speedup"] == "1.00x (no change) [0.98x, 1.02x]"


def test_a_move_of_one_dispatch_bucket_is_judged_on_that_bucket_and_guarded_everywhere():
    """A change to one bucket's entry (``knob@bucket``) is judged on that bucket's shapes alone: elsewhere it runs
    the same code, and ratios of 1 there would dilute the gain. A regression at any shape still rejects it."""
    guardrails = Guardrails(target="backward")
    # Faster only at 2048x8192 bfloat16 (bucket 8192x2); the same everywhere else.
    faster = {("backward", s, d): 1.0 for s in SHAPES for d in DTYPES}
    faster[("backward", "2048x8192", "bfloat16")] = 0.9
    result = _result(overrides=faster, half_width=0.03)
    suite_wide = judge(result, guardrails)
    assert suite_wide.verdict == "inconclusive"  # 0.9 at one of four shapes: the suite's interval holds 1
    result.changes = {"bwd_tile_elements@8192x2": 16384}
    judged = judge(result, guardrails)
    assert judged.verdict == "accepted" and math.isclose(judged.target_ratio, 0.9)
    assert "bucket 8192x2" in judged.reasons[0]
    # The history's table says over what the speedup was taken: the bucket, not the suite.
    from rich.console import Console

    from liger_perf.cli import history_table

    console = Console(width=160, record=True)
    console.print(history_table("fused_add_rms_norm", "nvidia-h200", [
        result.model_copy(update={"trial_id": 8, "judged": judged.record("backward", "rules")}),
        result.model_copy(update={"trial_id": 9, "changes": None,
                                  "judged": suite_wide.record("backward", "rules")})]))
    cells = [line.split("│")[4].strip() for line in console.export_text().splitlines() if line.count("│") > 3]
    assert cells[0] == "1.11x (faster)" and cells[1].startswith("[") and cells[2] == "in 8192x2", cells
    assert "in " not in " ".join(cells[3:]), cells  # a suite-wide verdict names no bucket
    # What rounds and chains compare: the gain over the whole suite (one shape of four 0.9x).
    assert math.isclose(judged.suite_ratio, 0.9 ** 0.25)
    assert math.isclose(judged.record("backward", "rules").suite_gain, 1 - 0.9 ** 0.25)
    assert judge(_result(half_width=0.01), guardrails).record("backward", "rules").suite_gain is None
    # Slower beyond the guardrail at a shape of another bucket: rejected, whatever the bucket gained.
    slower = dict(faster)
    slower[("forward", "2048x1024", "float32")] = 1.2
    result = _result(overrides=slower, half_width=0.03)
    result.changes = {"bwd_tile_elements@8192x2": 16384}
    assert judge(result, guardrails).verdict == "rejected"
    # A bucket the trial timed no shape of: nothing to judge it on.
    result = _result(half_width=0.01)
    result.changes = {"bwd_tile_elements@65536x4": 16384}
    judged = judge(result, guardrails)
    assert judged.verdict == "rejected" and "in bucket 65536x4" in judged.reasons[0]
    # A change to a default beside the bucket's: every shape changed, so the whole suite is the target.
    result = _result(overrides=faster, half_width=0.03)
    result.changes = {"bwd_tile_elements@8192x2": 16384, "num_warps": 8}
    assert judge(result, guardrails).verdict == "inconclusive"


def test_the_report_shows_the_best_s_dispatch_table_with_the_trial_that_set_each_entry():
    from liger_perf.kernel.registry import baseline_path
    from liger_perf.kernel.variants import with_knobs
    from liger_perf.report import dispatch_table

    from made_trials import make_trial

    base = baseline_path("fused_add_rms_norm").read_text()
    first = with_knobs(base, {"num_warps@8192x2": 8})
    second = with_knobs(first, {"bwd_tile_elements@512x4": 2048})
    third = with_knobs(second, {"num_warps@8192x2": 16})
    chain = [make_trial(trial_id=i, name=f"step-{i}", variant={"sha256": str(i), "source": s})
             for i, s in enumerate((first, second, third), start=3)]
    table = dispatch_table(chain)
    assert table.to_dict("records") == [  # in width order, as the table is written
        {"bucket": "512x4", "columns": "257-512", "element bytes": "4", "knob": "bwd_tile_elements", "value": 2048,
         "set by": "trial 0004 step-4"},
        {"bucket": "8192x2", "columns": "4097-8192", "element bytes": "2", "knob": "num_warps", "value": 16,
         "set by": "trial 0005 step-5"}]
    assert dispatch_table([]).empty
    # A baseline's own entries are credited to it, not to the first accepted trial.
    rooted = make_trial(trial_id=0, name="baseline", variant={"sha256": "b", "source": first})
    table = dispatch_table([make_trial(trial_id=7, name="step-7", variant={"sha256": "7", "source": second})], rooted)
    assert list(table["set by"]) == ["trial 0007 step-7", "the baseline"]
    assert list(dispatch_table([], rooted)["set by"]) == ["the baseline"]


def test_an_entry_carried_over_to_a_new_baseline_is_credited_to_the_trial_that_set_it_there():
    """On the H200 every entry of the best's table read "set by trial 0087 carry-over-0085": a carry-over moves
    every tuned entry at once. The report follows each carried entry back to the trial that set it, through every
    carry-over since (a carry-over names the best it carries: ``carry-over-0005``); a move of a step's own, and a
    step that only looks like a carry-over, keep their own credit."""
    from liger_perf.kernel.registry import baseline_path
    from liger_perf.kernel.variants import source_hash, with_knobs
    from liger_perf.report import dispatch_table

    from made_trials import make_trial

    def trial(trial_id, source, against=None, verdict=None, changes=None, name=None):
        return make_trial(verdict=verdict, trial_id=trial_id, name=name or f"step-{trial_id}", changes=changes,
                          variant={"sha256": source_hash(source), "source": source},
                          against={"sha256": source_hash(against)} if against else None)

    move = {"num_warps@8192x2": 8}
    first_base = baseline_path("fused_add_rms_norm").read_text()
    second_base = first_base + "\n# the baseline changed\n"
    third_base = second_base + "# and again\n"
    carried_again = with_knobs(third_base, move)
    own_move = with_knobs(carried_again, {"bwd_tile_elements@512x4": 2048})
    history = [trial(0, first_base), trial(1, with_knobs(first_base, move), first_base, "accepted", move),
               trial(2, second_base),
               trial(3, with_knobs(second_base, move), second_base, "accepted", move, "carry-over-0001"),
               trial(4, third_base), trial(5, carried_again, third_base, "accepted", move, "carry-over-0003-remeasure"),
               trial(6, own_move, carried_again, "accepted", {"bwd_tile_elements@512x4": 2048})]
    table = dispatch_table(history[5:], history[4], history)
    assert dict(zip(table["knob"], table["set by"])) == {
        "bwd_tile_elements": "trial 0006 step-6",
        "num_warps": "trial 0001 step-1, carried over by trials 0003 and 0005"}
    assert list(dispatch_table(history[5:], history[4])["set by"]) == [  # without the history: none followed
        "trial 0006 step-6", "trial 0005 carry-over-0003-remeasure"]

    def credit(step):
        return list(dispatch_table([step], history[4], [*history[:5], step])["set by"])

    # A step not named a carry-over that happens to make the earlier best's move made it itself (the carry-over
    # rejected, say, and the same move proposed again).
    assert credit(trial(5, carried_again, third_base, "accepted", move)) == ["trial 0005 step-5"]
    assert credit(trial(5, carried_again, third_base, "accepted", move, "0003-again")) == ["trial 0005 0003-again"]
    # A carry-over whose source runs another value than the best it names keeps what it runs as its own.
    other = with_knobs(third_base, {"num_warps@8192x2": 16})
    assert credit(trial(5, other, third_base, "accepted", move, "carry-over-0003")) == [
        "trial 0005 carry-over-0003"]
    # A name that points at a later trial, or at no accepted one, is no carry-over: nothing to follow.
    assert credit(trial(5, carried_again, third_base, "accepted", move, "carry-over-0009")) == [
        "trial 0005 carry-over-0009"]
    assert credit(trial(5, carried_again, third_base, "accepted", move, "carry-over-0002")) == [
        "trial 0005 carry-over-0002"]
    # Nor one that names a later trial of its own chain: followed, it would lead back to itself, without end.
    loop = [trial(5, carried_again, third_base, "accepted", move, "carry-over-0006"), history[6]]
    table = dispatch_table(loop, history[4], [*history[:5], *loop])
    assert list(table["set by"]) == ["trial 0006 step-6", "trial 0005 carry-over-0006"]


def test_noise_where_the_candidate_ran_the_best_s_code_is_not_a_reason_to_re_measure():
    """Trials 0040 and 0041 on the H200 (``bwd_dw_order@16384x4``, 1.13x in its bucket) were held up by the full
    pass at 1024x896 (a 25 us call bound by the host: [0.32x, 2.59x] and [0.29x, 2.73x]), a case outside the
    move's bucket where both contenders ran the same kernels. There a point beyond the limit is the run's noise;
    a regression for certain still rejects. Only a move whose source is the best's with exactly its changes."""
    from liger_perf.judge import same_code_cases
    from liger_perf.kernel.registry import baseline_path
    from liger_perf.kernel.variants import source_hash, with_knobs

    history, recorded = _recorded(41)
    same = same_code_cases(recorded, history)
    assert ("full", "1024x896", "float16") in same and ("full", "1024x896", "bfloat16") in same
    in_bucket = [(pass_name, shape) for pass_name, shape, dtype in same
                 if shape in ("4096x16384", "5461x12288") and dtype == "float32"]
    assert in_bucket and all(pass_name == "forward" for pass_name, _ in in_bucket)  # a backward knob
    judged = judge(recorded, RULES, None, history)
    assert not any("possibly slower than allowed" in r for r in judged.reasons), judged.reasons
    assert "2 cases where the candidate ran the current best's code" in judged.reasons[0]
    assert judged.verdict == "inconclusive" and "full correctness gate" in judged.reasons[-1]  # 0041's gate was quick
    # Code changed beyond the recorded changes: no case ran the best's code for certain.
    forged = copy.deepcopy(recorded)
    forged.variant.source += "\n# and something else\n"
    assert same_code_cases(forged, history) == set()
    assert judge(forged, RULES, None, [t for t in history]).verdict in ("inconclusive", "rejected")
    assert any("possibly slower than allowed" in r for r in judge(forged, RULES, None, history).reasons)

    # The synthetic trial: faster in bucket 8192x2, possibly slower at a case of another bucket.
    base = baseline_path("fused_add_rms_norm").read_text()
    changes = {"bwd_tile_elements@8192x2": 16384}
    faster = {("backward", "2048x8192", "bfloat16"): (0.9, 0.88, 0.92),
              ("full", "2048x1024", "float32"): (1.08, 0.5, 1.9)}
    result = _result(target_ratio=1.0, intervals=faster)
    result.changes = changes
    assert judge(result, RULES).verdict == "inconclusive"  # no sources: the noise is not known to be noise
    result.against.sha256, result.against.source = source_hash(base), base
    result.variant.source = with_knobs(base, changes)
    judged = judge(result, RULES)
    assert judged.verdict == "accepted", judged.reasons
    assert "full 2048x1024 float32" in judged.reasons[0] and "not re-measured" in judged.reasons[0]
    # Slower for certain at a case it did not change: the candidate slowed the best's code. Rejected.
    result = _result(target_ratio=1.0, intervals={**faster, ("full", "2048x1024", "float32"): (1.3, 1.2, 1.4)})
    result.changes, result.against.source, result.variant.source = changes, base, with_knobs(base, changes)
    assert judge(result, RULES).verdict == "rejected"
    # The best's source read back from the module it ran against, where its sha256 is the recorded one.
    result = _result(target_ratio=1.0, intervals=faster)
    result.changes, result.variant.source = changes, with_knobs(base, changes)
    result.against.path, result.against.sha256 = str(baseline_path("fused_add_rms_norm")), source_hash(base)
    assert judge(result, RULES).verdict == "accepted"
    result.against.sha256 = "another"
    assert judge(result, RULES).verdict == "inconclusive"
    # A best whose code is not the baseline's but for its knobs may look its table up by another key: no case is
    # known to run its code.
    rewritten = base + "\n\ndef _unused():\n    return None\n"
    result = _result(target_ratio=1.0, intervals=faster)
    result.changes, result.variant.source = changes, with_knobs(rewritten, changes)
    result.against.source, result.against.sha256 = rewritten, source_hash(rewritten)
    assert judge(result, RULES).verdict == "inconclusive"
    result.against.source = base  # a recorded source whose sha256 is not the recorded one is not read
    assert judge(result, RULES).verdict == "inconclusive"


def test_a_pass_the_move_leaves_as_it_was_counts_as_the_best_s_code_inside_the_bucket_too():
    """Trial 0044 on the H200 (``bwd_dw_order@8192x2``, 1.10x in its bucket, gate passed) was held up by its
    forward pass at 2047x5120 bfloat16, inside the bucket: 0.96x [0.92x, 1.03x] times the accepted chain's 0.96x,
    two runs' noise on a forward kernel that no backward knob changes. By the kernel's launch model the move
    leaves that pass as it was: noise, not a re-measure. A knob that changes the forward is still re-measured."""
    from liger_perf.judge import same_code_cases
    from liger_perf.kernel.registry import baseline_path
    from liger_perf.kernel.variants import source_hash, with_knobs
    from liger_perf.record.history import accepted_chain, chain_ratios

    history, recorded = _recorded(44)
    base_sha = _chain_baseline_sha(history)
    chain = chain_ratios(accepted_chain(history, base_sha)[1])
    same = same_code_cases(recorded, history)
    assert ("forward", "2047x5120", "bfloat16") in same
    assert ("backward", "2047x5120", "bfloat16") not in same and ("full", "2047x5120", "bfloat16") not in same
    judged = judge(recorded, RULES, chain, history)
    assert judged.verdict == "accepted", judged.reasons
    assert "forward 2047x5120 bfloat16" in judged.reasons[0] and "not re-measured" in judged.reasons[0]

    base = baseline_path("fused_add_rms_norm").read_text()
    noisy_forward = {("backward", "2048x8192", "bfloat16"): (0.9, 0.88, 0.92),
                     ("forward", "2048x8192", "bfloat16"): (1.08, 0.9, 1.3)}
    for changes, verdict in (({"bwd_tile_elements@8192x2": 16384}, "accepted"),
                             ({"bwd_tile_elements@8192x2": 16384, "fwd_rows_per_program@8192x2": 2}, "inconclusive")):
        result = _result(target_ratio=1.0, intervals=noisy_forward)
        result.changes, result.variant.source = changes, with_knobs(base, changes)
        result.against.sha256, result.against.source = source_hash(base), base
        assert judge(result, RULES).verdict == verdict, (changes, judge(result, RULES).reasons)


def test_the_cumulative_guardrail_counts_no_noise_from_steps_that_left_a_case_s_code_as_it_was():
    """Before 0044 the accepted chain was 0036 (a carry-over of defaults), 0039 and 0042 (backward knobs in
    buckets 16384x2 and 16384x4). At the forward of 2047x5120 bfloat16 only 0036 changed the code; the other
    two steps' ratios there are noise, and their product made the chain 0.96x (slower) where 0036 alone measured
    0.99x. ``drift_ratios`` counts those steps as 1; a step that changed the case keeps its ratio."""
    from liger_perf.judge import drift_ratios
    from liger_perf.record.history import accepted_chain, measured_ratios

    history, _ = _recorded(44)
    chain = accepted_chain(history, _chain_baseline_sha(history))[1]
    assert [t.trial_id for t in chain] == [36, 39, 42]
    forward, backward = ("forward", "2047x5120", "bfloat16"), ("backward", "4096x16384", "float32")
    drift, raw = drift_ratios(chain, history), chain_ratios(chain)
    assert drift[forward] == pytest.approx(measured_ratios(chain[0])[0][forward][0])
    assert raw[forward] > 1.035 > drift[forward]  # the chain's product, 0.96x (slower), is two steps' noise
    # 4096x16384 float32 is in 0042's bucket, and its backward is what 0042 changed: 0036 and 0042 count there,
    # 0039 (a bucket of 2-byte elements) does not.
    step = [measured_ratios(t)[0][backward][0] for t in chain]
    assert drift[backward] == pytest.approx(step[0] * step[2]) and raw[backward] == pytest.approx(math.prod(step))
    assert set(drift) == set(raw)
    assert drift_ratios([], history) == {}
    # A row label no bucket can read (a hand-edited notebook) is not known to have run the best's code: its step
    # counts there, and the rest of the chain is judged as before.
    garbled = copy.deepcopy(chain)
    for row in garbled[1].timing.rows:
        if (row.pass_name, row.shape, row.dtype) == forward:
            row.shape = "2047x5120x"
    assert drift_ratios(garbled, history)[backward] == pytest.approx(drift[backward])


def test_a_move_timed_on_its_bucket_alone_is_judged_as_if_every_shape_had_been_timed():
    """Trial 0085 on the H200 (``num_stages@4096x2``: 1.28x over its bucket) spent 141 of its 352 s timing 171
    cases, of which 30 lie in bucket 4096x2; at the other 141 both contenders launched the same kernels. Timed on
    its bucket alone (the loop's ``TrialRequest.buckets``), it gets the same verdict on the same interval; the
    suite-wide gain, the cumulative guardrail and the best's rows over the suite count the cases left out as the
    best's code; and a trial whose confinement its sources do not bear out is never judged."""
    from liger_perf.judge import drift_ratios
    from liger_perf.loop import floor_reached
    from liger_perf.record.history import best_timing_rows, measured_ratios

    history, whole = _recorded(85)
    confined = confined_copy(whole, {"4096x2"})
    assert len(confined.timing_rows("candidate")) == 30 and len(confined.left_out_keys) == 4 * 47
    as_timed, alone = judge(whole, RULES, None, history), judge(confined, RULES, None, history)
    assert as_timed.verdict == alone.verdict == "accepted", alone.reasons
    assert alone.target_ratio == as_timed.target_ratio and alone.target_interval == as_timed.target_interval
    # Over the whole suite: the bucket's measured ratios, and 1 at each backward case left out.
    inside = [ratio for (pass_name, _, _), (ratio, _, _) in measured_ratios(confined)[0].items()
              if pass_name == "backward"]
    assert alone.suite_ratio == pytest.approx(math.prod(inside) ** (1 / 57)) and len(inside) == 10
    assert alone.suite_ratio == pytest.approx(as_timed.suite_ratio, abs=0.002)
    # The cumulative guardrail keeps every case: 1 where the step left it out.
    drift = drift_ratios([confined], history)
    assert set(drift) == set(drift_ratios([whole], history))
    assert all(drift[key] == 1.0 for key in confined.left_out_keys)
    # The best's rows over the suite: its own 30, the rest from the trial of the best it ran against (0078).
    later = [*history, confined]
    rows = best_timing_rows(confined, later)
    earlier = {row.key: row for row in next(t for t in history if t.trial_id == 78).timing_rows("candidate")}
    assert len(rows) == 171 and {row.key for row in rows} == {row.key for row in whole.timing_rows("candidate")}
    assert all(row is earlier[row.key] for row in rows if row.key in confined.left_out_keys)
    lowest_inside = min(row.bandwidth_fraction for row in confined.timing_rows("candidate", "backward"))
    assert floor_reached(confined, "backward", lowest_inside, [])  # its own rows alone would say so...
    assert not floor_reached(confined, "backward", lowest_inside, later)  # ...the suite's do not
    # The report's table of trials says over what each speedup was measured.
    from liger_perf.report import trials_table

    table = trials_table([whole, confined], ["backward"])
    assert list(table["backward speedup"].str.endswith(" over bucket 4096x2 alone")) == [False, True]
    from liger_perf.propose.llm import _ratios  # and so does the history a language model is shown

    assert "over bucket 4096x2 alone" in _ratios(confined) and "alone" not in _ratios(whole)
    # Its source is not the best's with that bucket's entries changed alone: elsewhere it may not run the best's
    # code, and nothing measured it there.
    forged = copy.deepcopy(confined)
    forged.variant.source += "\n# and something else\n"
    judged = judge(forged, RULES, None, history)
    assert judged.verdict == "rejected" and "unjudgeable" in judged.reasons[0]
    assert "run it over the whole suite" in judged.reasons[0]
    # A case of the move's own bucket left out: rejected, that case named.
    elsewhere = confined_copy(whole, {"2048x2"})
    judged = judge(elsewhere, RULES, None, history)
    assert judged.verdict == "rejected" and "which its move changes" in judged.reasons[0], judged.reasons
    assert "of bucket 4096x2" in judged.reasons[0]


def test_the_drift_falls_back_to_the_measured_ratios_with_a_warning_where_a_best_s_source_is_lost(capsys):
    """Without the source of the best a step ran against (no trial, record or file holds it), nothing is known
    to have run that best's code: the step's every ratio counts, and the user is told once."""
    from liger_perf.judge import drift_ratios
    from liger_perf.record.history import accepted_chain, measured_ratios

    history, _ = _recorded(44)
    chain = copy.deepcopy(accepted_chain(history, _chain_baseline_sha(history))[1])
    lost = copy.deepcopy(chain[1])  # 0039, against 0036
    lost.against.source, lost.against.path = "", None
    earlier = [t for t in history if t.variant.sha256 != lost.against.sha256]
    forward = ("forward", "2047x5120", "bfloat16")
    assert drift_ratios([chain[0], lost], earlier)[forward] == pytest.approx(
        measured_ratios(chain[0])[0][forward][0] * measured_ratios(lost)[0][forward][0])
    assert "trial 0039: no record holds the source of the best" in capsys.readouterr().err


def test_a_move_that_changes_nothing_its_bucket_runs_is_rejected_whatever_its_timing_says():
    """A chunk size in a bucket that walks whole rows, or backward threads where the warps decide: the kernel
    launches the best's code at every case of the bucket, so a measured 1.03x is the run's noise. The rules
    proposer never makes such a move (``_changes_nothing``); an LLM proposer may, and it must not be accepted."""
    from liger_perf.kernel.registry import baseline_path
    from liger_perf.kernel.variants import source_hash, with_knobs

    base = baseline_path("fused_add_rms_norm").read_text()
    for changes, verdict in (({"BLOCK_SIZE@8192x2": 4096}, "rejected"),
                             ({"bwd_elements_per_thread@8192x2": 8, "bwd_num_warps@8192x2": 16}, "rejected"),
                             ({"bwd_dw_order@8192x2": "before_dx"}, "accepted")):
        result = _result(target_ratio=0.97, half_width=0.02)
        result.changes, result.variant.source = changes, with_knobs(base, changes)
        result.against.sha256, result.against.source = source_hash(base), base
        judged = judge(result, RULES)
        assert judged.verdict == verdict, (changes, judged.reasons)
        if verdict == "rejected":
            assert "changes nothing backward runs in bucket 8192x2" in judged.reasons[0]


def test_one_slowed_case_of_the_best_is_suspicious_only_where_the_candidate_was_measured_faster():
    """0041's best ran its full pass 2.49x its 0040 time at 1024x896 float16 and 1.59x at 8192x2304 bfloat16,
    but the candidate was no faster there (1.08x the best's time; 0.97x [0.56x, 1.61x]): the run slowed both.
    A slowed best flatters a candidate only where the candidate is measured faster than it."""
    from liger_perf.judge import best_slowdown

    history, recorded = _recorded(41)
    assert best_slowdown(recorded, history) == []
    flattered = copy.deepcopy(recorded)
    for row in flattered.timing.rows:
        if row.contender == "candidate" and (row.pass_name, row.shape, row.dtype) == ("full", "1024x896", "float16"):
            row.ratio, row.ci_low, row.ci_high = 0.45, 0.4, 0.5
    found = best_slowdown(flattered, history)
    assert found and "1024x896 float16: 2.49x" in found[0]
    judged = judge(flattered, RULES, None, history)
    assert judged.verdict == "rejected" and judged.recheck  # of the best's measurements: one re-check owed
    # However wide the candidate's interval there: its point did not rise with the best's time.
    for row in flattered.timing.rows:
        if row.contender == "candidate" and (row.pass_name, row.shape, row.dtype) == ("full", "1024x896", "float16"):
            row.ci_low, row.ci_high = 0.2, 1.2
    assert best_slowdown(flattered, history)
    # The candidate's own timed outputs wrong: suspicious of the candidate, no re-check.
    from liger_perf.record.schema import SpotCheck
    wrong = copy.deepcopy(recorded)
    wrong.timing.spot_checks.append(SpotCheck.model_validate(
        {"pass": "backward", "shape": "4096x16384", "dtype": "float32", "contender": "candidate", "passed": False,
         "reason": "dX differs"}))
    judged = judge(wrong, RULES, None, history)
    assert judged.verdict == "rejected" and not judged.recheck and not judged.record("backward", "rules").recheck


def test_only_the_loop_s_complete_trials_of_the_baseline_file_stand_for_a_baseline():
    """A best is known to look its table up by ``dispatch_bucket``'s key when it is a baseline's code but for
    knobs: today's ``baseline.py``, or one the history's baseline trials ran. A hand-run trial of another file (a
    model's rewrite, say, that applies every entry everywhere) is no baseline, nor is a failed one."""
    from liger_perf.judge import _dispatches_as_the_baseline
    from liger_perf.kernel.registry import baseline_path
    from liger_perf.kernel.variants import with_knobs

    from made_trials import make_trial

    path = baseline_path("fused_add_rms_norm")
    rewrite = path.read_text().replace("{**KNOBS, **DISPATCH.get(bucket, {})}",
                                       "{**KNOBS, **{k: v for e in DISPATCH.values() for k, v in e.items()}}")
    assert rewrite != path.read_text()
    best = with_knobs(rewrite, {"bwd_dw_order@2048x2": "before_dx"})
    assert not _dispatches_as_the_baseline("fused_add_rms_norm", best, [])

    def ran(status, file):
        return make_trial(status=status, kind="experiment", variant={"source": rewrite, "path": str(file)})

    assert not _dispatches_as_the_baseline("fused_add_rms_norm", best, [ran("complete", "/tmp/llm.py")])
    assert not _dispatches_as_the_baseline("fused_add_rms_norm", best, [ran("failed-correctness", path)])
    assert _dispatches_as_the_baseline("fused_add_rms_norm", best, [ran("complete", path)])  # an older baseline
    assert _dispatches_as_the_baseline("fused_add_rms_norm", with_knobs(path.read_text(), {"BLOCK_SIZE": 4096}), [])


def test_the_report_gives_the_best_against_the_baseline_as_the_judge_estimates_it(tmp_path, monkeypatch):
    """The recorded chain 0036-0042 on its baseline (0035): at the forward of 2047x5120 bfloat16 only 0036 changed
    the code, so the report's speedup there is 0036's measurement (0.99x), not the chain's product with two
    steps' noise (0.96x), as the judge's cumulative guardrail counts it."""
    from liger_perf import report
    from liger_perf.judge import drift_ratios
    from liger_perf.core.wording import speedup
    from liger_perf.record.history import accepted_chain, chain_ratios

    history, _ = _recorded(44)
    recorded_baseline = tmp_path / "baseline.py"
    recorded_baseline.write_text(next(t for t in history if t.trial_id == 35).variant.source)
    monkeypatch.setattr(report, "baseline_path", lambda kernel: recorded_baseline)
    path = report.write_report("fused_add_rms_norm", history, tmp_path / "out")
    chain = accepted_chain(history, _chain_baseline_sha(history))[1]
    key = ("forward", "2047x5120", "bfloat16")
    judged, product = speedup(drift_ratios(chain, history)[key]), speedup(chain_ratios(chain)[key])
    assert judged != product
    row = next(line for line in path.read_text().splitlines() if "| forward | 2047x5120 | bfloat16 |" in line)
    assert judged in row and product not in row


def test_the_best_s_rows_over_the_suite_take_each_case_from_the_newest_trial_of_the_code_that_ran_it():
    """A case the best's confined timing left out is read from the newest earlier trial of the source it ran
    against that timed the case, whichever (a later trial of another suite times fewer cases: the H200's
    models-tune shapes changed between 0058 and 0059), and one best further back where that source's own trial
    left it out too."""
    from liger_perf.record.history import best_timing_rows

    def trial(n, source, against, timed, left_out=()):
        rows = [{"pass": "backward", "shape": shape, "dtype": "float32", "contender": contender,
                 "bandwidth_fraction": n / 100} for shape in timed for contender in ("candidate", "against")]
        return TrialResult.model_validate({
            "kernel": "fused_add_rms_norm", "trial_id": n, "status": "complete", "passes": ["backward"],
            "variant": {"sha256": source}, "against": {"sha256": against} if against else None,
            "timing": {"rows": rows, "left_out": [{"shape": shape, "dtype": "float32"} for shape in left_out]}})

    first = trial(10, "s1", "s0", ["1x64", "2x64"])
    again = trial(11, "s1", "", ["1x64"])  # the same source timed again, on fewer cases
    second = trial(12, "s2", "s1", ["3x64"], left_out=["1x64", "2x64"])
    third = trial(13, "s3", "s2", ["4x64"], left_out=["1x64", "2x64", "3x64"])
    history = [first, again, second, third]

    def origin(best):
        return {row.shape: round(row.bandwidth_fraction * 100) for row in best_timing_rows(best, history)}

    assert origin(second) == {"3x64": 12, "1x64": 11, "2x64": 10}
    assert origin(third) == {"4x64": 13, "3x64": 12, "1x64": 11, "2x64": 10}
    assert origin(first) == {"1x64": 10, "2x64": 10}  # timed everywhere: its own rows
    assert {row.shape for row in best_timing_rows(second, [second])} == {"3x64"}  # nothing earlier: unknown


def test_the_report_of_a_best_timed_on_its_bucket_alone_reads_the_other_shapes_from_the_best_before(tmp_path):
    """With 0085 timed on bucket 4096x2 alone, the report's speedups per shape (against the baseline and the
    peers) are what they are with 0085 timed everywhere: outside its bucket the judge counts 0085's ratios as 1
    either way. The best's share of the floor there is 0078's measurement of the same code."""
    from liger_perf import report

    history, whole = _recorded(85)

    def rows(last):
        text = report.write_report("fused_add_rms_norm", [*history, last], tmp_path / str(id(last))).read_text()
        start = text.index("## Best against the baseline")
        lines = [line.split(" | ") for line in text[start:text.index("## ", start + 3)].splitlines()
                 if line.startswith("| ") and line.count(" | ") > 4]
        header = lines[0]
        return {tuple(cells[:3]): dict(zip(header, cells)) for cells in lines[2:]}

    as_timed, alone = rows(whole), rows(confined_copy(whole, {"4096x2"}))
    assert len(as_timed) == 171 and alone.keys() == as_timed.keys()
    floor = "best % of bandwidth floor"
    assert all({k: v for k, v in alone[key].items() if k != floor} == {k: v for k, v in as_timed[key].items()
                                                                       if k != floor} for key in as_timed)
    before = next(t for t in history if t.trial_id == 78)
    outside = next(r for r in before.timing_rows("candidate", "backward") if r.shape == "16384x2304"
                   and r.dtype == "float32")
    assert alone[("| backward", "16384x2304", "float32")][floor] == f"{100 * outside.bandwidth_fraction:.1f}"


def test_while_a_changed_baseline_has_no_accepted_trial_the_report_shows_the_best_models_still_get(tmp_path,
                                                                                                    monkeypatch):
    """The recorded chain 0036-0042 on its baseline (0035), then `baseline.py` changes and its baseline trial runs:
    `bench` and `patch` keep 0042, so the report names it, compares it with 0035 (the peers' times too, not the new
    baseline trial's) and diffs it from 0035's source, not from today's."""
    from liger_perf import report
    from liger_perf.kernel.variants import source_hash

    history, _ = _recorded(44)
    changed = next(t for t in history if t.trial_id == 35).variant.source + "\n# changed since\n"
    new_baseline = tmp_path / "baseline.py"
    new_baseline.write_text(changed)
    monkeypatch.setattr(report, "baseline_path", lambda kernel: new_baseline)
    tip = max((t for t in history if t.verdict == "accepted"), key=lambda t: t.trial_id)
    old_baseline = next(t for t in history if t.trial_id == 35)
    # The new baseline trial's peers ran twice as fast: a row that read them would say so.
    rows = [r.model_copy(update={"ratio": r.ratio / 2}) if r.contender not in ("candidate", "against") and r.ratio
            else r for r in old_baseline.timing.rows]
    baseline_trial = old_baseline.model_copy(update={
        "trial_id": 45, "variant": old_baseline.variant.model_copy(update={"sha256": source_hash(changed),
                                                                          "source": changed}),
        "timing": old_baseline.timing.model_copy(update={"rows": rows})})
    assert report.baseline_trials([*history, baseline_trial])[-1] is baseline_trial
    texts = {}
    for name, trials in (("before its trial", history), ("after it", [*history, baseline_trial])):
        text = report.write_report("fused_add_rms_norm", trials, tmp_path / "out").read_text()
        assert f"Best: trial {tip.trial_id:04d}" in text and "on the baseline of trial 0035" in text
        diff = (tmp_path / "out" / "best.diff").read_text()
        assert diff.startswith("--- trial 0035 baseline") and "changed since" not in diff
        texts[name] = next(line for line in text.splitlines() if "| forward | 2047x5120 | bfloat16 |" in line)
    assert texts["before its trial"] == texts["after it"]
    # A trial against the new baseline rejected: it is measured, so the report shows it, not 0042.
    rejected = tip.model_copy(update={"trial_id": 46,
                                      "against": tip.against.model_copy(update={"sha256": source_hash(changed)}),
                                      "judged": tip.judged.model_copy(update={"verdict": "rejected"})})
    text = report.write_report("fused_add_rms_norm", [*history, baseline_trial, rejected],
                               tmp_path / "out").read_text()
    assert "Best: today's `baseline.py` (nothing accepted on it yet)" in text
