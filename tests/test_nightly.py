"""liger-perf nightly in interpreter mode: summary, lock, resume after a kill, regressions, config errors."""

import datetime
import json
import os
import signal
import subprocess
import sys
import time

import nbformat
import pytest

from liger_perf.record import notebook as record
from liger_perf.record.history import load_trials
from liger_perf.kernel.registry import baseline_path
from liger_perf.run import run_trial
from liger_perf.record.schema import VERDICTS, Verdict
from liger_perf.record.store import Store

from broken_variants import ROOT, broken_dependency

# Every night here runs under a wall clock, as real nights do, and its trials' time limit is not a whole number
# of seconds (the notebook client refuses such a limit unless the runner rounds it). The selfcheck that each night
# runs first is tested in test_selfcheck.py.
FAST = "device: interpret\nrepetitions: 2\nconvergence: false\nwall_clock_s: 3599.5\nselfcheck: false\n"


def _setup(tmp_path, kernels):
    guardrails = tmp_path / "guardrails.yaml"
    guardrails.write_text((ROOT / "guardrails.yaml").read_text().replace("trial_timeout_s: 3600 ",
                                                                         "trial_timeout_s: 599.5"))
    config = tmp_path / "nightly.yaml"
    config.write_text("kernels:\n" + "".join(f"  - {{name: {k}, target: {t}, budget: {b}}}\n" for k, t, b in kernels)
                      + FAST + f"guardrails: {guardrails}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1",
           "LIGER_PERF_NOTEBOOKS": str(tmp_path / "nb"), "LIGER_PERF_REPORTS": str(tmp_path / "reports")}
    return config, env


