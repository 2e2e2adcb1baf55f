"""The optimize loop in interpreter mode: runs, stops with a reason, survives being killed, resumes."""

import os
import signal
import subprocess
import sys
import time

import pytest

from liger_perf.record.schema import VERDICTS
from liger_perf.judge.guardrails import Guardrails
from liger_perf.record.history import accepted_chain, load_trials
from liger_perf.loop import OptimizeLoop
from liger_perf.propose.rules import RulesProposer
from liger_perf.kernel.registry import baseline_path
from liger_perf.run import run_trial
from liger_perf.record.store import Store

from broken_variants import ROOT
from made_trials import make_trial

ARGS = ["optimize", "relu_squared", "--target", "forward", "--repetitions", "2", "--no-convergence"]


def _source_trial(n, source, against=None, verdict=None, **extra):
    """Trial ``n`` of the module ``source`` (its knobs read from it), run against ``against``'s source (then with
    one timing row measured side by side)."""
    from liger_perf.kernel.variants import read_knobs, source_hash

    timed = {"timing": {"rows": [{"pass": "backward", "shape": "8x64", "dtype": "float32", "contender": "candidate",
                                  "relative_to": "against", "ratio": 1.1}]}} if against else {}
    return make_trial(trial_id=n, name=f"t{n}", variant={"sha256": source_hash(source), "source": source,
                                                        "knobs": read_knobs(source)[0]},
                      against={"sha256": source_hash(against)} if against else None, verdict=verdict,
                      **{**timed, **extra})


def _env(tmp_path):
    return {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1",
            "LIGER_PERF_NOTEBOOKS": str(tmp_path / "notebooks"), "LIGER_PERF_REPORTS": str(tmp_path / "reports")}


def _check_history_intact(folder):
    trials = load_trials("relu_squared", folder.parent)
    ids = [t.trial_id for t in trials]
    assert ids == sorted(set(ids))
    assert sum(t.name == "baseline" for t in trials) == 1
    measured = [t.variant_sha for t in trials if not t.name.endswith("-remeasure")]
    assert len(measured) == len(set(measured)), "a variant ran twice"
    assert all(t.verdict for t in trials if t.name != "baseline"), "a trial was left unjudged"
    assert not list(folder.glob(".*.partial.ipynb")) and not (folder / ".optimize.lock").exists()
    return trials


