"""The staged gate and screening: nothing that failed the quick gate is timed, nothing is accepted without the full
gate, and a screening drops a clearly slower candidate (and a wrong one) without a full trial, saying why."""

from pathlib import Path

import pytest

from liger_perf.judge.guardrails import Guardrails
from liger_perf.judge import Judgement, judge
from liger_perf.kernel.registry import baseline_path
from liger_perf.kernel.variants import source_hash
from liger_perf.run import run_trial
from liger_perf.record.schema import Screening, TrialRequest, TrialResult

from broken_variants import BROKEN, write_broken_variant

RULES = Guardrails().model_dump(mode="json")
FAST = dict(device="interpret", repetitions=2, convergence=False)


def _broken(name: str, folder: Path) -> Path:
    return write_broken_variant(next(b for b in BROKEN if b.name == name), folder)


def _staged(variant: Path, tmp_path: Path, **extra) -> TrialRequest:
    return TrialRequest(kernel="relu_squared", variant=str(variant), against=str(baseline_path("relu_squared")),
                        device="interpret", repetitions=2, convergence=False, ncu=False, gate="staged",
                        guardrails=RULES, artifacts=str(tmp_path / "artifacts"), **extra)


def _run_steps(trial) -> dict:
    for step in ("load_variants", "precompile", "check", "time", "accuracy", "decide", "finish_gate", "profile"):
        getattr(trial, step)()
    return trial.result()


def test_a_candidate_that_fails_the_quick_gate_is_never_timed(tmp_path):
    variant = _broken("backward_without_relu_mask", tmp_path / "v")
    run = run_trial("relu_squared", variant, against=baseline_path("relu_squared"), root=tmp_path, gate="staged",
                    guardrails=RULES, **FAST)
    result = run.result
    assert result.status == "failed-correctness" and "quick correctness gate failed" in result.reason
    assert result.correctness.stage == "quick" and not result.correctness.passed
    assert result.timing is None and "time" not in result.step_seconds
    assert judge(result, Guardrails()).verdict == "rejected"


def test_a_candidate_whose_timing_would_be_accepted_meets_the_full_gate_and_fails_it(tmp_path, monkeypatch):
    """relu_drops_nan passes the quick gate (random values have no NaN) and fails the full one (its non-finite
    case): timed, then, as its timing would be accepted, fully gated, failed, and never accepted."""
    from liger_perf import judge as judge_module
    from liger_perf.run.screening import open_trial

    calls = []

    def accepting(result, guardrails, chain=None):
        calls.append(result.correctness.full_gate)
        return Judgement("accepted", ["backward: geomean ratio 0.5 (made up for the test)"], 0.5, (0.4, 0.6))

    monkeypatch.setattr(judge_module, "judge", accepting)
    request = _staged(_broken("relu_drops_nan", tmp_path / "v"), tmp_path)
    result = TrialResult.model_validate(_run_steps(open_trial(request)))
    assert calls == ["pending"]  # judged once, before the full gate ran
    assert result.timing is not None and result.timing.rows  # it passed the quick gate, so it was timed
    assert result.status == "failed-correctness" and result.correctness.stage == "full"
    assert "NaN" in result.reason and "quick" not in result.reason  # the full gate's non-finite case
    monkeypatch.undo()
    assert judge(result, Guardrails()).verdict == "rejected"


def test_a_candidate_that_would_not_be_accepted_skips_the_full_gate_and_is_never_accepted(tmp_path, monkeypatch):
    from liger_perf import judge as judge_module
    from liger_perf.run.screening import open_trial

    monkeypatch.setattr(judge_module, "judge", lambda result, guardrails, chain=None: Judgement(
        "rejected", ["backward: not better (made up for the test)"], 1.2, (1.1, 1.3)))
    request = _staged(_broken("relu_drops_nan", tmp_path / "v"), tmp_path)
    result = TrialResult.model_validate(_run_steps(open_trial(request)))
    assert result.status == "complete" and result.correctness.stage == "quick"
    assert result.correctness.full_gate.startswith("not run: its timing would be rejected")
    monkeypatch.undo()
    # Whatever its timing says, the loop's judge never accepts a trial without the full gate.
    improved = result.model_copy(update={"device": "cuda", "correctness": result.correctness.model_copy(
        update={"interpreted": False})})
    faster = [row.model_copy(update={"ratio": 0.5, "ci_low": 0.45, "ci_high": 0.55})
              if row.contender == "candidate" else row for row in improved.timing.rows]
    improved = improved.model_copy(update={"timing": improved.timing.model_copy(update={"rows": faster})})
    verdict = judge(improved, Guardrails())
    assert verdict.verdict == "inconclusive" and any("full correctness gate" in r for r in verdict.reasons)


def _slow_copy(folder: Path) -> Path:
    """The baseline with a 30 ms pause in its Python launcher: the same results, clearly slower."""
    source = baseline_path("relu_squared").read_text()
    old = '    return ReluSquaredFunction.apply(X)'
    assert old in source
    path = folder / "slow.py"
    path.write_text(source.replace(old, "    import time\n    time.sleep(0.03)\n" + old))
    return path


def _copy(folder: Path) -> Path:
    path = folder / "copy.py"
    path.write_text(baseline_path("relu_squared").read_text() + "\n# the same code, another file\n")
    return path


def _fails_when_wide(folder: Path) -> Path:
    """The baseline, raising for more than 4000 elements: past every quick-gate case, short of a timed one."""
    source = baseline_path("relu_squared").read_text()
    old = '    return ReluSquaredFunction.apply(X)'
    path = folder / "wide.py"
    path.write_text(source.replace(old, '    if X.numel() > 4000:\n        raise RuntimeError("out of resource: '
                                        'shared memory (made up for the test)")\n' + old))
    return path