def _nightly(config, env, timeout=1200):
    return subprocess.run([sys.executable, "-m", "liger_perf", "nightly", "--config", str(config)], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _summary(tmp_path):
    """The latest night's summary (each run of the job writes its own)."""
    path = sorted((tmp_path / "reports" / "interpret" / "nightly").glob("*.json"))[-1]
    return json.loads(path.read_text()), path.with_suffix(".md").read_text()


@pytest.mark.slow
def test_a_nightly_run_over_both_kernels_writes_the_summary_and_a_quiet_night_ends_quickly(tmp_path):
    config, env = _setup(tmp_path, [("fused_add_rms_norm", "backward", 1), ("relu_squared", "forward", 2)])
    out = _nightly(config, env)
    assert out.returncode == 0, out.stdout + out.stderr
    summary, text = _summary(tmp_path)
    assert [k["kernel"] for k in summary["kernels"]] == ["fused_add_rms_norm", "relu_squared"]
    assert summary["regressions"] == 0 and all(k["trials_run"] >= 1 and not k["errors"] for k in summary["kernels"])
    assert all(t.status == "complete" for t in load_trials("relu_squared", tmp_path / "nb" / "interpret"))
    # The suite's one run of the fused kernel's whole interpreter gate (test_gate runs its pairwise cover).
    assert load_trials("fused_add_rms_norm", tmp_path / "nb" / "interpret")[0].status == "complete"
    assert "## fused_add_rms_norm (backward)" in text and "0000-baseline.ipynb" in text
    assert summary["stack"]["torch"] and summary["errors"] == 0
    assert {"kind": "experiment", "status": "complete"}.items() <= summary["kernels"][1]["trials"][-1].items()
    assert summary["kernels"][1]["trials"][-1]["verdict"] in VERDICTS
    # Notebooks are named relative to the workspace: no absolute path of this machine in either file.
    raw = json.dumps(summary) + text
    assert str(tmp_path) not in raw and str(ROOT) not in raw
    assert all(not os.path.isabs(n) for k in summary["kernels"] for n in k["notebooks"])
    history = subprocess.run([sys.executable, "-m", "liger_perf", "history", "relu_squared"], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert history.returncode == 0 and "baseline" in history.stdout

    config.write_text(config.read_text().replace("budget: 1", "budget: 0").replace("budget: 2", "budget: 0"))
    out = _nightly(config, env)  # re-validates whatever was accepted (CPU timings: a verdict either way)
    assert out.returncode in (0, 1), out.stdout + out.stderr
    started = time.time()
    out = _nightly(config, env)  # the same stack, no budget: nothing to do
    assert out.returncode == 0, out.stdout + out.stderr
    assert time.time() - started < 60
    summary, text = _summary(tmp_path)
    assert sum(k["trials_run"] for k in summary["kernels"]) == 0
    assert all("unchanged" in (k.get("revalidation") or "unchanged") for k in summary["kernels"])


def test_a_second_run_while_the_first_holds_the_lock_exits_at_once(tmp_path):
    config, env = _setup(tmp_path, [("relu_squared", "forward", 1)])
    started = time.time()
    with Store(tmp_path / "nb" / "interpret").lock("nightly"):  # this process holds it
        out = _nightly(config, env)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1 and "another nightly run" in lines[0], out.stderr
    assert time.time() - started < 30 and not (tmp_path / "reports").exists()


@pytest.mark.slow
def test_a_run_killed_mid_way_resumes_the_next_night(tmp_path):
    config, env = _setup(tmp_path, [("relu_squared", "forward", 3)])
    folder = tmp_path / "nb" / "interpret" / "relu_squared"
    process = subprocess.Popen([sys.executable, "-m", "liger_perf", "nightly", "--config", str(config)], env=env,
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 600
    while not list(folder.glob(".0001-*.partial.ipynb")):
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    (killed,) = (tmp_path / "reports" / "interpret" / "nightly").glob("*.json")  # what it finished, and that it did not finish
    killed = json.loads(killed.read_text())
    assert not killed["finished"] and killed["kernels"][0]["tuning_trials"] == 1  # the baseline
    out = _nightly(config, env)
    assert out.returncode in (0, 1), out.stdout + out.stderr
    trials = load_trials("relu_squared", tmp_path / "nb" / "interpret")
    ids = [t.trial_id for t in trials]
    assert ids == sorted(set(ids)) and sum(t.name == "baseline" for t in trials) == 1
    assert not list(folder.glob(".*.partial.ipynb")) and not list((tmp_path / "nb" / "interpret").glob(".*.lock"))
    assert all(t.verdict for t in trials if t.name != "baseline" and t.kind != "revalidation")
    summary, _ = _summary(tmp_path)
    assert summary["kernels"][0]["trials_run"] >= 1


def _history_with_an_accepted_best(tmp_path, recorded_ratio=None):
    """A relu_squared history: the baseline, then a best accepted against it (its forward ratios overwritten
    with ``recorded_ratio`` when given, as if last night had measured that)."""
    root = tmp_path / "nb" / "interpret"  # the interpreter's history, where the command line's nightly reads
    fast = dict(device="interpret", repetitions=2, convergence=False, root=root)
    run_trial("relu_squared", baseline_path("relu_squared"), **fast)
    best = tmp_path / "best.py"
    best.write_text(baseline_path("relu_squared").read_text().replace('"BLOCK_SIZE": 1024,', '"BLOCK_SIZE": 2048,'))
    run = run_trial("relu_squared", best, against=baseline_path("relu_squared"), name="best", **fast)
    nb = nbformat.read(run.notebook, as_version=4)
    result = record.read_result(nb)
    for row in result.timing_rows("candidate"):
        if recorded_ratio is not None:
            row.ratio, row.ci_low, row.ci_high = recorded_ratio, 0.9 * recorded_ratio, 1.1 * recorded_ratio
    record.set_result(nb, result)
    record.set_verdict(nb, Verdict(verdict="accepted", reasons=["recorded for the test"], gain=0.9))
    record.write_atomic(nb, run.notebook)
    return root


@pytest.mark.slow
def test_a_best_that_got_slower_is_a_regression_with_both_fingerprints_and_exit_code_1(tmp_path):
    config, env = _setup(tmp_path, [("relu_squared", "forward", 0)])
    # Injected: last night this best was recorded as 10x faster than the baseline in forward.
    root = _history_with_an_accepted_best(tmp_path, recorded_ratio=0.1)

    out = _nightly(config, env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "regressions found" in out.stdout
    summary, text = _summary(tmp_path)
    (regression,) = summary["kernels"][0]["regressions"]
    assert regression["advantage_before"] == pytest.approx(10.0) and regression["advantage_now"] < 9.5
    assert regression["fingerprint_before"]["torch"] and regression["fingerprint_now"]["triton"]
    assert "**regression**" in text and "| triton |" in text
    revalidation = Store(root).trial_notebooks("relu_squared")[-1]
    assert revalidation.name.startswith("0002-revalidate-best")
    assert load_trials("relu_squared", root)[-1].kind == "revalidation"


@pytest.mark.slow
def test_a_trial_the_harness_cannot_run_is_an_error_of_the_job_never_a_regression(tmp_path, monkeypatch):
    import torch

    from liger_perf.core.errors import EXIT_JOB_ERROR
    from liger_perf.nightly import Nightly, NightlyConfig

    root = _history_with_an_accepted_best(tmp_path)
    config = NightlyConfig(kernels=[{"name": "relu_squared", "target": "forward", "budget": 1}], device="interpret",
                           repetitions=2, convergence=False, wall_clock_s=1200.5,
                           guardrails=str(ROOT / "guardrails.yaml"), selfcheck=False)  # the trials' errors
    night = dict(root=root, reports=tmp_path / "reports", echo=lambda text: None)
    monkeypatch.setenv("PYTHONPATH", broken_dependency(tmp_path))  # the trials' processes lack pandas
    code, path = Nightly(config, **night).run()
    assert code == EXIT_JOB_ERROR
    summary = json.loads(path.with_suffix(".json").read_text())
    (kernel,) = summary["kernels"]
    assert summary["regressions"] == 0 and kernel["regressions"] == []
    # Both the re-validation of the best and the tuning trial could not run: two errors, with their cause.
    assert len(kernel["errors"]) == 2 and all("pandas is not installed" in e["what"] for e in kernel["errors"])
    assert summary["stack"]["torch"] == torch.__version__  # recorded although no trial recorded it
    failed = load_trials("relu_squared", root)[2:]
    assert [t.status for t in failed] == ["harness-error", "harness-error"]
    assert [t.verdict for t in failed] == [None, None]  # no verdict on variants that never ran
    assert "**2 errors of the job**" in path.read_text() and "**0 regressions**" in path.read_text()
    assert kernel["tuning_trials"] == 0  # a trial that never ran its variant spends none of the night's budget
    assert str(tmp_path) not in path.read_text() + json.dumps(summary)

    # Installation fixed, the same night: the next run re-validates (a re-validation that never ran does not
    # count) and the tuning trial that never ran runs again (it tried nothing).
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    code, path = Nightly(config, **night).run()
    summary = json.loads(path.with_suffix(".json").read_text())
    assert summary["errors"] == 0 and code in (0, 1), summary
    rerun = load_trials("relu_squared", root)[4:]
    assert [t.kind for t in rerun] == ["revalidation", "experiment"]
    assert all(t.status == "complete" for t in rerun)
    assert rerun[1].variant_sha == failed[1].variant_sha


@pytest.mark.slow
def test_the_night_s_budget_is_shared_by_every_run_of_that_night(tmp_path):
    config, env = _setup(tmp_path, [("relu_squared", "forward", 1)])
    out = _nightly(config, env)
    assert out.returncode == 0, out.stdout + out.stderr
    started = time.time()
    out = _nightly(config, env)  # a retried job the same night: the budget is spent, nothing to do
    assert out.returncode == 0, out.stdout + out.stderr
    assert time.time() - started < 60
    summaries = sorted((tmp_path / "reports" / "interpret" / "nightly").glob("*.json"))
    first, second = (json.loads(p.read_text()) for p in summaries)
    assert first["kernels"][0]["tuning_trials"] == 1 and second["kernels"][0]["trials_run"] == 0
    assert "budget of 1 trial was spent by an earlier run" in second["kernels"][0]["stop_reason"]


@pytest.mark.parametrize("text, expected", [
    ("kernels:\n  - {name: softmax}\n", "unknown kernel 'softmax'"),
    ("kernels:\n  - {name: relu_squared, budget: -1}\n", "kernels.0.budget"),
    ("kernels: []\n", "kernels"),
    ("kernels:\n  - {name: relu_squared}\nwall_clock: 10\n", ":3: unknown key 'wall_clock'"),
    ("kernels:\n  - {name: relu_squared}\nproposer: oracle\n", ":3: proposer"),
    ("kernels:\n  - {name: relu_squared, budget: yes}\n", "kernels.0.budget: give a number, not true or false"),
    ("kernels:\n  - {name: relu_squared}\nwall_clock_s: on\n", ":3: wall_clock_s: give a number"),
    # each entry would get the night's whole budget (another target of the same kernel is another job)
    ("kernels:\n  - {name: relu_squared}\n  - {name: relu_squared, target: backward}\n",
     "relu_squared with target backward is listed twice"),
])
def test_a_broken_config_is_a_one_line_error(tmp_path, text, expected):
    config, env = _setup(tmp_path, [])
    config.write_text(text)
    out = _nightly(config, env, timeout=120)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1 and expected in lines[0], out.stderr


def test_a_config_error_points_to_the_line_of_the_offending_key_however_deep(tmp_path):
    """A budget of -6 on line 6 was reported at the line of `kernels:`, whatever line the error was on."""
    from liger_perf.core.errors import UserError
    from liger_perf.nightly import load_config

    config = tmp_path / "nightly.yaml"
    first = "# tonight\nkernels:\n  - name: relu_squared\n    budget: 2\n"
    for second, expected in (("  - name: fused_add_rms_norm\n    budget: -6\n", ":6: kernels.1.budget"),
                             ("  - name: fused_add_rms_norm\n    budgt: 6\n", ":6: unknown key 'kernels.1.budgt'"),
                             ("  - name: fused_add_rms_norm\n    target: sideways\n", ":6: kernels.1.target"),
                             ("  - target: forward\n    budget: 3\n", ":5: kernels.1.name"),  # the item lacks it
                             ("device: interpret\nwall_clock_s: -1\n", ":6: wall_clock_s")):
        config.write_text(first + second)
        with pytest.raises(UserError) as raised:
            load_config(config)
        assert f"{config}{expected}" in str(raised.value), (str(raised.value), config.read_text())


@pytest.mark.parametrize("kind, expected", [("cron", "0 2 * * *"), ("systemd", "OnCalendar="),
                                            ("github", "runs-on: [self-hosted, gpu]")])
def test_print_schedule(kind, expected):
    out = subprocess.run([sys.executable, "-m", "liger_perf", "nightly", "--print-schedule", kind],
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and expected in out.stdout and "liger_perf nightly" in out.stdout


def test_the_summary_words_an_accepted_trial_as_its_notebook_does(tmp_path):
    """A night's summary states an accepted trial's speedup as the trial's own verdict cell does (one wording
    everywhere: ``1.38x (faster) [1.37x, 1.40x]``), read here from the committed H200 history; a memory target
    as the judge states memory, a ratio of peak memory, never as a speedup."""
    from liger_perf.nightly import Nightly, NightlyConfig, _judged_gain

    history = ROOT / "notebooks" / "nvidia-h200"
    worded = []
    for trial in load_trials("fused_add_rms_norm", history):
        text = next((history / "fused_add_rms_norm").glob(f"{trial.trial_id:04d}-*.ipynb")).read_text()
        if trial.verdict != "accepted" or "x (faster) [" not in text:
            continue  # notebooks judged before the one wording say it otherwise
        said = _judged_gain(trial, "backward")
        assert said.endswith("] over the previous best") and "(faster)" in said, said
        assert said.removesuffix(" over the previous best") in text, (trial.trial_id, said)
        worded.append(trial)
    assert worded
    memory = worded[0].model_copy()
    memory.judged = Verdict(verdict="accepted", target="memory", target_ratio=0.725)
    assert _judged_gain(memory, "memory") == "peak memory 0.725 of the previous best's"

    config = NightlyConfig(kernels=[{"name": "fused_add_rms_norm", "target": "backward", "budget": 1}],
                           device="interpret", selfcheck=False)

    class Runner:
        def fingerprint(self, device):
            return {}

    night = Nightly(config, root=tmp_path / "nb", reports=tmp_path / "reports", echo=lambda text: None,
                    runner=Runner())
    night.job_errors, night.results = [], [{
        "kernel": "fused_add_rms_norm", "target": "backward", "trials_run": 1, "seconds": 1.0, "errors": [],
        "regressions": [], "trials": [], "notebooks": [],
        "accepted": [{"trial": worded[0].trial_id, "name": worded[0].name, "gain": worded[0].gain,
                      "judged": _judged_gain(worded[0], "backward"), "notebook": "n.ipynb"}]}]
    line = next(x for x in night._write_summary(finished=True).read_text().splitlines() if "accepted:" in x)
    assert f"backward: {_judged_gain(worded[0], 'backward')}" in line and "%" not in line


@pytest.mark.slow
def test_a_failed_revalidation_is_run_again_the_next_night_and_a_completed_one_stands(tmp_path):
    """On the H200 a re-validation failed on a gate bound since fixed (trial 0031): the next night must not skip the
    best because the stack is unchanged. A failed re-validation is run again; once one completes, it stands."""
    from liger_perf.nightly import Nightly, NightlyConfig

    root = _history_with_an_accepted_best(tmp_path)
    config = NightlyConfig(kernels=[{"name": "relu_squared", "target": "forward", "budget": 0}], device="interpret",
                           repetitions=2, convergence=False, wall_clock_s=1200.5,
                           guardrails=str(ROOT / "guardrails.yaml"), selfcheck=False)
    night = dict(root=root, reports=tmp_path / "reports", echo=lambda text: None)
    Nightly(config, **night).run()
    (first,) = [t for t in load_trials("relu_squared", root) if t.kind == "revalidation"]
    # As if the gate had failed it: the same best, the same stack, status failed-correctness.
    nb = nbformat.read(first.notebook, as_version=4)
    result = record.read_result(nb)
    result.status, result.reason = "failed-correctness", "the correctness gate failed (recorded for the test)"
    record.set_result(nb, result)
    record.write_atomic(nb, first.notebook)

    code, path = Nightly(config, **night).run()
    revalidations = [t for t in load_trials("relu_squared", root) if t.kind == "revalidation"]
    assert [t.status for t in revalidations] == ["failed-correctness", "complete"]
    (kernel,) = json.loads(path.with_suffix(".json").read_text())["kernels"]
    assert kernel["revalidation"].startswith("best vs baseline on forward")

    code, path = Nightly(config, **night).run()
    assert len([t for t in load_trials("relu_squared", root) if t.kind == "revalidation"]) == 2
    (kernel,) = json.loads(path.with_suffix(".json").read_text())["kernels"]
    assert kernel["revalidation"] == (f"skipped: the software stack is unchanged since trial "
                                      f"{revalidations[-1].trial_id:04d}, which completed")


def test_one_kernel_with_two_targets_is_two_jobs_each_with_its_own_budget(tmp_path):
    """Listed twice with one target, a kernel got two budgets a night and was refused; with two targets it is
    two jobs, and the trials an earlier run spent tonight count against the job (kernel and target) that ran them."""
    from liger_perf.nightly import Nightly, load_config

    config = tmp_path / "n.yaml"
    config.write_text("kernels:\n  - {name: relu_squared, budget: 3}\n  - {name: relu_squared, target: forward}\n")
    jobs = load_config(config).kernels
    assert [(job.name, job.target) for job in jobs] == [("relu_squared", "backward"), ("relu_squared", "forward")]
    night = Nightly.__new__(Nightly)
    night.now = datetime.datetime(2026, 12, 7, 2, 0)
    summaries = tmp_path / "summaries"
    summaries.mkdir()
    (summaries / "2026-12-07-0200.json").write_text(json.dumps({"kernels": [
        {"kernel": "relu_squared", "target": "backward", "tuning_trials": 2},
        {"kernel": "relu_squared", "target": "forward", "tuning_trials": 1}]}))
    night._summaries = lambda: summaries
    assert night._spent_tonight() == {("relu_squared", "backward"): 2, ("relu_squared", "forward"): 1}