@pytest.mark.slow
def test_killed_in_the_middle_of_a_trial_the_loop_resumes_from_the_notebooks(tmp_path):
    env = _env(tmp_path)
    folder = tmp_path / "notebooks" / "interpret" / "relu_squared"  # the interpreter's history
    command = [sys.executable, "-m", "liger_perf", *ARGS, "--budget", "4"]
    process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    deadline = time.time() + 600
    while not list(folder.glob(".0001-*.partial.ipynb")):  # the first proposed trial is running
        assert process.poll() is None and time.time() < deadline, process.stdout.read().decode()[-3000:]
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)  # the loop and the trial's kernel process, mid-trial
    process.wait()
    assert [p.name for p in Store(folder.parent).trial_notebooks("relu_squared")] == ["0000-baseline.ipynb"]
    assert (folder / ".optimize.lock").exists()  # left behind by the killed run

    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dropping .0001-" in done.stderr  # the half-written trial is discarded, not half-read
    assert "stopped:" in done.stdout and "report:" in done.stdout
    trials = _check_history_intact(folder)
    assert trials[0].name == "baseline" and len(trials) >= 2
    # The killed trial left no notebook, so its number and its proposal are taken again, and this time complete.
    assert trials[1].trial_id == 1 and trials[1].name == "block-size-4096"
    assert (tmp_path / "reports" / "interpret" / "relu_squared" / "report.md").is_file()
    report = (tmp_path / "reports" / "interpret" / "relu_squared" / "report.md").read_text()
    assert "| 0001 | block-size-4096 |" in report and "## The winning change" in report
    diff = subprocess.run([sys.executable, "-m", "liger_perf", "diff", "relu_squared"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert diff.returncode == 0, diff.stderr
    accepted = [t for t in trials if t.verdict == "accepted"]
    if accepted:  # CPU timings decide whether anything was accepted; either way the answer is stated
        changed = [line for line in diff.stdout.splitlines() if line.startswith(("+ ", "- ", "+\t", "-\t"))
                   or (line[:1] in "+-" and not line.startswith(("+++", "---")))]
        assert changed and all("KNOBS" not in line for line in changed)  # only the changed knob lines
    else:
        assert "no accepted variant yet" in diff.stderr


@pytest.mark.slow
def test_piped_to_a_log_the_loop_prints_a_plain_line_for_each_step_of_each_trial(tmp_path):
    """Piped (nohup, tee, CI), `optimize` printed nothing for 219 s: the live status line shows on a terminal
    only. Now every trial's steps are plain lines, in order, before the line that ends the trial."""
    done = subprocess.run([sys.executable, "-m", "liger_perf", *ARGS, "--budget", "2"], env=_env(tmp_path), cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "a short loop (2 trials)" in done.stdout
    trials = load_trials("relu_squared", tmp_path / "notebooks" / "interpret")
    assert [t.trial_id for t in trials] == [0, 1]
    for trial in trials:
        label = f"  {trial.trial_id:04d} {trial.name}: "
        said = [line.removeprefix(label) for line in lines if line.startswith(label)]
        steps = [line.split(" ")[0] for line in said]
        assert said and said[0].startswith("importing the variant"), lines
        # A staged trial runs its full gate only when its timing would be accepted (under the interpreter that
        # is noise): each gate that ran has its lines.
        ran = {"gate"} if trial.correctness.stage == "full" else {"quick"}
        assert ran | {"timing", "accuracy"} <= set(steps), said
        assert steps.count("gate") < 4 and steps.count("timing") < 4, said  # a line per step, not one per case
        end = next(i for i, line in enumerate(lines) if line.startswith(f"  {trial.notebook}: "))
        assert max(i for i, line in enumerate(lines) if line.startswith(label)) < end


def test_the_plain_log_says_each_change_of_step_once_and_a_running_step_again_after_a_while(tmp_path):
    import json

    from liger_perf.run.progress import FILE_NAME, PlainLog

    lines, now = [], time.time()
    running = {3: ("0003 wider", str(tmp_path), now - 10, None)}
    log = PlainLog(lambda: running, lines.append, every_s=3600)
    with (tmp_path / FILE_NAME).open("w") as f:
        for i, (step, done) in enumerate([("gate", 1), ("gate", 2), ("timing", 1), ("timing", 2)]):
            f.write(json.dumps({"t": now - 9 + i, "step": step, "done": done, "total": 2, "detail": "x\x1b[2J"}) + "\n")
        f.write("{torn")
    log.flush(3)
    assert [line.split(" · ")[0] for line in lines] == ["  0003 wider: gate 1/2 (x?[2J)",
                                                        "  0003 wider: timing 1/2 (x?[2J)"]
    log.flush(3)
    assert len(lines) == 2  # nothing new
    log.every_s = 0
    log.poll()  # a step that runs on: said again
    assert len(lines) == 3 and lines[-1].startswith("  0003 wider: timing 2/2")


def test_a_running_step_is_estimated_at_its_own_kind_s_pace(tmp_path):
    """A baseline trial takes about twice a candidate's (0067: 374 s against 189-229 s on the H200); the status
    line estimates each step by the pace of its kind, and a screening by the cases it times."""
    from liger_perf.propose import get_proposer
    from liger_perf.record.history import trial_pace
    from liger_perf.record.schema import ScreenEntry, Screening, TrialRequest
    from liger_perf.run import PlanOnly
    from liger_perf.run.progress import pace_kind

    def request(**fields):
        return TrialRequest(kernel="relu_squared", trial_id=1, variant="v.py", artifacts="a", **fields)

    assert pace_kind(request()) == "baseline"
    assert pace_kind(request(against="best.py")) == "experiment"
    assert pace_kind(request(against="best.py", kind="screening")) == "screening"
    history = [make_trial(kind="experiment", elapsed_s=374), make_trial(kind="screening", elapsed_s=217),
               make_trial(kind="experiment", elapsed_s=200, against={"sha256": "b"}),
               make_trial(kind="experiment", elapsed_s=150, against={"sha256": "b"})]
    assert [trial_pace(history, kind=pace_kind(r)) for r in (request(), request(against="b.py"),
                                                            request(against="b.py", kind="screening"))] == [
        374, 200, 217]  # a candidate's pace counts every experiment, the baseline's too (374, 200, 150)
    loop = OptimizeLoop("relu_squared", Guardrails(), get_proposer("rules"), device="interpret", root=tmp_path,
                        runner=PlanOnly("interpret", 1))
    cases = loop.spec.cases("interpret", "bench")
    history[1] = history[1].model_copy(update={"step_seconds": {"time": 200.0}, "screening": Screening(
        target="forward", timing=[{"pass": "forward", "shape": "x".join(map(str, c.shape)),
                                   "dtype": str(c.dtype).removeprefix("torch."), "contender": "0-a"}
                                  for c in cases])})  # one candidate at every case: 17 s + 200 s
    entries = [ScreenEntry(name=f"{i}-a", variant=f"/{i}.py") for i in range(2)]
    # Two candidates at the same cases: the same 200 s of timing (a case's cost, not a candidate's).
    assert [loop.request_pace(history, r) for r in (request(), request(against="b.py"), request(
        against="b.py", kind="screening", screen=entries))] == [374, 200, pytest.approx(17 + len(cases) * 50)]


@pytest.mark.slow
def test_a_trial_finished_but_not_judged_is_judged_on_resume_and_the_budget_stops_the_loop(tmp_path):
    root = tmp_path / "notebooks"
    fast = dict(device="interpret", repetitions=2, convergence=False, root=root)
    run_trial("relu_squared", baseline_path("relu_squared"), **fast)
    variant = tmp_path / "wider.py"
    variant.write_text(baseline_path("relu_squared").read_text().replace('"num_warps": 4,', '"num_warps": 8,'))
    run_trial("relu_squared", variant, against=baseline_path("relu_squared"), name="wider", **fast)
    assert load_trials("relu_squared", root)[1].verdict is None  # the loop was killed before judging it
    aside = root / "relu_squared" / ".0001-wider.k3x9.tmp"  # a verdict's write killed before its rename
    aside.write_text("{")

    events = []
    loop = OptimizeLoop("relu_squared", Guardrails(target="forward"), RulesProposer(), device="interpret",
                        budget=1, root=root, repetitions=2, convergence=False, on_event=events.append)
    outcome = loop.run()
    assert events[0].kind == "judged-pending" and events[0].trial.trial_id == 1
    assert outcome.trials_run == 1 and "budget of 1 trial is spent" in outcome.stop_reason
    trials = _check_history_intact(root / "relu_squared")
    assert trials[1].verdict in VERDICTS and len(trials) == 3
    assert not aside.exists()


def test_interactive_stops_after_the_baseline_when_not_confirmed(tmp_path):
    shown = []
    loop = OptimizeLoop("relu_squared", Guardrails(target="backward"), RulesProposer(), device="interpret",
                        budget=5, root=tmp_path, repetitions=2, convergence=False,
                        confirm=lambda text: shown.append(text) or False)
    outcome = loop.run()
    assert "not confirmed" in outcome.stop_reason and outcome.trials_run == 1
    assert "Planned order" in shown[0] and "bwd_BLOCK_SIZE" in shown[0]
    assert [t.name for t in load_trials("relu_squared", tmp_path)] == ["baseline"]


def test_optimize_bad_input_is_one_line(tmp_path):
    env = _env(tmp_path)
    bad = tmp_path / "g.yaml"
    bad.write_text("target: backward\nmax_regression: 2\n")
    for args, expected in ((["optimize", "relu_squared", "--guardrails", str(bad)], "g.yaml:2: max_regression"),
                           (["optimize", "relu_squared", "--target", "sideways"], "--target 'sideways'"),
                           (["optimize", "relu_squared", "--proposer", "oracle"], "unknown proposer")):
        out = subprocess.run([sys.executable, "-m", "liger_perf", *args], env=env, cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
        lines = [line for line in out.stderr.splitlines() if line.strip()]
        assert out.returncode == 2 and len(lines) == 1 and expected in lines[0], out.stderr
    assert not (tmp_path / "notebooks").exists()


def test_small_gains_stop_the_loop_only_within_one_run_and_a_round_counts_by_its_best(tmp_path):
    from liger_perf.loop import OptimizeLoop as Loop

    loop = Loop("relu_squared", Guardrails(target="forward"), RulesProposer(), device="interpret", budget=9,
                root=tmp_path)
    best = make_trial()
    small = [make_trial(trial_id=i, verdict="rejected", gain=0.001) for i in (1, 2)]
    assert loop._stop_reason(small, best, trials_run=0) == ""  # an earlier run's tail
    loop.round_gains += [0.001, 0.004]
    assert "two judged rounds in a row gained less than 1%" in loop._stop_reason(small, best, trials_run=2)
    loop.round_gains[-1] = 0.2  # one candidate of a round of four gained: the round did
    assert loop._stop_reason(small, best, trials_run=2) == ""


def test_only_candidates_of_one_round_are_reconciled():
    """A trial run by hand against an older best is never reconciled with that best's round (it would
    rewrite the verdict of a trial the chain stands on)."""
    from liger_perf.loop import _rounds

    def trial(n, against, verdict):
        return make_trial(trial_id=n, against={"sha256": against}, variant={"sha256": f"v{n}"}, verdict=verdict)

    one_round = [trial(1, "base", "accepted"), trial(2, "base", "accepted"), trial(3, "v1", "rejected")]
    assert [[t.trial_id for t in r] for r in _rounds(one_round)] == [[1, 2]]
    by_hand_later = [trial(1, "base", "accepted"), trial(2, "v1", "rejected"), trial(3, "base", "accepted")]
    assert _rounds(by_hand_later) == []


def test_a_changed_baseline_carries_the_previous_best_over_as_its_first_candidate(tmp_path):
    """The baseline was fixed after a chain was accepted on it: the loop's first candidate on the new baseline is
    the old best's knob values on the new code (judged like any other), and it is proposed once. A best whose
    code differs from its baseline beyond the knobs is not carried over, and the loop says why."""
    from liger_perf.kernel.variants import with_knobs

    new = baseline_path("fused_add_rms_norm").read_text()
    old = new.replace("# Tunable knobs:", "# (the old baseline)\n# Tunable knobs:")
    tuned = with_knobs(old, {"bwd_tile_elements": 8192})

    trial = _source_trial

    history = [trial(0, old), trial(1, tuned, old, "accepted"), trial(2, new)]
    loop = OptimizeLoop("fused_add_rms_norm", Guardrails(target="backward"), RulesProposer(), device="interpret",
                        root=tmp_path)
    (carried,) = loop._carry_over(history, history[2])
    assert carried.source == with_knobs(new, {"bwd_tile_elements": 8192})
    assert carried.changes == {"bwd_tile_elements": 8192} and carried.name == "carry-over-0001"
    # Once it ran, never again; nor while the new chain has moved on.
    assert loop._carry_over([*history, trial(3, carried.source, new, "rejected")], history[2]) == []
    assert loop._carry_over(history, history[1]) == []

    rewritten = tuned.replace("def _weight_factor(", "def _weight_factor_renamed(")
    history[1] = trial(1, rewritten, old, "accepted")
    assert loop._carry_over(history, history[2]) == []
    assert "is not carried over" in loop.events[-1].message and loop.events[-1].kind == "carry-over"


def test_after_a_baseline_change_the_carry_over_s_re_measure_comes_before_an_older_chain_s_re_runs(tmp_path):
    """An inconclusive carry-over is re-measured first: it is today's chain, and once accepted it makes the older
    chain's owed re-runs of its moves needless (the H200 history's plan put 0052's re-run, from two baselines
    back, before 0077's re-measure). The older one still follows, made again on today's best."""
    from liger_perf.kernel.variants import with_knobs

    new = baseline_path("fused_add_rms_norm").read_text()
    old = new.replace("# Tunable knobs:", "# (the old baseline)\n# Tunable knobs:")
    trial = _source_trial
    history = [trial(0, old),
               trial(1, with_knobs(old, {"num_stages": 2}), old, "inconclusive", changes={"num_stages": 2}),
               trial(2, with_knobs(old, {"bwd_tile_elements": 8192}), old, "inconclusive",
                     changes={"bwd_tile_elements": 8192}),
               trial(3, new),
               trial(4, with_knobs(new, {"bwd_tile_elements": 8192}), new, "inconclusive",
                     changes={"bwd_tile_elements": 8192})]
    loop = OptimizeLoop("fused_add_rms_norm", Guardrails(target="backward"), RulesProposer(), device="interpret",
                        root=tmp_path)
    reruns = loop._reruns(history, history[3])
    # (t2's move is the carry-over's, which ran it on today's baseline: no re-run of its own is owed)
    assert [r.name for r in reruns] == ["t4-remeasure", "t1-remeasure"]
    assert reruns[1].source == with_knobs(new, {"num_stages": 2}) and reruns[1].changes == {"num_stages": 2}
    # once the carry-over is accepted, the older chain's re-run follows on it
    accepted = history[4].model_copy(update={"judged": history[4].judged.model_copy(update={"verdict": "accepted"})})
    assert accepted_chain([*history[:4], accepted], history[3].variant_sha)[1] == [accepted]
    (rerun,) = loop._reruns([*history[:4], accepted], accepted)
    assert rerun.name == "t1-remeasure" and rerun.source == with_knobs(accepted.variant.source, {"num_stages": 2})


def test_a_re_run_waits_for_a_run_on_the_target_it_was_judged_on(tmp_path):
    """0066's num_stages@1024x2=2 was inconclusive on the backward; a forward run's plan put its re-measure first,
    a trial judged on a pass the move does not change. It waits, with one line, for a backward run."""
    from liger_perf.kernel.variants import with_knobs

    base = baseline_path("fused_add_rms_norm").read_text()
    owed = _source_trial(1, with_knobs(base, {"num_stages": 2}), base, "inconclusive", changes={"num_stages": 2})
    owed = owed.model_copy(update={"judged": owed.judged.model_copy(update={"target": "backward"})})
    history = [_source_trial(0, base), owed]
    forward = OptimizeLoop("fused_add_rms_norm", Guardrails(target="forward"), RulesProposer(), device="interpret",
                           root=tmp_path)
    assert forward._reruns(history, history[0]) == []
    assert forward._reruns(history, history[0]) == []  # asked again: still one line
    assert [e.message for e in forward.events if e.kind == "waits"] == [
        "t1-remeasure waits: trial 0001 was judged on the backward, this run tunes the forward (run with --target "
        "backward to take it)"]
    backward = OptimizeLoop("fused_add_rms_norm", Guardrails(target="backward"), RulesProposer(),
                            device="interpret", root=tmp_path)
    assert [r.name for r in backward._reruns(history, history[0])] == ["t1-remeasure"]


def test_until_a_changed_baseline_is_measured_bench_and_patch_keep_the_latest_earlier_best(tmp_path, monkeypatch):
    """A baseline change must not hand models the new code without the tuned knobs before the loop has measured
    it: `bench` and `patch` keep the latest earlier baseline's best (not an older one) while no trial against the
    new baseline was accepted or rejected (an inconclusive one measures nothing), then the new chain rules."""
    from liger_perf.kernel.variants import with_knobs
    from liger_perf.record import history

    new = baseline_path("fused_add_rms_norm").read_text()
    older = new.replace("# Tunable knobs:", "# (the older baseline)\n# Tunable knobs:")
    old = new.replace("# Tunable knobs:", "# (the old baseline)\n# Tunable knobs:")
    older_tuned = with_knobs(older, {"bwd_tile_elements": 4096})
    tuned = with_knobs(old, {"bwd_tile_elements": 8192})
    carried = with_knobs(new, {"bwd_tile_elements": 8192})

    trial = _source_trial

    trials = [trial(0, older), trial(1, older_tuned, older, "accepted"), trial(2, old),
              trial(3, tuned, old, "accepted")]
    monkeypatch.setattr(history, "load_trials", lambda kernel, root: trials)

    def best():
        return history.best_variant_file("fused_add_rms_norm", tmp_path).read_text()

    assert best() == tuned  # no trial of today's baseline yet; the latest earlier best, not the older one
    trials.append(trial(4, new))
    assert best() == tuned  # its baseline trial alone
    trials.append(trial(5, carried, new, "inconclusive"))
    assert best() == tuned
    trials.append(trial(6, carried, new, "accepted"))
    assert best() == carried
    # Rejected without a measurement (crashed, failed the gate, a re-check owed): nothing was learnt.
    for unmeasured in ({"status": "crashed"}, {"status": "failed-correctness"}, {"recheck": True}):
        status = unmeasured.get("status", "complete")
        trials[-1] = trial(6, carried, new, "rejected", status=status)
        if "recheck" in unmeasured:
            trials[-1].judged.recheck = True
        assert best() == tuned, unmeasured
    trials[-1] = trial(6, carried, new, "rejected")  # measured: the new baseline stands as it is
    assert history.best_variant_file("fused_add_rms_norm", tmp_path) == baseline_path("fused_add_rms_norm")
    # Two changes in a row with nothing measured in between reach back to the last best that was.
    trials[:] = [trial(0, older), trial(1, older_tuned, older, "accepted"), trial(2, old)]
    assert best() == older_tuned
    trials.append(trial(3, with_knobs(old, {"bwd_tile_elements": 512}), old, "rejected"))
    assert history.best_variant_file("fused_add_rms_norm", tmp_path) == baseline_path("fused_add_rms_norm")
    # A tuned variant trialled by hand against nothing is no baseline of its own (the candidates rejected against
    # it measured nothing about a baseline).
    trials[:] = [trial(0, old), trial(1, tuned, old, "accepted"), trial(2, with_knobs(tuned, {"num_warps": 8}),
                                                                         tuned, "rejected"),
                 trial(3, tuned), trial(4, new)]
    assert best() == tuned
    trials[:] = [trial(0, new)]
    assert history.best_variant_file("fused_add_rms_norm", tmp_path) == baseline_path("fused_add_rms_norm")


def test_diff_shows_the_kept_best_against_the_baseline_it_was_tuned_on(monkeypatch):
    """`diff` while a changed baseline is unmeasured: the best `bench` and `patch` keep, diffed from its own
    baseline's source (the tuning alone, not today's change undone), with one line saying why."""
    from typer.testing import CliRunner

    from liger_perf import cli
    from liger_perf.kernel.variants import with_knobs
    from liger_perf.record import history

    new = baseline_path("fused_add_rms_norm").read_text()
    old = new.replace("# Tunable knobs:", "# (the old baseline)\n# Tunable knobs:")
    tuned = with_knobs(old, {"bwd_tile_elements": 8192})

    trial = _source_trial

    trials = [trial(0, old), trial(1, tuned, old, "accepted"), trial(2, new)]
    monkeypatch.setattr(history, "load_trials", lambda kernel, root: trials)
    result = CliRunner().invoke(cli.app, ["diff", "fused_add_rms_norm"])
    assert result.exit_code == 0, result.output
    assert "--- trial 0000 baseline\n+++ trial 0001 t1" in result.stdout
    assert "the old baseline" not in result.stdout and '+    "bwd_tile_elements": 8192' in result.stdout
    assert "keep that trial" in result.stderr


def test_a_carry_over_lists_only_the_moves_the_new_baseline_has_not_made(tmp_path):
    from liger_perf.kernel.variants import source_hash, with_knobs

    current = baseline_path("fused_add_rms_norm").read_text()
    new = with_knobs(current, {"num_stages": 2})
    old = current.replace("# Tunable knobs:", "# (the old baseline)\n# Tunable knobs:")
    tuned = with_knobs(old, {"bwd_tile_elements": 8192, "num_stages": 2})

    trial = _source_trial

    loop = OptimizeLoop("fused_add_rms_norm", Guardrails(target="backward"), RulesProposer(), device="interpret",
                        root=tmp_path)
    loop.baseline_sha = source_hash(new)
    (carried,) = loop._carry_over([trial(0, old), trial(1, tuned, old, "accepted"), trial(2, new)], trial(2, new))
    assert carried.changes == {"bwd_tile_elements": 8192}


def test_a_carry_over_takes_the_old_best_s_dispatch_entries_and_the_old_baseline_without_a_table_too(tmp_path):
    """The old best's entries are carried bucket by bucket; a baseline from before tables (none in its source)
    carries its best's knob values onto today's baseline, whose table starts empty."""
    from liger_perf.kernel.variants import read_dispatch, with_knobs

    new = baseline_path("fused_add_rms_norm").read_text()
    old = new.replace("# Tunable knobs:", "# (the old baseline)\n# Tunable knobs:")
    tuned = with_knobs(old, {"bwd_tile_elements@8192x2": 16384, "num_warps": 8})

    trial = _source_trial

    loop = OptimizeLoop("fused_add_rms_norm", Guardrails(target="backward"), RulesProposer(), device="interpret",
                        root=tmp_path)
    (carried,) = loop._carry_over([trial(0, old), trial(1, tuned, old, "accepted"), trial(2, new)], trial(2, new))
    assert carried.changes == {"num_warps": 8, "bwd_tile_elements@8192x2": 16384}
    assert read_dispatch(carried.source) == {"8192x2": {"bwd_tile_elements": 16384}}
    # An old baseline with entries: the tip dropped one back to the default (a move too), and a plain move made
    # another redundant (no move there: the tip runs that value in that bucket as the old baseline did).
    entered = with_knobs(old, {"num_warps@1024x2": 8, "num_stages@8192x2": 2})
    tip = with_knobs(entered, {"num_warps@1024x2": "auto", "num_stages": 2})
    (carried,) = loop._carry_over([trial(0, entered), trial(1, tip, entered, "accepted"), trial(2, new)],
                                  trial(2, new))
    assert carried.changes == {"num_stages": 2}  # today's baseline runs the default in 1024x2 already
    # Before tables: no DISPATCH line in the old baseline nor its best.
    untabled = old.replace("\nDISPATCH = {}\n", "\n")
    best = with_knobs(untabled, {"num_warps": 8})
    (carried,) = loop._carry_over([trial(0, untabled), trial(1, best, untabled, "accepted"), trial(2, new)],
                                  trial(2, new))
    assert carried.changes == {"num_warps": 8} and read_dispatch(carried.source) == {}


def test_a_round_packs_only_the_trials_that_end_before_the_deadline():
    """Kept candidates run one after another per worker: at 100 s a trial and 250 s left, two end in time (at 100
    and 200 s), the third would end at 300 s; two workers run two at a time; without a pace (no trial finished
    yet) all of them; a trial longer than the time left, or past the deadline, none."""
    from liger_perf.record.history import trial_pace
    from liger_perf.loop import trials_within

    assert trials_within(250, 100, 1, 5) == 2
    assert trials_within(300, 100, 1, 5) == 3  # the third ends on the deadline
    assert trials_within(250, 100, 2, 8) == 4
    assert trials_within(250, None, 1, 5) == 5
    assert trials_within(99, 100, 1, 5) == 0
    assert trials_within(-3, 100, 1, 5) == trials_within(0, None, 1, 5) == 0  # a screening ran past the deadline
    assert trials_within(250, 100, 1, 0) == 0
    trials = [make_trial(kind="experiment", elapsed_s=s) for s in (50, 400, 90, 110, 100, 95)]
    trials.append(make_trial(kind="screening", elapsed_s=5))
    trials.append(make_trial(kind="experiment", status="crashed", elapsed_s=1))
    assert trial_pace(trials) == 100  # the last five complete experiments: 400, 90, 110, 100, 95
    assert trial_pace(trials[:4]) == 110  # 50, 400, 90, 110: the upper of the middle two
    assert trial_pace([]) is None
    assert trial_pace(trials, kind="screening") == 5
    assert trial_pace(trials, kind="baseline") == 100  # none ran against another: all of them are baselines
    trials[4] = trials[4].model_copy(update={"against": {"sha256": "b"}})  # the 100 s one ran against a best
    assert trial_pace(trials, kind="baseline") == 95  # 50, 400, 90, 110, 95


def test_a_candidate_s_trial_is_paced_as_one_that_may_be_accepted():
    """A rejected trial skips the full gate and profiles lightly; an accepted one runs both (H200: 0084 began by a
    pace of 250 s, the median of five trials, four not accepted, and was killed in its full gate, twice). A
    candidate's pace is the recent trials' median time outside those steps plus the longest those steps took in the
    last five that ran the full gate; a baseline trial always runs them, so its pace stays its plain median."""
    from liger_perf.record.history import trial_pace

    def trial(elapsed_s, full_gate, profile, against=True, **fields):
        # A skipped full gate still records its few milliseconds, and says "not run" in the gate's record.
        gated = full_gate >= 1
        return make_trial(kind="experiment", elapsed_s=elapsed_s, against={"sha256": "b"} if against else None,
                          step_seconds={"precompile": 30.0, "time": 150.0, "full_gate": full_gate,
                                        "profile": profile},
                          correctness={"passed": True, "stage": "full" if gated else "quick",
                                       "full_gate": "" if gated else "not run: rejected"}, **fields)

    # Outside the two steps: 230, 155, 228, 177, 211 s (median 211); the gated ones' two steps: 175 and 115 s.
    recent = [trial(252, 0, 22), trial(177, 0.01, 22), trial(250, 0, 22), trial(292, 56, 59), trial(235, 0, 24)]
    history = [trial(378, 95, 80), *recent]
    assert trial_pace(history) == pytest.approx(211 + 175)
    # Before any trial ran the full gate, or recorded its steps: the plain median. A skipped gate's milliseconds
    # do not make a trial gated (counted, the longest light profile, 80 s, would be added to 230 s outside).
    assert trial_pace([trial(200, 0.01, 80), trial(260, 0.01, 20), trial(250, 0.01, 20)]) == 250
    assert trial_pace([make_trial(kind="experiment", elapsed_s=s) for s in (90, 110, 100)]) == 100
    # The last five gated trials only: an old slow gate is forgotten.
    old_gate = trial(900, 600, 80)
    assert trial_pace([old_gate, *[trial(292, 56, 59)] * 5, *recent]) == pytest.approx(211 + 115)
    assert trial_pace([old_gate, *[trial(292, 56, 59)] * 3, *recent]) == pytest.approx(211 + 680)
    # Nor does a crashed trial's, or another suite's, gate count.
    crashed, other_suite = trial(900, 600, 80, status="crashed"), trial(900, 600, 80, suite="models-tune")
    assert trial_pace([crashed, other_suite, *history]) == pytest.approx(211 + 175)
    # A trial whose two steps outran its recorded time (clocks of two processes) leaves nothing outside them.
    assert trial_pace([trial(100, 90, 30)]) == pytest.approx(0 + 120)
    # A baseline trial's pace is its kind's plain median (330 s): it runs the full gate and NCU whatever the verdict,
    # where the candidates' rule would add the longest of their two steps (190 s) to the median outside (225 s).
    baselines = [trial(330, 60, 45, against=False), trial(300, 150, 40, against=False)]
    assert trial_pace([*history, *baselines], kind="baseline") == 330


def test_a_trial_timed_on_fewer_cases_is_paced_by_its_cases():
    """A move confined to a bucket is timed on that bucket's cases alone (``TrialRequest.buckets``): its pace is
    the recent trials' time outside the timing and the acceptance steps, its cases at the recent seconds per timed
    case, and the acceptance steps as before (H200: 0085 timed 171 cases in 141 s of its 352; bucket 4096x2 holds
    30)."""
    from liger_perf.record.history import trial_pace

    rows = [{"pass": "backward", "shape": f"{n}x1024", "dtype": "float32", "contender": contender}
            for n in range(1, 51) for contender in ("candidate", "against")]  # 50 cases, 3 s each
    recent = [make_trial(kind="experiment", elapsed_s=300, against={"sha256": "b"}, timing={"rows": rows},
                         step_seconds={"time": 150.0, "full_gate": 50.0, "profile": 40.0},
                         correctness={"passed": True, "stage": "full"}) for _ in range(5)]
    assert trial_pace(recent) == pytest.approx(300)
    assert trial_pace(recent, timed=50) == pytest.approx(300)  # the whole suite: the same
    assert trial_pace(recent, timed=10) == pytest.approx(60 + 30 + 90)
    # A history whose trials recorded no timing seconds: the plain pace, whatever is asked.
    bare = [make_trial(kind="experiment", elapsed_s=s) for s in (90, 110, 100)]
    assert trial_pace(bare, timed=10) == 100


def test_a_move_confined_to_dispatch_buckets_is_timed_on_their_shapes_alone(tmp_path):
    """The loop asks a trial to time only the move's buckets where its source is the best's with only their
    entries changed (``judge.confined_buckets``): not for a default's change, a rewrite, or a best without the
    baseline's lookup, nor where the guardrails say to time every shape."""
    from liger_perf.kernel.variants import with_knobs
    from liger_perf.propose import Proposal

    base = baseline_path("fused_add_rms_norm").read_text()
    loop = OptimizeLoop("fused_add_rms_norm", Guardrails(target="backward"), RulesProposer(), device="interpret",
                        root=tmp_path)

    def move(changes, source=None, on=base):
        return Proposal("m", source or with_knobs(on, changes), "h", "p", changes=changes)

    # The interpreter's suite: 16x64 and 9x200, in float32 and float16 (buckets 64x4, 256x4, 64x2, 256x2).
    confined = move({"num_warps@256x2": 8, "num_stages@64x4": 2})
    assert loop.timed_buckets(confined, base) == ["256x2", "64x4"]
    assert loop.timed_buckets(move({"num_warps": 8}), base) == []  # a default: every shape changes
    assert loop.timed_buckets(move({"num_warps@256x2": 8, "num_warps": 8}), base) == []
    rewritten = with_knobs(base, {"num_warps@256x2": 8}) + "\n# and something else\n"
    assert loop.timed_buckets(move({"num_warps@256x2": 8}, rewritten), base) == []
    other = base + "\n\ndef _unused():\n    return None\n"  # a best whose code is not the baseline's
    assert loop.timed_buckets(move({"num_warps@256x2": 8}, on=other), other) == []
    assert loop.timed_buckets(confined, "") == []  # no best: a baseline trial
    # Buckets no shape of the suite falls in: the whole suite (the judge finds nothing of theirs to judge).
    assert loop.timed_buckets(move({"num_warps@8192x2": 8}), base) == []
    assert loop.timed_buckets(move({"num_warps@8192x2": 8, "num_warps@256x2": 4}), base) == ["256x2", "8192x2"]
    request = loop._request(confined, baseline_path("fused_add_rms_norm"))
    assert request.buckets == ["256x2", "64x4"]
    assert loop._request(move({"num_warps": 8}), baseline_path("fused_add_rms_norm")).buckets == []
    everywhere = OptimizeLoop("fused_add_rms_norm", Guardrails(target="backward", time_outside_buckets=True),
                              RulesProposer(), device="interpret", root=tmp_path)
    assert everywhere.timed_buckets(confined, base) == []


def test_a_screenings_pace_is_its_time_outside_the_timing_plus_its_cases_at_their_recent_pace():
    """On the H200 a screening of one bucket's moves (0074: 8 cases, 61 s) took a quarter of one of the whole
    tuning split (0070, 0072: 57 cases, 244 and 265 s), and the median of whole screenings kept such a screening
    from starting with 169 s left (the fifteenth session's third call). Its timing costs per case, whatever the
    number of candidates (0053, 0055, 0057: 148, 159, 157 s for two, three and four candidates at 50 cases). A
    screening's pace is the recent ones' median time outside their timing, plus the cases it times at their median
    seconds per timed case."""
    from liger_perf.record.history import screening_pace

    def screening(elapsed_s: float, timing_s: float | None, cases: int, candidates: int = 2, suite: str = "",
                  rows: bool = True):
        timing = [{"shape": f"{i + 1}x8", "dtype": "float32", "pass": "backward", "contender": f"{c}-a"}
                  for i in range(cases) for c in range(candidates)]
        return make_trial(kind="screening", elapsed_s=elapsed_s, suite=suite,
                          step_seconds={"check": 5.0, **({"time": timing_s} if timing_s else {})},
                          screening={"target": "backward", "timing": timing,
                                     "rows": [{"name": f"c{c}", "sha256": f"{c}"}
                                              for c in range(candidates if rows else 0)]})

    # Outside the timing: 40, 60, 50 s (median 50); a timed case: 4.0, 2.0, 2.5 s (median 2.5), though the second
    # timed twice the candidates of the first (per timing: 2.0, 0.5, 0.83 s).
    history = [screening(240, 200, 50), screening(160, 100, 50, candidates=4), screening(90, 40, 16, candidates=3)]
    assert screening_pace(history, cases=8) == pytest.approx(50 + 8 * 2.5)
    assert screening_pace(history, cases=57) == pytest.approx(50 + 57 * 2.5)
    # Two screenings: the upper of the middle two, each (60 s outside, 4.0 s a case).
    assert screening_pace(history[:2], cases=8) == pytest.approx(60 + 8 * 4.0)
    # A timing longer than the notebook's own elapsed time (clocks of two processes) leaves nothing outside it.
    assert screening_pace([screening(50, 80, 10)], cases=5) == pytest.approx(0 + 5 * 8.0)
    # Without the count, or with no screening that recorded its timing's seconds: the median screening.
    assert screening_pace(history) == 160
    assert screening_pace([screening(240, None, 200), screening(90, None, 50)], cases=8) == 240
    assert screening_pace([], cases=8) is None
    # A screening without its timing's seconds is left out of the parts, not taken as all overhead.
    assert screening_pace([*history, screening(500, None, 10)], cases=8) == pytest.approx(50 + 8 * 2.5)
    # Nor do five of them (a screening whose candidates all failed their gate times nothing) hide the timed ones.
    assert screening_pace([*history, *[screening(500, None, 10)] * 5], cases=8) == pytest.approx(50 + 8 * 2.5)
    # The last five only: of three slow old ones (900 s outside the timing, 20 s a case), two are left.
    old = screening(1000, 100, 5)
    assert screening_pace([old, old, old, *history], cases=8) == pytest.approx(60 + 8 * 4.0)
    # Another suite's screenings do not count (two of them would move both medians).
    other = screening(30, 29, 1000, suite="models-tune")
    assert screening_pace([*history, other, other], cases=8) == pytest.approx(50 + 8 * 2.5)
    # With the candidates' number, the part outside the timing is per variant, the current best's and each
    # candidate's: 40/3, 60/5, 50/4 s (median 12.5), so 8 x 12.5 for seven candidates.
    assert screening_pace(history, cases=8, candidates=7) == pytest.approx(8 * 12.5 + 8 * 2.5)
    # A screening that recorded no candidates counts in the plain median only; none, or no count: the plain one.
    assert screening_pace([*history, screening(70, 10, 8, rows=False)], cases=8, candidates=7) == \
        pytest.approx(8 * 12.5 + 8 * 2.5)
    assert screening_pace([screening(70, 10, 8, rows=False)], cases=8, candidates=7) == pytest.approx(60 + 8 * 1.25)
    assert screening_pace(history, cases=8, candidates=0) == screening_pace(history, cases=8)


def test_a_baseline_trial_the_deadline_would_cut_off_is_not_begun(tmp_path, monkeypatch):
    """The baseline changed and its trial would end after --max-minutes at the pace of the earlier baseline
    trials (not of the shorter candidates' trials): the loop stops at once and says why; with time enough it
    begins it."""
    import time as clock

    loop = OptimizeLoop("relu_squared", Guardrails(target="backward"), RulesProposer(), device="interpret",
                        budget=5, root=tmp_path, repetitions=2, convergence=False, deadline=clock.time() + 300)
    history = [make_trial(kernel="relu_squared", trial_id=0, kind="experiment", elapsed_s=380,
                          variant={"sha256": "an earlier baseline"})]
    history += [make_trial(kernel="relu_squared", trial_id=i, kind="experiment", elapsed_s=100,
                           variant={"sha256": f"v{i}"}, against={"sha256": "an earlier baseline"},
                           verdict="rejected") for i in (1, 2, 3)]
    monkeypatch.setattr(loop, "_trials", lambda: history)
    begun = []
    monkeypatch.setattr(loop, "_run_all", lambda requests: begun.append(requests) or [])
    outcome = loop.run()
    assert "a baseline trial takes about 380 s here" in outcome.stop_reason and outcome.best is None
    assert begun == [] and outcome.trials_run == 0
    loop.deadline = clock.time() + 400
    with pytest.raises(IndexError):  # begun: the stub ran nothing, so there is no result to read
        loop.run()
    assert len(begun) == 1 and begun[0][0].name == "baseline"


def test_bucket_moves_of_one_round_compare_by_the_suite_and_the_superseded_one_is_made_again_on_the_winner(
        tmp_path, monkeypatch):
    """Two one-bucket moves accepted side by side: the one that gains more over the whole suite stays (a large gain
    in a narrow bucket is not set above a smaller gain everywhere), and the other is re-trialled as its own move
    made on the winner, so the two entries combine."""
    from liger_perf.kernel.variants import read_dispatch, read_knobs, source_hash, with_knobs
    from liger_perf.record.schema import Verdict

    base = baseline_path("fused_add_rms_norm").read_text()
    narrow = with_knobs(base, {"num_warps@1024x2": 8})
    wide = with_knobs(base, {"num_warps@8192x2": 8})

    def trial(n, source, changes, gain, suite_gain, against=base):
        return make_trial(trial_id=n, name=f"t{n}", notebook=str(tmp_path / f"{n}.ipynb"), changes=changes,
                          variant={"sha256": source_hash(source), "source": source, "knobs": read_knobs(source)[0]},
                          against={"sha256": source_hash(against)}).model_copy(update={"judged": Verdict(
                              verdict="accepted", gain=gain, suite_gain=suite_gain)})

    first = trial(1, narrow, {"num_warps@1024x2": 8}, gain=0.30, suite_gain=0.02)
    second = trial(2, wide, {"num_warps@8192x2": 8}, gain=0.10, suite_gain=0.05)
    loop = OptimizeLoop("fused_add_rms_norm", Guardrails(target="backward"), RulesProposer(), device="interpret",
                        root=tmp_path)
    monkeypatch.setattr("liger_perf.loop.record_verdict", lambda notebook, verdict: None)  # no notebooks here
    loop._reconcile([first, second])
    assert first.verdict == "rejected" and first.judged.superseded_by == 2 and second.verdict == "accepted"
    (rerun,) = loop._reruns([first, second], second)
    assert rerun.name == "t1-retrial" and rerun.changes == {"num_warps@1024x2": 8}
    assert read_dispatch(rerun.source) == {"1024x2": {"num_warps": 8}, "8192x2": {"num_warps": 8}}
    # Once that re-run is in the history, it is not proposed again.
    again = trial(3, rerun.source, rerun.changes, gain=0.0, suite_gain=0.0, against=wide)
    again = again.model_copy(update={"judged": Verdict(verdict="rejected")})
    assert loop._reruns([first, second, again], second) == []


def test_a_plan_shows_the_next_step_and_runs_screens_judges_and_writes_nothing(tmp_path, monkeypatch):
    """`liger-perf plan`: before the baseline's trial, that trial; then the proposer's batch as one screening
    (more candidates than the round has room for), or as a full trial without screening, and an inconclusive
    trial's re-run ahead of it; a trial left without a verdict is judged first, in memory. Nothing is run,
    screened or written, and the notebooks keep no verdict of the plan's."""
    from liger_perf.kernel.variants import with_knobs
    from liger_perf.run import PlanOnly

    base = baseline_path("fused_add_rms_norm").read_text()
    loop = OptimizeLoop("fused_add_rms_norm", Guardrails(target="backward"), RulesProposer(), root=tmp_path,
                        runner=PlanOnly("cuda"), screen=3)
    history = []
    monkeypatch.setattr("liger_perf.loop.load_trials", lambda kernel, root: [t.model_copy() for t in history])
    for step in ("_run_all", "_screen"):
        monkeypatch.setattr(loop, step, lambda *args, step=step: pytest.fail(f"a plan called {step}"))
    monkeypatch.setattr("liger_perf.loop.record_verdict", lambda *args: pytest.fail("a plan wrote a verdict"))

    planned = loop.plan()
    assert planned.baseline_trial and planned.best is None and not planned.screening

    history.append(_source_trial(0, base, device="cuda"))
    planned = loop.plan()
    assert not planned.baseline_trial and planned.best.trial_id == 0 and planned.stop == ""
    assert planned.trials == [] and len(planned.screening) == 3
    assert len({p.source for p in planned.screening}) == 3 and all(p.changes for p in planned.screening)
    loop.screen = 0  # no screening: the proposer fills the round's one slot, a full trial
    planned = loop.plan()
    assert len(planned.trials) == 1 and planned.screening == [] and planned.trials[0].changes
    loop.screen = 3

    tried = with_knobs(base, {"num_stages": 2})
    history.append(_source_trial(1, tried, base, "inconclusive", changes={"num_stages": 2}, device="cuda"))
    history.append(_source_trial(2, with_knobs(base, {"num_stages": 3}), base, changes={"num_stages": 3},
                                 device="cuda"))  # finished, never judged
    planned = loop.plan()
    (rerun,) = planned.trials  # the round's one slot: the re-run, so no batch is asked for
    assert rerun.name == "t1-remeasure" and rerun.source == tried and planned.screening == []
    (judged,) = [note for note in planned.notes if note.startswith("optimize first records trial 0002's verdict")]
    assert history[2].verdict is None and loop._trials()[2].verdict is None  # kept in memory, for the plan only
    assert list(tmp_path.rglob("*")) == []


def test_a_plan_names_what_run_begins_first(tmp_path, monkeypatch):
    """The plan and the run agree on the first step, at each stage of a history: the baseline trial, a
    screening, a re-run, a trial left unjudged (judged first by both), two workers (a screening beside the re-run)."""
    from liger_perf.kernel.variants import with_knobs
    from liger_perf.run import PlanOnly

    base = baseline_path("fused_add_rms_norm").read_text()
    history, verdicts = [], {}
    monkeypatch.setattr("liger_perf.loop.record_verdict",
                        lambda notebook, verdict: verdicts.__setitem__(notebook, verdict))
    monkeypatch.setattr("liger_perf.loop.load_trials", lambda kernel, root: [
        t.model_copy(update={"judged": verdicts.get(t.notebook, t.judged)}) for t in history])

    class Begun(Exception):
        pass

    def raise_begun(kind, names):
        raise Begun(kind, names)

    def agree(workers=1):
        loop = OptimizeLoop("fused_add_rms_norm", Guardrails(target="backward"), RulesProposer(),
                            root=tmp_path / "run", runner=PlanOnly("cuda", workers), screen=3)
        planned = loop.plan()
        expected = (("trials", ["baseline"]) if planned.baseline_trial else
                    ("screening", [p.name for p in planned.screening]) if planned.screening else
                    ("trials", [p.name for p in planned.trials]))
        monkeypatch.setattr(loop, "_screen", lambda batch, *rest: raise_begun("screening", [p.name for p in batch]))
        monkeypatch.setattr(loop, "_run_all", lambda requests: raise_begun("trials", [r.name for r in requests]))
        with pytest.raises(Begun) as begun:
            loop.run()
        assert begun.value.args == expected
        verdicts.clear()  # the run's verdicts were the harness's; the next stage starts from the history
        return expected

    assert agree() == ("trials", ["baseline"])
    history.append(_source_trial(0, base, device="cuda", notebook="0.ipynb"))
    assert agree()[0] == "screening"
    history.append(_source_trial(1, with_knobs(base, {"num_stages": 2}), base, "inconclusive",
                                 changes={"num_stages": 2}, device="cuda", notebook="1.ipynb"))
    assert agree() == ("trials", ["t1-remeasure"])
    assert agree(workers=2)[0] == "screening"
    history.append(_source_trial(2, with_knobs(base, {"num_stages": 3}), base, changes={"num_stages": 3},
                                 device="cuda", notebook="2.ipynb"))
    agree()


def test_plan_on_the_command_line_reads_a_history_and_says_what_runs_next(tmp_path, monkeypatch):
    """The command plans from the recorded history without a GPU: the baseline trial (and why: none yet, or the
    last one ended badly), a screening with each candidate's changes and hypothesis, or nothing and why."""
    from typer.testing import CliRunner
    from liger_perf.cli import app
    from liger_perf.kernel.registry import get_spec
    from liger_perf.kernel.variants import source_hash

    monkeypatch.setenv("LIGER_PERF_NOTEBOOKS", str(tmp_path / "notebooks"))
    monkeypatch.setenv("LIGER_PERF_REPORTS", str(tmp_path / "reports"))
    history = []
    for module in ("liger_perf.loop", "liger_perf.record.history"):
        monkeypatch.setattr(f"{module}.load_trials", lambda kernel, root: list(history))
    cli = CliRunner()

    def plan(*options):
        result = cli.invoke(app, ["plan", "relu_squared", "--device", "interpret", "--target", "forward",
                                  *options])
        assert result.exit_code == 0, result.output
        assert result.output.startswith("relu_squared, the interpret history (forward")
        return result.output

    said = plan()
    assert "next: the baseline trial of kernels/relu_squared/baseline.py" in said
    assert "its source has no trial in this history yet" in said
    base = baseline_path("relu_squared").read_text()
    history.append(make_trial(kernel="relu_squared", trial_id=0, name="baseline", device="interpret",
                              status="crashed", reason="out of memory",
                              variant={"sha256": source_hash(base), "source": base}))
    assert "its last trial, 0000, ended crashed (out of memory)" in plan()

    history[0] = history[0].model_copy(update={"status": "complete", "reason": ""})
    said = plan("--screen", "2")
    assert "next: a screening of 2 candidates against trial 0000 baseline in one notebook; those that may be " \
           "faster then get full trials" in said
    assert said.count("\n    ") == 2  # each candidate's hypothesis under its name and changes
    assert "about" not in said  # no screening in the history: no pace to size the call by
    # A screening of one candidate here: 10 s outside its timing, 90 s of it; one of two candidates takes 190 s.
    timing = [{"pass": "forward", "shape": "x".join(map(str, case.shape)), "dtype": "float32", "contender": "0-a"}
              for case in get_spec("relu_squared").cases("interpret", "bench")]
    history.append(make_trial(kernel="relu_squared", trial_id=1, kind="screening", device="interpret",
                              elapsed_s=100, step_seconds={"time": 90.0}, variant={"sha256": "batch"},
                              against={"sha256": source_hash(base)},
                              screening={"target": "forward", "timing": timing}))
    assert "in one notebook (about 190 s in the notebook, by this history's recent ones)" in plan("--screen", "2")
    del history[1]
    history[0] = history[0].model_copy(update={"elapsed_s": 321.4})
    said = plan("--screen", "0")
    assert "next: 1 full trial against trial 0000 baseline (about 321 s each in the notebook, by this history's " \
           "recent ones), in this order:" in said
    tried = base.replace("# ", "#  ", 1)  # another source: a candidate that finished but was never judged
    history.append(make_trial(kernel="relu_squared", trial_id=1, name="tried", device="interpret",
                              variant={"sha256": source_hash(tried), "source": tried},
                              against={"sha256": source_hash(base)}))
    assert "optimize first records trial 0001's verdict: " in plan("--screen", "2")
    del history[1]
    said = plan("--screen", "2", "--buckets", "1024x4")
    assert "next: nothing (best: trial 0000 baseline): only buckets 1024x4 may change, but the best has no " \
           "DISPATCH table" in said  # relu²'s baseline tunes one configuration for every shape
    at_the_floor = {"rows": [{"pass": "forward", "shape": "8x64", "dtype": "float32", "contender": "candidate",
                              "bandwidth_fraction": 0.99}]}
    history[0] = make_trial(kernel="relu_squared", trial_id=0, name="baseline", device="interpret",
                            variant={"sha256": source_hash(base), "source": base}, timing=at_the_floor)
    assert "next: nothing (best: trial 0000 baseline): the best variant's forward runs at " in plan()
    assert not (tmp_path / "notebooks").exists() or not list((tmp_path / "notebooks").rglob("*.ipynb"))