def test_screening_drops_a_clearly_slower_and_a_wrong_candidate_and_says_why(tmp_path):
    from liger_perf.record.schema import ScreenEntry
    from liger_perf.run.screening import open_trial

    folder = tmp_path / "v"
    folder.mkdir()
    entries = [ScreenEntry(name="slow", variant=str(_slow_copy(folder)), hypothesis="a pause"),
               ScreenEntry(name="wrong", variant=str(_broken("backward_without_relu_mask", folder))),
               ScreenEntry(name="copy", variant=str(_copy(folder))),
               ScreenEntry(name="wide", variant=str(_fails_when_wide(folder)))]
    request = TrialRequest(kernel="relu_squared", variant=str(baseline_path("relu_squared")), device="interpret",
                           repetitions=6, ncu=False, convergence=False, kind="screening", screen=entries,
                           guardrails={**RULES, "target": "forward"}, artifacts=str(tmp_path / "artifacts"))
    result = TrialResult.model_validate(_run_steps(open_trial(request)))
    rows = {row.name: row for row in result.screening.rows}
    assert result.kind == "screening" and result.status == "complete"
    assert not rows["wrong"].kept and rows["wrong"].reason.startswith("failed the quick gate")
    assert rows["wrong"].ratio is None  # never timed
    assert not rows["slow"].kept and rows["slow"].reason.startswith("clearly slower") and rows["slow"].ci_low > 1
    assert rows["copy"].kept and rows["copy"].ci_low <= 1
    assert rows["wide"].quick_gate == "pass" and not rows["wide"].kept  # one candidate's crash ends only its own
    assert rows["wide"].reason.startswith("crashed at the timed case") and "shared memory" in rows["wide"].reason
    assert result.screening.timing and result.ncu.status == "unavailable"


def _endless():
    from liger_perf.propose import Proposal

    class Endless:
        name = "test"

        def __init__(self):
            self.n = 0

        def propose(self, context):  # p0, p1, ...: each a different source
            self.n += 1
            return Proposal(f"p{self.n - 1}", context.best_source + f"\n# {self.n - 1}\n", "", "")

    return Endless()


def _baseline():
    return TrialResult.model_validate({"kernel": "relu_squared", "status": "complete", "device": "interpret",
                                       "variant": {"sha256": "b", "source": "x"}, "trial_id": 0})


class _ScreeningRunner:
    """Answers a screening request with a canned outcome and records every request: the loop's side of
    screening, without running anything."""

    workers = 1

    def __init__(self, keep: set[str], screening_status: str = "complete"):
        self.keep, self.requests, self.screening_status = keep, [], screening_status

    def mode(self, device):
        return "interpret"

    def run_many(self, requests, store):
        from liger_perf.run import TrialRun
        from liger_perf.kernel.variants import source_hash

        runs = []
        for request in requests:
            self.requests.append(request)
            paths = store.trial_paths(request.kernel, request.trial_id, request.name)
            paths.partial.unlink(missing_ok=True)
            source = Path(request.variant).read_text()
            fields = {"kernel": request.kernel, "trial_id": request.trial_id, "name": request.name,
                      "kind": request.kind, "status": "complete", "device": "interpret",
                      "variant": {"sha256": source_hash(source), "source": source}}
            if request.kind == "screening" and self.screening_status != "complete":
                fields["status"] = self.screening_status
            elif request.kind == "screening":
                fields["screening"] = {"target": "backward", "rows": [
                    {"name": e.name, "sha256": source_hash(Path(e.variant).read_text()),
                     "kept": e.name.split("-", 1)[1] in self.keep, "ratio": 0.9} for e in request.screen]}
            runs.append(TrialRun(paths.notebook, TrialResult.model_validate(fields)))
        return runs


def test_the_loop_gives_a_full_trial_only_to_the_candidates_screening_kept(tmp_path, monkeypatch):
    from liger_perf import loop as loop_module
    from liger_perf.propose import Proposal, Stop

    class Batch:
        name = "test"

        def __init__(self):
            self.left = ["fast", "slow", "wrong"]

        def propose(self, context):
            if not self.left:
                return Stop("nothing left")
            name = self.left.pop(0)
            return Proposal(name, context.best_source + f"\n# {name}\n", f"try {name}", "")

    runner = _ScreeningRunner(keep={"fast"})
    baseline = _baseline()
    loop = loop_module.OptimizeLoop("relu_squared", Guardrails(), Batch(), device="interpret", budget=5,
                                    root=tmp_path, runner=runner, screen=3)
    monkeypatch.setattr(loop, "_best_file", lambda best: baseline_path("relu_squared"))
    steps = loop._round([baseline], baseline, room=1, best_file=baseline_path("relu_squared"), budget_left=5)
    assert [s.name for s in steps] == ["fast"]
    (screening,) = runner.requests
    assert screening.kind == "screening" and [e.name for e in screening.screen] == ["0-fast", "1-slow", "2-wrong"]
    assert loop.screened == 3
    kinds = [e.kind for e in loop.events]
    assert kinds == ["screen-start", "screen-end"]


@pytest.mark.parametrize("screen, expected", [(0, 1), (1, 1)])
def test_without_screening_the_round_is_the_proposals_it_has_room_for(tmp_path, screen, expected):
    from liger_perf import loop as loop_module

    runner = _ScreeningRunner(keep=set())
    baseline = _baseline()
    loop = loop_module.OptimizeLoop("relu_squared", Guardrails(), _endless(), device="interpret", budget=5,
                                    root=tmp_path, runner=runner, screen=screen)
    steps = loop._round([baseline], baseline, room=1, best_file=baseline_path("relu_squared"), budget_left=5)
    assert len(steps) == expected and not runner.requests  # nothing screened: a batch no larger than the room


