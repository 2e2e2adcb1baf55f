"""The replay runner: the loop, the judge and the rules proposer run through the recorded H200 trials, in seconds."""

import shutil
import time

import pytest

from liger_perf.core.errors import UserError
from liger_perf.judge.guardrails import load_guardrails
from liger_perf.record.history import load_trials
from liger_perf.loop import OptimizeLoop
from liger_perf.propose.rules import RulesProposer
from liger_perf.kernel.registry import baseline_path
from liger_perf.run import run_trial
from liger_perf.run.replay import ReplayRunner

from broken_variants import ROOT

KERNEL = "fused_add_rms_norm"
RECORDED = ROOT / "notebooks" / "nvidia-h200"


@pytest.fixture(autouse=True)
def _recorded_baseline(recorded_baselines):
    """Replays walk the recorded history, measured on the baseline as it was then."""


def _history_up_to_the_baseline(tmp_path):
    """The recorded fused history up to its baseline trial (0002), as the loop found it on the H200."""
    root = tmp_path / "nb"
    (root / KERNEL).mkdir(parents=True)
    for notebook in sorted((RECORDED / KERNEL).glob("000[0-2]-*.ipynb")):
        shutil.copy(notebook, root / KERNEL / notebook.name)
    return root


def test_the_loop_replayed_through_the_recorded_h200_trials_decides_as_it_did_then(tmp_path):
    root = _history_up_to_the_baseline(tmp_path)
    runner = ReplayRunner(RECORDED)
    loop = OptimizeLoop(KERNEL, load_guardrails(ROOT / "guardrails.yaml", target="backward"), RulesProposer(),
                        device="cuda", budget=5, root=root, runner=runner)
    started = time.time()
    outcome = loop.run()
    assert time.time() - started < 60
    assert outcome.stop_reason == "the budget of 5 trials is spent"
    recorded = {t.trial_id: t for t in load_trials(KERNEL, RECORDED)}
    replayed = [t for t in load_trials(KERNEL, root) if t.trial_id >= 3]
    # The rules proposer, reading the same notebooks, proposed what it proposed on the H200, in the same order...
    assert runner.served == [3, 4, 5, 6, 7] == [t.trial_id for t in replayed]
    for trial in replayed:
        then = recorded[trial.trial_id]
        assert trial.variant_sha == then.variant_sha
        assert trial.replayed_from == then.notebook.rsplit("/", 1)[-1]
        # ...and the judge, reading the same measurements, decided the same (0004 and 0006 accepted).
        assert trial.verdict == then.verdict
        assert trial.judged.target_ratio == pytest.approx(then.judged.target_ratio)
    assert [t.trial_id for t in replayed if t.verdict == "accepted"] == [4, 6]


def test_a_request_nothing_recorded_answers_is_an_error_naming_the_variant(tmp_path):
    novel = tmp_path / "novel.py"
    novel.write_text(baseline_path(KERNEL).read_text() + "\n# a change the H200 never ran\n")
    with pytest.raises(UserError, match=r"replay: no cuda trial of fused_add_rms_norm .* ran this variant \(novel.py"):
        run_trial(KERNEL, novel, baseline_path(KERNEL), root=tmp_path / "nb", runner=ReplayRunner(RECORDED))
    assert not list((tmp_path / "nb" / KERNEL).glob("*.ipynb"))  # no notebook made up


def test_rounds_of_two_trial_two_candidates_against_one_best_and_reconcile_two_acceptances(tmp_path):
    """Replayed with two workers: each round holds two of the recorded candidates. Recorded trial 0003 is made to
    win by 20 % here, so that 0003 and 0004 (+13.7 %) are both accepted in round one: 0003 stays, 0004 is
    superseded and re-trialled against 0003 in round two (that re-trial recorded too, from 0004's figures)."""
    import nbformat

    from liger_perf.record import notebook as record

    recorded = tmp_path / "recorded"
    (recorded / KERNEL).mkdir(parents=True)
    sources = {}
    for n in (0, 1, 2, 3, 4):
        (path,) = (RECORDED / KERNEL).glob(f"{n:04d}-*.ipynb")
        nb = nbformat.read(path, as_version=4)
        result = record.read_result(nb)
        sources[n] = result.variant_sha
        if n == 3:
            for row in result.timing_rows("candidate"):
                row.ratio, row.ci_low, row.ci_high = 0.8, 0.79, 0.81
            for row in result.memory_rows():
                row.peak_bytes = 1000
        record.set_result(nb, result)
        record.write_atomic(nb, recorded / KERNEL / path.name)
        if n == 4:  # 0004 as if trialled against 0003
            result.against.sha256 = sources[3]
            record.set_result(nb, result)
            record.write_atomic(nb, recorded / KERNEL / "0005-retrial.ipynb")
    root = _history_up_to_the_baseline(tmp_path)
    runner = ReplayRunner(recorded, workers=2)
    loop = OptimizeLoop(KERNEL, load_guardrails(ROOT / "guardrails.yaml", target="backward"), RulesProposer(),
                        device="cuda", budget=3, root=root, runner=runner)
    events = []
    loop.on_event = events.append
    loop.run()
    assert runner.served == [3, 4, 5]
    trials = {t.trial_id: t for t in load_trials(KERNEL, root)}
    assert trials[3].verdict == "accepted"
    assert trials[4].verdict == "rejected" and trials[4].judged.superseded_by == 3
    assert "superseded: trial 0003" in trials[4].verdict_reasons[0]
    assert trials[5].name.endswith("-retrial") and trials[5].variant_sha == sources[4]
    assert trials[5].against_sha == sources[3]  # re-trialled against the round's winner
    starts = [e for e in events if e.kind == "trial-start"]
    assert [e.index for e in starts] == [1, 2, 3]
    # The retrial ran against another best: 0004's knob changes made again on it (its request's source is the
    # winner's with them; the replay serves 0004's recorded figures), so they are the retrial's own changes.
    assert trials[5].changes == trials[4].changes and trials[5].changes

    # A loop killed after it judged round one but before it reconciled it: both stand accepted. The next loop
    # reconciles them before anything else, and the chain never holds both.
    record.record_verdict(trials[4].notebook, trials[4].judged.model_copy(update={
        "verdict": "accepted", "reasons": ["as judged before the kill"], "superseded_by": None}))
    for t in load_trials(KERNEL, root):
        if t.trial_id == 5:
            (root / KERNEL / t.notebook.rsplit("/", 1)[-1]).unlink()
    OptimizeLoop(KERNEL, load_guardrails(ROOT / "guardrails.yaml", target="backward"), RulesProposer(),
                 device="cuda", budget=0, root=root, runner=runner).run()
    trials = {t.trial_id: t for t in load_trials(KERNEL, root)}
    assert trials[3].verdict == "accepted" and trials[4].judged.superseded_by == 3


