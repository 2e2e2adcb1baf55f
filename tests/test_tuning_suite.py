"""The loop tunes on the model suite's tuning split (``optimize --suite models-tune``), never on its held-out split:
every trial of such a loop times, screens, precompiles and profiles the tuning split, while the gate keeps its own
shapes; asking for the held-out split is one clear line, before any trial number is taken."""

from pathlib import Path
from types import SimpleNamespace

import pydantic
import pytest
import torch

from liger_perf.core.errors import UserError
from liger_perf.judge.guardrails import Guardrails
from liger_perf.kernel.registry import baseline_path, get_spec
from liger_perf.measure.accuracy import accuracy_cases
from liger_perf.kernel.variants import dispatch_bucket, source_hash
from liger_perf.record.schema import TrialRequest, TrialResult
from liger_perf.record.store import Store


def test_a_request_names_the_tuning_split_or_nothing_never_the_held_out_one(tmp_path):
    from liger_perf.run import trial_request

    variant = str(baseline_path("relu_squared"))
    assert TrialRequest(kernel="relu_squared", variant=variant, suite="models-tune").suite == "models-tune"
    assert TrialRequest(kernel="relu_squared", variant=variant).suite == ""
    with pytest.raises(pydantic.ValidationError):
        TrialRequest(kernel="relu_squared", variant=variant, suite="models-held-out")
    store = Store(tmp_path)
    first = trial_request("relu_squared", variant, store=store, suite="models-tune")
    assert first.suite == "models-tune"
    with pytest.raises(UserError, match="held-out split is read by `liger-perf bench --suite models` alone"):
        trial_request("relu_squared", variant, store=store, suite="models-held-out")
    with pytest.raises(UserError, match="--suite gpu2: leave it out"):
        trial_request("relu_squared", variant, store=store, suite="gpu2")
    # The refused requests took no trial number.
    assert trial_request("relu_squared", variant, store=store).trial_id == first.trial_id + 1