def test_a_screening_that_did_not_complete_gives_every_candidate_a_full_trial(tmp_path):
    from liger_perf import loop as loop_module

    runner = _ScreeningRunner(keep=set(), screening_status="crashed")
    baseline = _baseline()
    loop = loop_module.OptimizeLoop("relu_squared", Guardrails(), _endless(), device="interpret", budget=5,
                                    root=tmp_path, runner=runner, screen=3)
    steps = loop._round([baseline], baseline, room=1, best_file=baseline_path("relu_squared"), budget_left=2)
    assert [s.name for s in steps] == ["p0", "p1"]  # every candidate, within the budget left
    assert "did not complete" in loop.events[-1].message


def test_screenings_that_keep_nothing_stop_the_loop_though_they_spend_no_trial(tmp_path):
    from liger_perf import loop as loop_module

    runner = _ScreeningRunner(keep=set())
    loop = loop_module.OptimizeLoop("relu_squared", Guardrails(), _endless(), device="interpret", budget=5,
                                    root=tmp_path, runner=runner, screen=3)
    baseline = _baseline()
    for _ in range(loop_module.FRUITLESS_SCREENINGS):
        assert not loop._stop_reason([baseline], baseline, 0)
        assert loop._round([baseline], baseline, room=1, best_file=baseline_path("relu_squared"),
                           budget_left=5) == []
    assert "kept no candidate" in loop._stop_reason([baseline], baseline, 0)


def test_a_memory_target_is_not_screened(tmp_path):
    from liger_perf import loop as loop_module

    runner = _ScreeningRunner(keep=set())
    loop = loop_module.OptimizeLoop("relu_squared", Guardrails(target="memory"), _endless(), device="interpret",
                                    budget=5, root=tmp_path, runner=runner, screen=3)
    baseline = _baseline()
    steps = loop._round([baseline], baseline, room=1, best_file=baseline_path("relu_squared"), budget_left=5)
    assert not runner.requests and len(steps) == 1  # screening times; one proposal, as without screening


def test_a_candidate_screening_kept_but_never_trialled_may_be_proposed_again():
    from liger_perf.propose import Context, tried_sources
    from liger_perf.kernel.registry import get_spec

    screening = TrialResult.model_validate({
        "kernel": "relu_squared", "status": "complete", "kind": "screening", "variant": {"sha256": "batch"},
        "screening": {"target": "backward", "rows": [{"name": "0-kept", "sha256": "k", "kept": True},
                                                     {"name": "1-dropped", "sha256": "d", "kept": False}]}})
    tried = tried_sources(Context(get_spec("relu_squared"), "backward", [_baseline(), screening], _baseline(), "x"))
    assert "d" in tried and "k" not in tried


def _screening(trial_id, against, rows):
    return TrialResult.model_validate({
        "kernel": "relu_squared", "status": "complete", "kind": "screening", "trial_id": trial_id,
        "variant": {"sha256": f"batch{trial_id}"}, "against": against,
        "screening": {"target": "backward", "rows": rows}})


def test_a_candidate_an_earlier_screening_kept_gets_its_full_trial_without_another_screening(tmp_path):
    """A loop stopped between a screening and its full trials (``--max-minutes``) resumes with those trials: on
    the H200 a second invocation screened the same batch again (0037 and 0038), four device minutes for nothing."""
    from liger_perf import loop as loop_module
    from liger_perf.kernel.variants import source_hash

    baseline = _baseline()
    rows = [{"name": f"{i}-{name}", "sha256": source_hash(f"x\n# {name}\n"), "source": f"x\n# {name}\n",
             "kept": kept, "ratio": ratio, "hypothesis": f"try {name}", "reason": "may be faster"}
            for i, (name, kept, ratio) in enumerate([("slower-kept", True, 0.95), ("dropped", False, 1.2),
                                                     ("faster-kept", True, 0.85)])]
    screening = _screening(1, {"sha256": "b", "source": "x"}, rows)
    runner = _ScreeningRunner(keep=set())
    loop = loop_module.OptimizeLoop("relu_squared", Guardrails(), _endless(), device="interpret", budget=5,
                                    root=tmp_path, runner=runner, screen=3)
    steps = loop._round([baseline, screening], baseline, room=2, best_file=baseline_path("relu_squared"),
                        budget_left=5)
    assert [s.name for s in steps] == ["faster-kept", "slower-kept"] and not runner.requests
    assert steps[0].source == "x\n# faster-kept\n" and "screening 0001" in steps[0].prediction

    # Once one of them has had its trial, the other is next; then the proposer and a new screening again.
    trialled = TrialResult.model_validate({
        "kernel": "relu_squared", "status": "complete", "trial_id": 2, "name": "faster-kept",
        "device": "interpret", "variant": {"sha256": rows[2]["sha256"], "source": rows[2]["source"]},
        "against": {"sha256": "b", "source": "x"}, "judged": {"verdict": "rejected"}})
    history = [baseline, screening, trialled]
    assert [s.name for s in loop._round(history, baseline, room=1, best_file=baseline_path("relu_squared"),
                                        budget_left=5)] == ["slower-kept"]
    assert not runner.requests
    history.append(trialled.model_copy(update={
        "trial_id": 3, "name": "slower-kept", "variant": trialled.variant.model_copy(
            update={"sha256": rows[0]["sha256"], "source": rows[0]["source"]})}))
    loop._round(history, baseline, room=1, best_file=baseline_path("relu_squared"), budget_left=5)
    assert [r.kind for r in runner.requests] == ["screening"]


