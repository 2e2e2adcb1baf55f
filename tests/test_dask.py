"""The Dask runner on CPU: a local cluster of two worker processes runs interpreter-mode trials, a round at a time."""

import os
import signal
import threading
import time

import pytest

from liger_perf.judge.guardrails import load_guardrails
from liger_perf.record.history import load_trials
from liger_perf.loop import OptimizeLoop
from liger_perf.propose.rules import RulesProposer
from liger_perf.kernel.registry import baseline_path
from liger_perf.run import trial_request
from liger_perf.record.store import Store

from broken_variants import ROOT

pytest.importorskip("distributed")

FAST = dict(device="interpret", repetitions=2, convergence=False, ncu=False)


@pytest.fixture(scope="module")
def runner():
    from liger_perf.run.dask import DaskRunner

    runner = DaskRunner(workers=2)
    yield runner
    runner.close()


@pytest.mark.slow
def test_a_loop_on_two_workers_trials_two_candidates_a_round_against_the_same_best(runner, tmp_path):
    assert runner.workers == 2 and runner.mode("interpret") == "interpret"
    root = tmp_path / "nb"
    loop = OptimizeLoop("relu_squared", load_guardrails(ROOT / "guardrails.yaml", target="forward"), RulesProposer(),
                        device="interpret", budget=3, root=root, repetitions=2, convergence=False, runner=runner)
    outcome = loop.run()
    assert outcome.stop_reason == "the budget of 3 trials is spent"
    trials = load_trials("relu_squared", root)
    assert [t.trial_id for t in trials] == [0, 1, 2] and all(t.status == "complete" for t in trials)
    baseline, first, second = trials
    assert first.against_sha == second.against_sha == baseline.variant_sha
    assert first.variant_sha != second.variant_sha
    assert first.verdict and second.verdict
    # The result names the files of the loop's workspace, not the worker's scratch copies.
    assert first.variant.path.startswith(str(root))


@pytest.mark.slow
def test_a_worker_killed_mid_trial_loses_nothing_and_doubles_nothing(runner, tmp_path):
    store = Store(tmp_path / "nb", tmp_path / "reports")
    requests = [trial_request("relu_squared", baseline_path("relu_squared"), store=store, name=f"t{i}", **FAST)
                for i in range(2)]
    done = {}
    thread = threading.Thread(target=lambda: done.setdefault("runs", runner.run_many(requests, store)))
    thread.start()
    deadline = time.time() + 120
    while not any(runner.client.processing().values()):
        assert time.time() < deadline
        time.sleep(0.2)
    time.sleep(3)  # inside the trial's notebook by now
    busy = next(address for address, keys in runner.client.processing().items() if keys)
    killed = runner.client.run(os.getpid, workers=[busy])[busy]
    os.kill(killed, signal.SIGKILL)
    thread.join(timeout=600)
    assert killed not in runner.client.run(os.getpid).values()  # it did die mid-trial (and was replaced)
    runs = done["runs"]
    assert [r.result.status for r in runs] == ["complete", "complete"], [r.result.reason for r in runs]
    assert [p.name for p in store.trial_notebooks("relu_squared")] == ["0000-t0.ipynb", "0001-t1.ipynb"]
    assert not store.partial_notebooks("relu_squared")


def test_generated_code_never_reaches_a_worker_without_a_sandbox(monkeypatch, tmp_path):
    """Each worker decides by itself whether it sandboxes: a cluster with a worker that has no bwrap is refused
    when the trials run generated code, and a task that reaches such a worker anyway is recorded as the
    harness's failure without its variant being written or run."""
    from distributed import LocalCluster

    from liger_perf.isolation import sandbox
    from liger_perf.core.errors import UserError
    from liger_perf.run import dask as dask_runner
    from liger_perf.run.dask import DaskRunner, NoSandboxOnWorker

    # In-process workers: they see this test's stand-in for a host without bubblewrap.
    monkeypatch.setattr(sandbox, "unavailable_reason", lambda: "bubblewrap (bwrap) is not installed")
    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster:
        with pytest.raises(UserError, match="1 of the Dask cluster's workers have no sandbox.*--unsandboxed"):
            DaskRunner(scheduler=cluster.scheduler_address, sandbox_required=True)
        allowed = DaskRunner(scheduler=cluster.scheduler_address)  # --unsandboxed, or the rules proposer
        allowed.client.close()

    written = []
    monkeypatch.setattr(dask_runner.tempfile, "TemporaryDirectory", lambda **_: written.append(1))
    store = Store(tmp_path / "notebooks", tmp_path / "reports")
    request = trial_request("relu_squared", baseline_path("relu_squared"), store=store, **FAST)
    request = request.model_dump(mode="json")
    with pytest.raises(NoSandboxOnWorker, match="no sandbox"):
        dask_runner._trial_on_worker(request, "raise SystemExit", None, False, sandbox_required=True)
    assert written == []


def test_a_task_refused_for_want_of_a_sandbox_is_the_harness_failure(monkeypatch, tmp_path):
    from liger_perf.run.dask import DaskRunner

    class Refused:
        def result(self):
            raise RuntimeError("this worker has no sandbox (bwrap missing), and the trial runs generated code")

    runner = DaskRunner.__new__(DaskRunner)
    runner._modes = {}
    store = Store(tmp_path / "notebooks", tmp_path / "reports")
    request = trial_request("relu_squared", baseline_path("relu_squared"), store=store, **FAST)
    run = runner._record(request, Refused(), store)
    assert run.result.status == "harness-error"
    assert "no sandbox" in run.result.reason


def test_a_worker_runs_a_kernel_only_the_client_s_workspace_has(monkeypatch, tmp_path):
    """A worker on another host has no copy of the user's workspace: the kernel's files travel with the task."""
    import json
    import shutil

    import nbformat

    from liger_perf.record import notebook as record
    from liger_perf.run import dask as dask_runner
    from liger_perf.core.workspace import builtin_kernels

    mine = tmp_path / "client-kernels" / "relu_cubed"
    shutil.copytree(builtin_kernels() / "relu_squared", mine, ignore=shutil.ignore_patterns("__pycache__"))
    (mine / "spec.py").write_text((mine / "spec.py").read_text().replace('name = "relu_squared"',
                                                                        'name = "relu_cubed"'))
    monkeypatch.setenv("LIGER_PERF_KERNELS", str(mine.parent))  # the client's workspace
    store = Store(tmp_path / "notebooks", tmp_path / "reports")
    request = trial_request("relu_cubed", mine / "baseline.py", store=store, **FAST).model_dump(mode="json")
    files = {name: (mine / name).read_text() for name in ("spec.py", "baseline.py")}
    monkeypatch.delenv("LIGER_PERF_KERNELS")  # the worker's host: no such kernel anywhere
    text = dask_runner._trial_on_worker(request, files["baseline.py"], None, False, kernel_files=files)
    result = record.read_result(nbformat.reads(text, as_version=4))
    assert result.kernel == "relu_cubed" and result.status == "complete", json.dumps(result.reason)
    assert "LIGER_PERF_KERNELS" not in os.environ  # the task put the worker's environment back