def test_the_optimize_command_refuses_the_held_out_split_in_one_line(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from liger_perf import cli

    monkeypatch.setenv("LIGER_PERF_NOTEBOOKS", str(tmp_path))
    result = CliRunner().invoke(cli.app, ["optimize", "relu_squared", "--suite", "models-held-out"])
    assert isinstance(result.exception, UserError)
    assert "the loop tunes on models-tune only" in str(result.exception)
    assert not list(tmp_path.iterdir())  # no trial was started


class _CudaRunner:
    """A runner on a (pretend) GPU that records each request and answers a screening with nothing kept."""

    workers = 1

    def __init__(self):
        self.requests = []

    def mode(self, device):
        return "cuda"

    def fingerprint(self, device):
        return {"gpu": "NVIDIA H200"}

    def run_many(self, requests, store):
        from liger_perf.run import TrialRun

        runs = []
        for request in requests:
            self.requests.append(request)
            paths = store.trial_paths(request.kernel, request.trial_id, request.name)
            paths.partial.unlink(missing_ok=True)
            source = Path(request.variant).read_text()
            runs.append(TrialRun(paths.notebook, TrialResult.model_validate({
                "kernel": request.kernel, "trial_id": request.trial_id, "name": request.name, "kind": request.kind,
                "status": "complete", "device": "cuda", "suite": request.suite,
                "variant": {"sha256": source_hash(source), "source": source},
                "screening": {"target": "backward", "rows": []} if request.kind == "screening" else None})))
        return runs


def _baseline(kernel):
    source = baseline_path(kernel).read_text()
    return TrialResult.model_validate({"kernel": kernel, "trial_id": 1, "name": "baseline", "status": "complete",
                                       "device": "cuda", "suite": "models-tune",
                                       "variant": {"sha256": source_hash(source), "source": source}})


def test_every_request_of_a_loop_on_the_tuning_split_times_that_split(tmp_path):
    from liger_perf import loop as loop_module
    from liger_perf.propose import Proposal

    class Three:
        name = "test"

        def propose(self, context):
            return Proposal("p", context.best_source + "\n# p\n", "try p", "")

    runner = _CudaRunner()
    loop = loop_module.OptimizeLoop("relu_squared", Guardrails(), Three(), device="cuda", budget=5, root=tmp_path,
                                    runner=runner, screen=3, suite="models-tune")
    baseline = _baseline("relu_squared")
    best_file = baseline_path("relu_squared")
    loop._round([baseline], baseline, room=1, best_file=best_file, budget_left=5)  # a screening of three
    experiment = loop._request(Proposal("q", best_file.read_text() + "\n# q\n", "try q", ""), best_file)
    (screening,) = runner.requests
    assert screening.kind == "screening"
    assert {screening.suite, experiment.suite} == {"models-tune"}
    default = loop_module.OptimizeLoop("relu_squared", Guardrails(), Three(), device="cuda", root=tmp_path,
                                       runner=_CudaRunner())
    assert default._request(Proposal("r", "x = 1\n", "", ""), best_file).suite == ""


def test_a_loop_on_the_interpreter_refuses_the_model_suite(tmp_path):
    from liger_perf import loop as loop_module

    class Interpreted(_CudaRunner):
        def mode(self, device):
            return "interpret"

    with pytest.raises(UserError, match="--suite models-tune needs a GPU"):
        loop_module.OptimizeLoop("relu_squared", Guardrails(), None, device="interpret", root=tmp_path,
                                 runner=Interpreted(), suite="models-tune")


def test_a_trial_refuses_the_model_suite_under_the_interpreter(interpret_device):
    from liger_perf.run.trial import Trial

    with pytest.raises(UserError, match="models-tune suite needs a GPU"):
        Trial({"kernel": "relu_squared", "variant": str(baseline_path("relu_squared")), "device": "interpret",
               "suite": "models-tune"})


@pytest.mark.parametrize("kernel", ["relu_squared", "fused_add_rms_norm"])
def test_precompilation_takes_the_tuning_splits_bench_cases_and_the_gates_own(kernel):
    from liger_perf.measure.precompile import variant_source, work_list

    spec = get_spec(kernel)
    path = baseline_path(kernel)
    variants = [(path, variant_source(path))]
    tuned = work_list(spec, variants, "gpu", part="all", bench_suite="models-tune")
    device = work_list(spec, variants, "gpu", part="all")
    def cases(items, origins=None):
        return {(tuple(i.case.shape), i.case.dtype) for i in items if origins is None or i.origin in origins}

    model_bench = {(tuple(c.shape), c.dtype) for c in spec.cases("models-tune", "bench")}
    accuracy = {(tuple(c.shape), c.dtype) for c in accuracy_cases(spec, "gpu")}  # the device's, as the trial's
    assert cases(tuned, {"bench"}) == model_bench
    # The gate's calls are the device's suite's, whatever the trial times (a call both need is listed once).
    assert cases(tuned) == cases(device, {"gate", "quick", "determinism", "convergence"}) | accuracy | model_bench
    held_out = {(tuple(c.shape), c.dtype) for c in spec.cases("models-held-out", "bench")}
    assert not held_out & cases(tuned)


def test_a_profile_of_the_model_suite_takes_the_largest_shape_of_each_bucket():
    from liger_perf.measure.ncu import profiled_shapes

    spec = get_spec("fused_add_rms_norm")
    cases = spec.cases("models-tune", "bench")
    assert profiled_shapes(cases, one_per_bucket=False) is None  # the device's suite: every case
    shapes = profiled_shapes(cases, one_per_bucket=True)
    buckets = {dispatch_bucket(c.shape, c.dtype) for c in cases}
    chosen = {dispatch_bucket(c.shape, c.dtype) for c in cases if tuple(c.shape) in shapes}
    assert chosen == buckets  # every bucket is profiled
    for bucket in buckets:  # at the largest of its shapes
        largest = max((c.shape for c in cases if dispatch_bucket(c.shape, c.dtype) == bucket), key=lambda s: s[0] * s[1])
        assert tuple(largest) in shapes
    assert len(shapes) < len({tuple(c.shape) for c in cases}) / 2  # far fewer than the suite's shapes


def test_the_rules_launch_model_checks_the_shapes_the_best_was_timed_at():
    from liger_perf.propose.rules import _LaunchModel

    spec = get_spec("fused_add_rms_norm")
    knobs = {}  # asked nothing here: the shapes it would ask about are the question
    for suite, expected in (("models-tune", spec.cases("models-tune", "bench")), ("gpu", spec.cases("gpu", "bench"))):
        best = SimpleNamespace(suite=suite, device="cuda", fingerprint=None)
        model = _LaunchModel(SimpleNamespace(spec=spec, best=best), knobs)
        assert model.suite_shapes == list(dict.fromkeys(tuple(c.shape) for c in expected))
        assert model.dtypes == list(spec.dtypes["gpu"])
        assert set(map(tuple, spec.check_shapes["gpu"])) <= set(model.shapes)


def test_the_ncu_driver_runs_the_suite_it_is_given(monkeypatch):
    """Its case list is the one the trial timed: the tuning split when asked; anything else is refused."""
    from liger_perf.measure import ncu_driver

    with pytest.raises(SystemExit):
        ncu_driver.main(["fused_add_rms_norm", str(baseline_path("fused_add_rms_norm")), "--suite", "models-held-out"])


def test_a_model_suite_trial_times_the_peers_but_torch_compile(interpret_device, monkeypatch):
    """torch.compile compiles each of the suite's shapes anew (minutes a trial): left out, and saying where it is
    timed; the other peers stay."""
    from liger_perf.measure import timing
    from liger_perf.run.trial import Trial

    monkeypatch.setattr(timing, "peer_contenders", lambda spec, device: (
        {"eager": spec.reference_forward(), "torch.compile": spec.reference_forward()}, {}))
    for suite, expected in (("", {"candidate", "eager", "torch.compile"}), ("models-tune", {"candidate", "eager"})):
        trial = Trial({"kernel": "relu_squared", "variant": str(baseline_path("relu_squared")), "device": "interpret",
                       "peers": True})
        trial.suite = suite or trial.suite  # as on a GPU asked for the tuning split
        trial.load_variants()
        assert set(trial.contenders()) == expected
        assert ("torch.compile" in trial.data["peers_unavailable"]) == bool(suite)


def test_the_trial_command_refuses_the_model_suite_on_the_cpu(monkeypatch, tmp_path, interpret_device):
    from typer.testing import CliRunner

    from liger_perf import cli

    monkeypatch.setenv("LIGER_PERF_NOTEBOOKS", str(tmp_path))
    result = CliRunner().invoke(cli.app, ["trial", "relu_squared", "--suite", "models-tune", "--device", "interpret"])
    assert isinstance(result.exception, UserError) and "--suite models-tune needs a GPU" in str(result.exception)
    result = CliRunner().invoke(cli.app, ["trial", "relu_squared", "--suite", "models-held-out"])
    assert isinstance(result.exception, UserError)
    assert "the loop tunes on models-tune only" in str(result.exception)
    assert not any(tmp_path.rglob("*.ipynb"))  # no trial was started


@pytest.mark.parametrize("mode, expected", [("cuda", "models-tune"), ("interpret", "")])
def test_a_nightly_job_tunes_on_the_suite_it_names_where_there_is_a_gpu(tmp_path, monkeypatch, mode, expected):
    from liger_perf import nightly

    asked = []

    class Loop:
        def __init__(self, *args, **settings):
            asked.append(settings)

        def run(self):
            return SimpleNamespace(stop_reason="budget spent", harness_error=None, baseline_failed=None)

    class Runner(_CudaRunner):
        def mode(self, device):
            return mode

    monkeypatch.setattr(nightly, "OptimizeLoop", Loop)
    config = nightly.NightlyConfig.model_validate(
        {"kernels": [{"name": "relu_squared", "target": "forward", "budget": 1, "suite": "models-tune"}]})
    night = nightly.Nightly(config, root=tmp_path / "notebooks", reports=tmp_path / "reports", runner=Runner(),
                            selfcheck=lambda *a, **k: None)
    entry = {"kernel": "relu_squared", "target": "forward", "accepted": [], "regressions": [], "errors": [],
             "trials_run": 0, "tuning_trials": 0, "notebooks": [], "trials": [], "seconds": 0.0}
    night.results, night.job_errors = [entry], []  # what run() sets up before a kernel's turn
    night._kernel(config.kernels[0], entry, budget_left=1)
    assert [settings["suite"] for settings in asked] == [expected]
    assert ("suite" in entry) == (mode == "interpret")  # the summary says why it tuned on the device's suite
    with pytest.raises(pydantic.ValidationError):
        nightly.NightlyConfig.model_validate(
            {"kernels": [{"name": "relu_squared", "suite": "models-held-out"}]})


def test_the_history_says_which_suite_each_trial_timed():
    """Trials of both suites share one chain; a reader of `liger-perf history` tells them apart."""
    from liger_perf.record.history import history_frame

    trials = []
    for trial_id, suite in ((1, "gpu"), (2, "models-tune")):
        trials.append(TrialResult.model_validate({
            "kernel": "relu_squared", "trial_id": trial_id, "name": f"t{trial_id}", "status": "complete",
            "device": "cuda", "suite": suite, "variant": {"sha256": "a", "source": "x"},
            "timing": {"rows": [{"pass": "forward", "shape": "8x8", "dtype": "float32", "contender": "candidate",
                                 "median_ms": 1.0}]}}))
    frame = history_frame("relu_squared", trials=trials)
    assert frame.groupby("trial_id")["suite"].first().to_dict() == {1: "gpu", 2: "models-tune"}