def test_a_candidate_kept_on_another_target_gets_no_full_trial(tmp_path):
    """A screening keeps a candidate on its target's pass: 0088 (backward) kept num_stages@2048x4=3, which a forward
    run's plan then gave a full trial. A run on another target leaves it to the proposer."""
    from liger_perf import loop as loop_module
    from liger_perf.kernel.variants import source_hash

    baseline = _baseline()
    rows = [{"name": "0-kept", "sha256": source_hash("x\n# kept\n"), "source": "x\n# kept\n", "kept": True,
             "ratio": 0.9, "hypothesis": "try it", "reason": "may be faster"}]
    screening = _screening(1, {"sha256": "b", "source": "x"}, rows)  # on the backward
    for target, trialled in (("forward", []), ("backward", ["kept"])):
        loop = loop_module.OptimizeLoop("relu_squared", Guardrails(target=target), _endless(), device="interpret",
                                        budget=5, root=tmp_path, runner=_ScreeningRunner(keep=set()), screen=0)
        assert [p.name for p in loop._kept_by_screening([baseline, screening], baseline)] == trialled, target


def test_no_screening_or_trial_begins_that_the_recent_pace_says_would_end_after_the_deadline(tmp_path):
    """--max-minutes is the time by which the loop is done: on the H200 a trial begun 280 s before a call's end
    (0056, after a 199 s screening) was killed in its NCU profile and its device time lost. A screening that would
    not end in time is not begun, and a kept candidate whose trial would not is left for the next run."""
    import time

    from liger_perf import loop as loop_module
    from liger_perf.kernel.variants import source_hash

    def history(screening_s: float, trial_s: float, kept: bool):
        done = TrialResult.model_validate({"kernel": "relu_squared", "status": "complete", "device": "interpret",
                                           "kind": "experiment", "trial_id": 1, "elapsed_s": trial_s,
                                           "variant": {"sha256": "t", "source": "t"}})
        rows = [{"name": "0-kept", "sha256": source_hash("x\n# kept\n"), "source": "x\n# kept\n", "kept": kept,
                 "ratio": 0.9, "hypothesis": "try kept", "reason": "may be faster"}]
        screening = _screening(2, {"sha256": "b", "source": "x"}, rows).model_copy(
            update={"elapsed_s": screening_s, "device": "interpret"})
        return [_baseline(), done, screening]

    def round_with(seconds_left: float, screening_s: float, trial_s: float, kept: bool):
        runner = _ScreeningRunner(keep=set())
        loop = loop_module.OptimizeLoop("relu_squared", Guardrails(), _endless(), device="interpret", budget=5,
                                        root=tmp_path, runner=runner, screen=3, deadline=time.time() + seconds_left)
        steps = loop._round(history(screening_s, trial_s, kept), _baseline(), room=1,
                            best_file=baseline_path("relu_squared"), budget_left=5)
        return steps, runner.requests

    # No candidate kept: a screening of 100 s with 50 s left is not begun, and the reason says why.
    stop, requests = round_with(50, 100, 300, kept=False)
    assert isinstance(stop, loop_module.Stop) and not requests
    assert "a screening takes about 100 s here" in stop.reason and "s are left" in stop.reason
    # With 150 s left it is (the candidates it keeps are then cut to those whose trials end in time).
    _, requests = round_with(150, 100, 300, kept=False)
    assert [r.kind for r in requests] == ["screening"]
    # A kept candidate's trial of 300 s with 200 s left waits for the next run; with 400 s left it runs.
    stop, requests = round_with(200, 100, 300, kept=True)
    assert isinstance(stop, loop_module.Stop) and "a trial takes about 300 s here" in stop.reason and not requests
    steps, _ = round_with(400, 100, 300, kept=True)
    assert [s.name for s in steps] == ["kept"]
    # With no screening finished here to go by, one starts while any time is left.
    _, requests = round_with(5, None, 300, kept=False)
    assert [r.kind for r in requests] == ["screening"]



def test_a_screening_is_begun_by_the_cases_it_times_not_by_the_last_screenings_length(tmp_path):
    """The last screening timed one case (90 of its 100 s); the next one times the whole suite's four: 10 + 4 x 90
    = 370 s. With 300 s left it is not begun (the median screening's 100 s would have begun it, and the deadline
    would have cut it off); with 400 s left it is. Under --buckets only their cases count (below)."""
    import time

    from liger_perf import loop as loop_module

    def round_with(seconds_left: float, candidates: int = 0):
        runner = _ScreeningRunner(keep=set())
        loop = loop_module.OptimizeLoop("relu_squared", Guardrails(), _endless(), device="interpret", budget=5,
                                        root=tmp_path, runner=runner, screen=3, deadline=time.time() + seconds_left)
        case = loop.spec.cases("interpret", "bench")[0]
        timing = [{"shape": "x".join(map(str, case.shape)), "dtype": str(case.dtype).removeprefix("torch."),
                   "pass": "forward", "contender": f"{c}-a"} for c in range(3)]
        rows = [{"name": f"c{c}", "sha256": f"{c}"} for c in range(candidates)]
        screening = _screening(1, {"sha256": "b", "source": "x"}, []).model_copy(update={
            "elapsed_s": 100, "device": "interpret", "step_seconds": {"time": 90.0},
            "screening": Screening(target="forward", timing=timing, rows=rows)})
        steps = loop._round([_baseline(), screening], _baseline(), room=1,
                            best_file=baseline_path("relu_squared"), budget_left=5)
        return steps, runner.requests

    stop, requests = round_with(300)
    assert isinstance(stop, loop_module.Stop) and not requests
    assert "a screening takes about 370 s here" in stop.reason
    _, requests = round_with(400)
    assert [r.kind for r in requests] == ["screening"]
    # The last one screened a single candidate beside the best in its 10 s outside the timing (5 s a variant);
    # this one asks for three (--screen 3): 4 x 5 + 4 x 90 = 380 s, which 375 s left do not hold, where the
    # screening's plain 10 s would (H200: 0083's seven ran 126 s against a pace of 78).
    stop, requests = round_with(375, candidates=1)
    assert isinstance(stop, loop_module.Stop) and not requests
    assert "a screening takes about 380 s here" in stop.reason


