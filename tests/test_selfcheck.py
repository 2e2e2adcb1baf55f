"""``liger-perf selfcheck`` under the interpreter, and the nightly job that runs it first."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from liger_perf.core.workspace import builtin_kernels

from broken_variants import BROKEN, ROOT, write_broken_variant


def _workspace(tmp_path, broken: str | None = None):
    """A fresh workspace whose own relu_squared (it replaces the built-in one there) has a baseline broken with
    ``broken``, or is the built-in one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIGER_PERF_")}
    env.update(PYTHONPATH=str(ROOT), TRITON_INTERPRET="1")
    subprocess.run([sys.executable, "-m", "liger_perf", "init", str(tmp_path / "ws")], env=env, check=True,
                   capture_output=True)
    folder = tmp_path / "ws" / "kernels" / "relu_squared"
    shutil.copytree(builtin_kernels() / "relu_squared", folder, ignore=shutil.ignore_patterns("__pycache__"))
    if broken:
        mistake = next(b for b in BROKEN if b.name == broken)
        (folder / "baseline.py").write_text(write_broken_variant(mistake, tmp_path / "broken").read_text())
    return tmp_path / "ws", env


def _selfcheck(workspace, env):
    return subprocess.run([sys.executable, "-m", "liger_perf", "selfcheck", "--device", "interpret", "--kernel",
                           "relu_squared"], cwd=workspace, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_selfcheck_passes_a_sound_kernel_and_writes_its_record(tmp_path):
    workspace, env = _workspace(tmp_path)
    out = _selfcheck(workspace, env)
    assert out.returncode == 0, out.stdout + out.stderr
    record = json.loads((workspace / "reports" / "interpret" / "selfcheck.json").read_text())
    assert "commit" in record and record["passed"] and record["stack"]["torch"]
    assert [(r["step"], r["variant"], r["status"]) for r in record["rows"]] == [
        ("gate", "baseline", "pass"), ("trial", "baseline", "pass"), ("screening", "baseline", "pass")]
    assert "comparisons" in record["rows"][0]["detail"] and "timings" in record["rows"][1]["detail"]
    assert "the copy" in record["rows"][2]["detail"] and "x the baseline's time" in record["rows"][2]["detail"]
    assert (workspace / "reports" / "interpret" / "selfcheck" / "relu_squared-trial.ipynb").is_file()
    assert "selfcheck PASS" in out.stdout


@pytest.mark.slow
def test_selfcheck_fails_a_broken_baseline_with_one_clear_row(tmp_path):
    workspace, env = _workspace(tmp_path, broken="square_before_relu")
    out = _selfcheck(workspace, env)
    assert out.returncode == 1, out.stdout + out.stderr
    record = json.loads((workspace / "reports" / "interpret" / "selfcheck.json").read_text())
    assert not record["passed"]
    failed = [r for r in record["rows"] if r["status"] != "pass"]
    gate = failed[0]
    assert (gate["step"], gate["variant"], gate["status"]) == ("gate", "baseline", "FAIL")
    assert "comparisons failed" in gate["detail"] and "Y" in gate["detail"]
    assert "selfcheck FAIL" in out.stdout and "gate of the baseline" in out.stdout
    assert "Traceback" not in out.stdout + out.stderr


STACK = {"gpu": "G", "driver": "1", "cuda": "13.0", "torch": "x", "triton": "y", "liger_perf": "0.1.0",
         "python": "3.12"}


class _Runner:
    """A runner that records that it was asked to run anything, and runs nothing."""

    workers = 1

    def __init__(self, calls):
        self.calls = calls

    def mode(self, device):
        return "interpret"

    def fingerprint(self, device):
        return dict(STACK)

    def run(self, request, store):
        self.calls.append(("trial", request.kernel))
        raise RuntimeError("not in this test")

    def run_many(self, requests, store):
        return [self.run(r, store) for r in requests]


def _selfcheck_record(passed):
    return {"commit": "abc", "uncommitted_changes": False, "device": "interpret", "passed": passed, "seconds": 1.0,
            "started": "", "stack": {}, "kernels": {"relu_squared": str(ROOT / "kernels" / "relu_squared")},
            "rows": [{"kernel": "relu_squared", "step": "gate", "variant": "baseline",
                      "status": "pass" if passed else "FAIL", "seconds": 1.0,
                      "detail": "1 of 9 comparisons failed; first: 4x4 Y vs same-dtype: off" if not passed else "ok"}]}


@pytest.mark.parametrize("passed", [False, True])
def test_the_nightly_job_runs_selfcheck_first_and_a_failing_one_is_an_error_of_the_job(tmp_path, passed):
    from liger_perf.core.errors import EXIT_JOB_ERROR
    from liger_perf.nightly import Nightly, NightlyConfig

    calls = []

    def selfcheck(device, kernels, best, echo):
        calls.append(("selfcheck", tuple(kernels), best))
        return _selfcheck_record(passed)

    config = NightlyConfig(kernels=[{"name": "relu_squared", "target": "forward", "budget": 1}], device="interpret",
                           guardrails=str(ROOT / "guardrails.yaml"))
    code, path = Nightly(config, root=tmp_path / "nb", reports=tmp_path / "reports", echo=lambda text: None,
                         runner=_Runner(calls), selfcheck=selfcheck).run()
    summary = json.loads(path.with_suffix(".json").read_text())
    assert calls[0] == ("selfcheck", ("relu_squared",), False)  # first, the baselines only
    assert summary["selfcheck"]["passed"] is passed
    assert json.loads((tmp_path / "reports" / "selfcheck.json").read_text())["passed"] is passed  # the job's
    if passed:
        assert ("trial", "relu_squared") in calls[1:]  # the night went on
    else:
        assert calls == [calls[0]] and code == EXIT_JOB_ERROR  # no trial ran: the machine is unfit tonight
        assert summary["regressions"] == 0 and "selfcheck FAIL" in summary["job_errors"][0]["what"]
        assert "selfcheck" in summary["kernels"][0]["skipped"]
        assert "error of the job" in path.read_text()


@pytest.mark.parametrize("change", ["nothing", "code", "stack", "host", "age", "no trial row", "no screening row",
                                    "unknown stack"])
def test_a_night_reuses_only_a_selfcheck_that_passed_here_for_this_code_on_this_stack_tonight(tmp_path, change):
    """A second night on the same machine with the same code on the same stack (or the developer's own selfcheck
    just before) does not check the machine again. Other code (a changed package or kernel folder), another stack,
    another machine (a record committed from elsewhere), a record older than a night, one without the kernel's
    trial or screening (an older record's), or a stack that could not be read: the selfcheck runs."""
    import datetime
    import platform

    from liger_perf.nightly import SELFCHECK_REUSE_S, Nightly, NightlyConfig
    from liger_perf.selfcheck import code_digests

    earlier = _selfcheck_record(True)
    started = datetime.datetime.now() - datetime.timedelta(seconds=60 if change != "age" else SELFCHECK_REUSE_S + 60)
    earlier.update(started=started.isoformat(timespec="seconds"), stack=dict(STACK),
                   host=platform.node() if change != "host" else "another-machine",
                   code={"relu_squared": code_digests(["relu_squared"])["relu_squared"] if change != "code" else "0" * 64})
    if change == "stack":
        earlier["stack"]["torch"] = "an older one"
    for step in ("trial", "screening"):
        if change != f"no {step} row":
            earlier["rows"].append({**earlier["rows"][0], "step": step})
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "selfcheck.json").write_text(json.dumps(earlier))
    calls, said = [], []

    def selfcheck(device, kernels, best, echo):
        calls.append(("selfcheck", tuple(kernels), best))
        return _selfcheck_record(True)

    runner = _Runner(calls)
    if change == "unknown stack":  # both sides without a driver: no match on what is not known
        earlier["stack"]["driver"] = None
        (tmp_path / "reports" / "selfcheck.json").write_text(json.dumps(earlier))
        runner.fingerprint = lambda device: {**STACK, "driver": None}
    config = NightlyConfig(kernels=[{"name": "relu_squared", "target": "forward", "budget": 1}], device="interpret",
                           guardrails=str(ROOT / "guardrails.yaml"))
    _, path = Nightly(config, root=tmp_path / "nb", reports=tmp_path / "reports", echo=said.append,
                      runner=runner, selfcheck=selfcheck).run()
    summary = json.loads(path.with_suffix(".json").read_text())
    reused = change == "nothing"
    assert (("selfcheck", ("relu_squared",), False) not in calls) is reused
    assert summary["selfcheck"]["passed"] is True
    assert any("not run again" in line for line in said) is reused


def test_the_code_digest_changes_with_a_kernel_file_and_not_with_a_cache(tmp_path, monkeypatch):
    from liger_perf.selfcheck import code_digests

    shutil.copytree(ROOT / "kernels" / "relu_squared", tmp_path / "kernels" / "relu_squared")
    monkeypatch.setenv("LIGER_PERF_KERNELS", str(tmp_path / "kernels"))
    before = code_digests(["relu_squared"])
    (tmp_path / "kernels" / "relu_squared" / "__pycache__").mkdir(exist_ok=True)
    (tmp_path / "kernels" / "relu_squared" / "__pycache__" / "x.pyc").write_bytes(b"cache")
    assert code_digests(["relu_squared"]) == before
    baseline = tmp_path / "kernels" / "relu_squared" / "baseline.py"
    baseline.write_text(baseline.read_text() + "\n# one more line\n")
    assert code_digests(["relu_squared"])["relu_squared"] != before["relu_squared"]