class _TheNightsProposals:
    """The proposals the first H200 night's rules proposer made (trials 0011 and 0013), as recorded. The rules
    proposer has learned since: it asks for ``dw_reduction="triton"`` first (the extra-launches diagnosis), and it
    no longer reads the register limit as what caps occupancy where every block is resident at once (0011's
    ``bwd_num_warps=16``). The night's machinery is what the replay tests."""

    name = "rules"

    def __init__(self, recorded, trial_ids=(11, 13)):
        from liger_perf.propose import Proposal

        self.left = [Proposal(name=t.name, source=t.variant.source, hypothesis=t.hypothesis or "", prediction="",
                              changes=dict(t.changes or {}), diagnosis="recorded")
                     for t in load_trials(KERNEL, recorded) if t.trial_id in trial_ids]

    def propose(self, context):
        from liger_perf.propose import Stop

        return self.left.pop(0) if self.left else Stop("the night's proposals are replayed")


def test_the_nightly_replayed_through_the_recorded_h200_night_decides_as_it_did_then(tmp_path, monkeypatch):
    """The first H200 night (trials 0010-0013, from a history ending at 0009): re-validation of the best on
    the stack the night recorded, then tuning trials; replayed with the night's own proposals, the job serves the
    same trials in the same order (the first two tuning trials: see below), finds no regression and reaches the
    same verdicts, on a machine without a GPU."""
    import json

    from liger_perf import nightly
    from liger_perf.nightly import KernelJob, Nightly, NightlyConfig

    monkeypatch.setattr(nightly, "get_proposer", lambda *args, **kwargs: _TheNightsProposals(RECORDED))

    root = tmp_path / "nb"
    (root / KERNEL).mkdir(parents=True)
    for notebook in sorted((RECORDED / KERNEL).glob("000[0-9]-*.ipynb")):
        shutil.copy(notebook, root / KERNEL / notebook.name)
    runner = ReplayRunner(RECORDED)
    # That night's loop screened nothing (screening came later): a screening would be a request nothing recorded.
    # Two tuning trials of its three: 0011 and its re-measure 0012 spend the budget before 0013.
    config = NightlyConfig(kernels=[KernelJob(name=KERNEL, target="backward", budget=2)], device="cuda",
                           guardrails=str(ROOT / "guardrails.yaml"), screen=0)
    code, path = Nightly(config, root=root, reports=tmp_path / "reports", echo=lambda text: None,
                         runner=runner).run()
    summary = json.loads(path.with_suffix(".json").read_text())
    assert code == 0 and summary["errors"] == 0 and summary["regressions"] == 0, json.dumps(summary)[:3000]
    assert runner.served == [10, 11, 12]
    (kernel,) = summary["kernels"]
    assert kernel["revalidation"].startswith("best vs baseline on backward:")
    recorded = {t.trial_id: t for t in load_trials(KERNEL, RECORDED)}
    assert [(t["kind"], t["verdict"]) for t in kernel["trials"]] == [
        (recorded[n].kind, recorded[n].verdict) for n in (10, 11, 12)]
    assert summary["stack"]["gpu"] == recorded[12].fingerprint.gpu  # the stack the recordings ran on

    # The next night on the same stack: nothing to re-validate, and tonight's budget is spent.
    code, path = Nightly(config, root=root, reports=tmp_path / "reports", echo=lambda text: None,
                         runner=ReplayRunner(RECORDED)).run()
    (kernel,) = json.loads(path.with_suffix(".json").read_text())["kernels"]
    assert code == 0 and kernel["revalidation"].startswith("skipped: the software stack is unchanged since trial 0010")
    assert kernel["trials_run"] == 0


def test_a_replay_answers_a_request_only_with_a_recording_of_the_suite_it_asks_for(tmp_path):
    """The recorded H200 trials timed the GPU suite: a request for the tuning split of the model suite finds none
    of them (the loop would otherwise judge shapes it never asked for); a request for the device's suite does."""
    with pytest.raises(UserError, match="replay: no cuda trial"):
        run_trial(KERNEL, baseline_path(KERNEL), None, root=tmp_path / "nb", runner=ReplayRunner(RECORDED),
                  suite="models-tune")
    served = run_trial(KERNEL, baseline_path(KERNEL), None, root=tmp_path / "nb", runner=ReplayRunner(RECORDED))
    assert served.result.suite == "gpu"