def test_a_screenings_pace_counts_the_cases_its_candidates_buckets_time(tmp_path):
    """A screening of moves in named buckets times those buckets' cases alone (``run.screening.Screen``): the fused
    kernel's interpreter suite has one case in bucket 256x4 of its four. Before the candidates exist, --buckets
    stands for them, and a bucket without a case (32768x2) makes the estimate the whole suite's, as Screen falls
    back to it where the candidates name only such buckets. Once they exist (a request's progress line, the plan),
    their own changes decide, as in Screen: a move to a default times the whole suite."""
    from liger_perf import loop as loop_module
    from liger_perf.record.schema import TrialRequest

    timing = [{"shape": "8x8", "dtype": "float32", "pass": "backward", "contender": f"{c}-a"} for c in range(4)]
    history = [TrialResult.model_validate({
        "kernel": "fused_add_rms_norm", "status": "complete", "kind": "screening", "device": "interpret",
        "trial_id": 1, "variant": {"sha256": "batch"}, "elapsed_s": 50, "step_seconds": {"time": 40.0},
        "screening": {"target": "backward", "timing": timing,
                      "rows": [{"name": f"c{c}", "sha256": f"{c}"} for c in range(4)]}})]
    # 10 s outside the timing (2 s for each of its five variants: the best and four candidates), 40 s a case

    def loop_for(buckets: tuple[str, ...]):
        return loop_module.OptimizeLoop("fused_add_rms_norm", Guardrails(), _endless(), device="interpret",
                                        budget=5, root=tmp_path, runner=_ScreeningRunner(keep=set()),
                                        buckets=buckets)

    assert loop_for(("256x4",)).screening_pace(history) == pytest.approx(10 + 1 * 40)
    assert loop_for(()).screening_pace(history) == pytest.approx(10 + 4 * 40)
    assert loop_for(("32768x2",)).screening_pace(history) == pytest.approx(10 + 4 * 40)
    assert loop_for(("256x4", "32768x2")).screening_pace(history) == pytest.approx(10 + 4 * 40)
    loop = loop_for(())
    one_bucket = [{"num_warps@256x4": 8}, {"BLOCK_SIZE@256x4": 128}]
    # Once the candidates exist, or the batch about to be asked for is known, outside the timing is per variant.
    assert loop.screening_pace(history, one_bucket) == pytest.approx(3 * 2 + 1 * 40)
    assert loop.screening_pace(history, [*one_bucket, {"num_warps": 8}]) == pytest.approx(4 * 2 + 4 * 40)
    assert loop.screening_pace(history, [{"num_warps@32768x2": 8}]) == pytest.approx(2 * 2 + 4 * 40)
    assert loop_for(("256x4",)).screening_pace(history, candidates=7) == pytest.approx(8 * 2 + 1 * 40)
    # The progress line of a screening request: its entries' changes, as the notebook's Screen reads them.
    request = TrialRequest(kernel="fused_add_rms_norm", variant="/best.py", kind="screening", suite="",
                           screen=[{"name": f"c{i}", "variant": f"/c{i}.py", "changes": c}
                                   for i, c in enumerate(one_bucket)])
    assert loop.request_pace(history, request) == pytest.approx(3 * 2 + 1 * 40)


def test_a_kept_candidate_screened_against_an_earlier_best_is_made_again_on_the_current_best(tmp_path):
    from liger_perf import loop as loop_module
    from liger_perf.kernel.variants import read_knobs, source_hash, with_knobs

    base = baseline_path("relu_squared").read_text()
    base_sha = source_hash(base)
    winner_source = with_knobs(base, {"BLOCK_SIZE": 2048})
    kept_source = with_knobs(base, {"num_warps": 8})
    record = {"kernel": "relu_squared", "status": "complete", "device": "interpret"}
    baseline = TrialResult.model_validate({**record, "trial_id": 0, "variant": {"sha256": base_sha, "source": base}})
    screening = _screening(1, {"sha256": base_sha, "source": base}, [
        {"name": "0-warps", "sha256": source_hash(kept_source), "source": kept_source, "kept": True, "ratio": 0.9,
         "changes": {"num_warps": 8}},
        {"name": "1-no-knobs", "sha256": "n", "source": base + "\n# n\n", "kept": True, "ratio": 0.8}])
    winner = TrialResult.model_validate({
        **record, "trial_id": 2, "name": "block", "variant": {"sha256": source_hash(winner_source),
                                                             "source": winner_source},
        "against": {"sha256": base_sha, "source": base}, "judged": {"verdict": "accepted"}})
    loop = loop_module.OptimizeLoop("relu_squared", Guardrails(), _endless(), device="interpret", budget=5,
                                    root=tmp_path, runner=_ScreeningRunner(keep=set()), screen=0)
    (step,) = loop._kept_by_screening([baseline, screening, winner], winner)
    knobs, _ = read_knobs(step.source)
    assert knobs["BLOCK_SIZE"] == 2048 and knobs["num_warps"] == 8
    assert step.changes == {"num_warps": 8}  # the one without knob changes is left to the proposer


def test_a_kept_candidate_whose_trial_ran_is_not_made_again_after_a_later_acceptance(tmp_path):
    """A screening kept two candidates, both had their trials (one accepted, one rejected): the rejected one
    is not made again on the new best (that would undo the proposer's rule against a rejected move); nor is a
    kept one whose trial was a harness error skipped (the harness never reached it)."""
    from liger_perf import loop as loop_module
    from liger_perf.kernel.variants import source_hash, with_knobs
    from liger_perf.record.schema import HARNESS_ERROR

    base = baseline_path("relu_squared").read_text()
    base_sha = source_hash(base)
    moves = {"block": {"BLOCK_SIZE": 2048}, "warps": {"num_warps": 8}, "bwd": {"bwd_num_warps": 2}}
    sources = {name: with_knobs(base, changes) for name, changes in moves.items()}
    record = {"kernel": "relu_squared", "status": "complete", "device": "interpret"}
    baseline = TrialResult.model_validate({**record, "trial_id": 0, "variant": {"sha256": base_sha, "source": base}})
    screening = _screening(1, {"sha256": base_sha, "source": base}, [
        {"name": f"{i}-{name}", "sha256": source_hash(sources[name]), "source": sources[name], "kept": True,
         "ratio": 0.9, "changes": moves[name]} for i, name in enumerate(moves)])

    def trial(trial_id, name, verdict, **extra):
        return TrialResult.model_validate({
            **record, "trial_id": trial_id, "name": name, "against": {"sha256": base_sha, "source": base},
            "variant": {"sha256": source_hash(sources[name]), "source": sources[name]},
            "judged": {"verdict": verdict}, **extra})

    accepted, rejected = trial(2, "block", "accepted"), trial(3, "warps", "rejected")
    broken = trial(4, "bwd", "rejected", status=HARNESS_ERROR)
    loop = loop_module.OptimizeLoop("relu_squared", Guardrails(), _endless(), device="interpret", budget=5,
                                    root=tmp_path, runner=_ScreeningRunner(keep=set()), screen=0)
    steps = loop._kept_by_screening([baseline, screening, accepted, rejected, broken], accepted)
    assert [s.changes for s in steps] == [moves["bwd"]]  # not "warps": its trial ran
    assert "made again on trial 0002" in steps[0].hypothesis


def test_a_superseded_kept_candidate_is_trialled_once_in_a_round(tmp_path):
    """With two workers, a kept candidate superseded in its round is both a re-run (on the winner) and a kept
    candidate made again on it: one trial, not two of the same source."""
    from liger_perf import loop as loop_module
    from liger_perf.kernel.variants import source_hash, with_knobs

    base = baseline_path("relu_squared").read_text()
    base_sha = source_hash(base)
    moves = {"block": {"BLOCK_SIZE": 2048}, "warps": {"num_warps": 8}}
    sources = {name: with_knobs(base, changes) for name, changes in moves.items()}
    record = {"kernel": "relu_squared", "status": "complete", "device": "interpret"}
    baseline = TrialResult.model_validate({**record, "trial_id": 0, "variant": {"sha256": base_sha, "source": base}})
    screening = _screening(1, {"sha256": base_sha, "source": base}, [
        {"name": f"{i}-{name}", "sha256": "screened-" + name, "source": sources[name] + "# screened copy\n",
         "kept": True, "ratio": 0.9, "changes": moves[name]} for i, name in enumerate(moves)])
    winner = TrialResult.model_validate({
        **record, "trial_id": 2, "name": "block", "against": {"sha256": base_sha, "source": base},
        "variant": {"sha256": source_hash(sources["block"]), "source": sources["block"]},
        "judged": {"verdict": "accepted"}})
    # The other one of the round: accepted too, then superseded by the winner; its own source differs from
    # the screened copy, so only its re-run and the kept row's re-make can match.
    superseded = TrialResult.model_validate({
        **record, "trial_id": 3, "name": "warps", "against": {"sha256": base_sha, "source": base},
        "variant": {"sha256": "superseded", "source": sources["warps"] + "# trialled copy\n"},
        "changes": moves["warps"], "judged": {"verdict": "accepted", "superseded_by": 2}})
    loop = loop_module.OptimizeLoop("relu_squared", Guardrails(), _endless(), device="interpret", budget=5,
                                    root=tmp_path, runner=_ScreeningRunner(keep=set()), screen=0)
    history = [baseline, screening, winner, superseded]
    assert len(loop._reruns(history, winner)) == 1 and len(loop._kept_by_screening(history, winner)) == 1
    steps = loop._round(history, winner, room=2, best_file=baseline_path("relu_squared"), budget_left=5)
    made = [s for s in steps if s.changes == moves["warps"]]
    assert len(made) == 1, [s.name for s in steps]


def test_a_trial_rejected_only_as_suspicious_is_re_run_once_and_its_move_is_not_ruled_out(tmp_path):
    """0041 on the H200 was rejected for suspicious measurements of its current best (slowed by the run at one
    case): that judged nothing of the move, so it was run once more (0042, accepted). Suspicions of the candidate's
    own measurements, or a second suspicious run of the same source, stand and rule the move out."""
    from liger_perf import loop as loop_module
    from liger_perf.kernel.variants import source_hash, with_knobs
    from liger_perf.propose.rules import RulesProposer

    base = baseline_path("relu_squared").read_text()
    base_sha = source_hash(base)
    changes = {"num_warps": 8}
    moved = with_knobs(base, changes)
    choices = {"num_warps": ["auto", 4, 8]}
    record = {"kernel": "relu_squared", "status": "complete", "device": "interpret"}
    baseline = TrialResult.model_validate({**record, "trial_id": 0, "variant": {"sha256": base_sha, "source": base,
                                                                                 "knobs": {"num_warps": "auto"}}})
    suspicious = TrialResult.model_validate({
        **record, "trial_id": 1, "name": "warps", "against": {"sha256": base_sha},
        "variant": {"sha256": source_hash(moved), "source": moved}, "changes": changes,
        "judged": {"verdict": "rejected", "suspicious": ["the current best's full ran 2.49x its times"],
                   "recheck": True}})
    loop = loop_module.OptimizeLoop("relu_squared", Guardrails(), _endless(), device="interpret", budget=5,
                                    root=tmp_path, runner=_ScreeningRunner(keep=set()), screen=0)
    reruns = loop._reruns([baseline, suspicious], baseline)
    assert [(r.name, r.source, r.diagnosis) for r in reruns] == [("warps-recheck", moved, "recheck")]
    assert "suspicious" in reruns[0].hypothesis
    assert RulesProposer._rejected_moves([baseline, suspicious], choices) == set()
    # Suspicious of the candidate itself (its timed outputs wrong), or rejected on its merits: no re-run, and
    # the move is ruled out.
    for judged in ({"verdict": "rejected", "suspicious": ["spot check of a timed call: candidate ..."]},
                   {"verdict": "rejected"}):
        other = suspicious.model_copy(update={"judged": suspicious.judged.model_validate(judged)})
        assert loop._reruns([baseline, other], baseline) == []
        assert RulesProposer._rejected_moves([baseline, other], choices)
    # Its re-check suspicious again: it stands, and rules the move out.
    again = suspicious.model_copy(update={"trial_id": 2, "name": "warps-recheck"})
    assert loop._reruns([baseline, suspicious, again], baseline) == []
    assert RulesProposer._rejected_moves([baseline, suspicious, again], choices)
    # Alternating verdicts cannot go on: once per source, whatever the names (cut at 60 characters) say.
    undecided = suspicious.judged.model_validate({"verdict": "inconclusive"})
    inconclusive = suspicious.model_copy(update={"trial_id": 3, "name": "w" * 60, "judged": undecided})
    first = inconclusive.model_copy(update={"trial_id": 0, "name": "w" * 59})
    assert [r.diagnosis for r in loop._reruns([baseline, inconclusive], baseline)] == ["remeasure"]
    assert loop._reruns([baseline, first, inconclusive], baseline) == []


def _on_the_baseline_of(loop, baseline, tmp_path):
    """The loop as it stood when ``baseline`` (a recorded baseline trial) was the kernel's baseline."""
    file = tmp_path / "recorded-baseline.py"
    file.write_text(baseline.variant.source)
    loop.baseline_file, loop.baseline_sha = file, source_hash(baseline.variant.source)


def test_kept_candidates_in_a_bucket_where_a_peer_is_ahead_go_first(tmp_path):
    """After trial 0045 of the H200 history, screening 0043's two kept ``bwd_weight_reload`` moves are left:
    bucket 8192x2 screened at 1.08x, 16384x4 at 1.06x. liger-kernel is ahead of the best only in 16384x4 (float32
    at 12288-16384 columns, by 0035's side-by-side peer times and the chain): that move goes first. Without a
    baseline trial that timed a peer, the better screened ratio does."""
    from liger_perf import loop as loop_module
    from liger_perf.record.history import load_trials

    trials = [t for t in load_trials("fused_add_rms_norm", Path(__file__).resolve().parent.parent / "notebooks"
                                     / "nvidia-h200") if t.trial_id <= 45]
    best = next(t for t in trials if t.trial_id == 45)
    loop = loop_module.OptimizeLoop("fused_add_rms_norm", Guardrails(target="backward"), _endless(),
                                    device="interpret", budget=5, root=tmp_path, runner=_ScreeningRunner(keep=set()),
                                    screen=0)
    _on_the_baseline_of(loop, next(t for t in trials if t.trial_id == 35), tmp_path)
    steps = loop._kept_by_screening(trials, best)
    assert [s.changes for s in steps] == [{"bwd_weight_reload@16384x4": True}, {"bwd_weight_reload@8192x2": True}]
    without_peers = [t for t in trials if t.trial_id != 35]  # 0035: the chain's baseline trial, the one with peers
    steps = loop._kept_by_screening(without_peers, best)
    assert [s.changes for s in steps] == [{"bwd_weight_reload@8192x2": True}, {"bwd_weight_reload@16384x4": True}]
    loop.buckets = ("8192x2",)  # optimize --buckets 8192x2: the other bucket's candidate waits
    assert [s.changes for s in loop._kept_by_screening(trials, best)] == [{"bwd_weight_reload@8192x2": True}]


def test_with_buckets_a_proposal_is_held_to_its_word_and_to_them(tmp_path):
    """``--buckets 2048x2``: a proposal keeps to the named buckets only if every change names one of them and its
    source is the best's with exactly those changes; code beyond the knobs, a default or another bucket is out."""
    from liger_perf import loop as loop_module
    from liger_perf.kernel.variants import with_knobs

    from made_trials import make_trial

    base = baseline_path("fused_add_rms_norm").read_text()
    best = make_trial(variant={"source": base})
    loop = loop_module.OptimizeLoop("fused_add_rms_norm", Guardrails(target="backward"), _endless(),
                                    device="interpret", budget=5, root=tmp_path, runner=_ScreeningRunner(keep=set()),
                                    screen=0, buckets=("2048x2",))

    def in_scope(changes, source=None):
        return loop._in_scope(changes, with_knobs(base, changes) if source is None else source, best)

    assert in_scope({"bwd_dw_accumulator@2048x2": "tile"})
    assert not in_scope({"bwd_dw_accumulator@1024x2": "tile"})
    assert not in_scope({"bwd_dw_accumulator": "tile"})
    sneaky = with_knobs(base, {"bwd_dw_accumulator@2048x2": "tile"}) + "\nimport os\n"
    assert not in_scope({"bwd_dw_accumulator@2048x2": "tile"}, sneaky)
    loop.buckets = ()
    assert in_scope({"bwd_dw_accumulator": "tile"}, sneaky)  # unfocused: the judge's business


def test_with_buckets_a_round_stops_at_a_proposal_beyond_them_and_runs_nothing(tmp_path):
    """A proposer that ignores ``--buckets`` (an LLM told in its prompt alone, say): the round ends in a stop that
    names the proposal, before anything is screened or trialled; one that keeps to them is taken."""
    from liger_perf import loop as loop_module
    from liger_perf.kernel.variants import with_knobs
    from liger_perf.propose import Proposal, Stop

    source = baseline_path("fused_add_rms_norm").read_text()
    base = TrialResult.model_validate({"kernel": "fused_add_rms_norm", "status": "complete", "device": "interpret",
                                       "variant": {"sha256": source_hash(source), "source": source}, "trial_id": 0})

    class Told:
        name = "test"

        def __init__(self, changes, extra=""):
            self.changes, self.extra = changes, extra

        def propose(self, context):
            return Proposal("move", with_knobs(context.best_source, self.changes) + self.extra, "", "", self.changes)

    assert "DISPATCH" in source
    for proposer in (Told({"BLOCK_SIZE": 2048}), Told({"BLOCK_SIZE@2048x2": 2048}, "\n# and more\n"),
                     Told({"BLOCK_SIZE@1024x2": 2048})):
        runner = _ScreeningRunner(keep=set())
        loop = loop_module.OptimizeLoop("fused_add_rms_norm", Guardrails(), proposer, device="interpret", budget=5,
                                        root=tmp_path, runner=runner, screen=3, buckets=("2048x2",))
        stop = loop._round([base], base, room=1, best_file=baseline_path("fused_add_rms_norm"), budget_left=5)
        assert isinstance(stop, Stop) and "--buckets allows" in stop.reason and not runner.requests
    loop = loop_module.OptimizeLoop("fused_add_rms_norm", Guardrails(), Told({"BLOCK_SIZE@2048x2": 2048}),
                                    device="interpret", budget=5, root=tmp_path, runner=_ScreeningRunner(keep=set()),
                                    screen=0, buckets=("2048x2",))
    (step,) = loop._round([base], base, room=1, best_file=baseline_path("fused_add_rms_norm"), budget_left=5)
    assert step.changes == {"BLOCK_SIZE@2048x2": 2048}


def test_with_buckets_a_re_measure_of_another_buckets_move_waits_and_says_so(tmp_path):
    """``--buckets 2048x2`` with an inconclusive move in 1024x2 (or in 1024x2 and 2048x2) in the history: the round
    takes the proposer's 2048x2 move, not the re-measure, and says once that the re-measure waits; naming 1024x2, or
    no bucket at all, takes the re-measure first. A re-measure of a default's move touches every bucket: it runs."""
    from liger_perf import loop as loop_module
    from liger_perf.kernel.variants import with_knobs
    from liger_perf.propose import Proposal

    from made_trials import make_trial

    source = baseline_path("fused_add_rms_norm").read_text()
    base = TrialResult.model_validate({"kernel": "fused_add_rms_norm", "status": "complete", "device": "interpret",
                                       "variant": {"sha256": source_hash(source), "source": source}, "trial_id": 0})

    def inconclusive(changes):
        moved = with_knobs(source, changes)
        return make_trial(verdict="inconclusive", trial_id=1, name="narrow", kind="experiment", changes=changes,
                          variant={"sha256": source_hash(moved), "source": moved},
                          against={"sha256": source_hash(source)})

    class Told:
        name = "test"

        def propose(self, context):
            changes = {"BLOCK_SIZE@2048x2": 2048}
            return Proposal("move", with_knobs(context.best_source, changes), "", "", changes)

    def first_step(history, buckets, best=base):
        loop = loop_module.OptimizeLoop("fused_add_rms_norm", Guardrails(), Told(), device="interpret", budget=5,
                                        root=tmp_path, runner=_ScreeningRunner(keep=set()), screen=0,
                                        buckets=buckets)
        trials = [base, history, *([best] if best is not base else [])]
        (step,) = loop._round(trials, best, room=1, best_file=baseline_path("fused_add_rms_norm"), budget_left=5)
        loop._round(trials, best, room=1, best_file=baseline_path("fused_add_rms_norm"), budget_left=5)
        return step, [e.message for e in loop.events if e.kind == "waits"]

    narrow = inconclusive({"BLOCK_SIZE@1024x2": 2048})
    step, said = first_step(narrow, ("2048x2",))
    assert step.changes == {"BLOCK_SIZE@2048x2": 2048}
    assert said == ["narrow-remeasure waits: it moves 1024x2, which --buckets 2048x2 leaves out (run without "
                    "--buckets, or name every bucket it moves: 1024x2, to take it)"]  # once, though two rounds ran
    step, said = first_step(inconclusive({"BLOCK_SIZE@1024x2": 2048, "BLOCK_SIZE@2048x2": 2048}), ("2048x2",))
    assert step.changes == {"BLOCK_SIZE@2048x2": 2048}  # a move partly in the named bucket waits too
    assert said == ["narrow-remeasure waits: it moves 1024x2, which --buckets 2048x2 leaves out (run without "
                    "--buckets, or name every bucket it moves: 1024x2, 2048x2, to take it)"]
    for buckets in (("1024x2", "2048x2"), ()):
        step, said = first_step(narrow, buckets)
        assert step.name == "narrow-remeasure" and not said
    step, said = first_step(inconclusive({"BLOCK_SIZE": 2048}), ("2048x2",))
    assert step.name == "narrow-remeasure" and not said
    # A best that made the move since (a later trial, a carry-over) owes it no re-measure: nothing waits, no line.
    made = with_knobs(source, {"BLOCK_SIZE@1024x2": 2048, "num_warps@8192x2": 8})
    winner = base.model_copy(update={"trial_id": 2, "variant": base.variant.model_copy(
        update={"sha256": source_hash(made), "source": made})})
    step, said = first_step(narrow, ("2048x2",), best=winner)
    assert step.changes == {"BLOCK_SIZE@2048x2": 2048} and not said
