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
        largest = max((c.shape for c in cases if dispatch_bucket(c.shape, c.dtype) == bucket),
                      key=lambda s: s[0] * s[1])
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


class _Asked(Exception):
    """Raised by a stand-in once it has recorded what it was asked: the step need not go on."""


def _trial_on_the_tuning_split(against: bool = False):
    """A trial built under the interpreter, then set to time the tuning split as it would on a GPU."""
    from liger_perf.run.trial import Trial

    path = str(baseline_path("fused_add_rms_norm"))
    trial = Trial({"kernel": "fused_add_rms_norm", "variant": path, "against": path if against else "",
                   "device": "interpret"})
    trial.suite = "models-tune"
    trial.request = trial.request.model_copy(update={"suite": "models-tune"})
    trial.load_variants()
    return trial


def test_a_trial_on_the_tuning_split_times_its_cases(interpret_device, monkeypatch):
    from liger_perf.measure import timing

    asked = []

    def time_suite(spec, contenders, cases, *args, **kwargs):
        asked.append(cases)
        raise _Asked

    monkeypatch.setattr(timing, "time_suite", time_suite)
    monkeypatch.setattr(timing, "copy_bandwidth", lambda device: 1.0)
    trial = _trial_on_the_tuning_split()
    with pytest.raises(_Asked):
        trial.time()
    assert asked == [trial.spec.cases("models-tune", "bench")]


def test_a_trial_on_the_tuning_split_precompiles_and_profiles_it(interpret_device, monkeypatch):
    from liger_perf.measure import ncu, precompile
    from liger_perf.measure.ncu import NcuResult, profiled_shapes

    compiled, profiled = [], []
    monkeypatch.setattr(precompile, "precompile", lambda *args, **kwargs: compiled.append(kwargs) or {
        "status": "skipped", "reason": "a stand-in"})
    monkeypatch.setattr(ncu, "profile", lambda *args, **kwargs: profiled.append(kwargs) or NcuResult("unavailable",
                                                                                                     "a stand-in"))
    trial = _trial_on_the_tuning_split(against=True)
    trial.precompile()
    trial.profile()
    trial._against_durations(["backward"])
    assert {k["bench_suite"] for k in compiled} == {"models-tune"}
    shapes = profiled_shapes(trial.spec.cases("models-tune", "bench"), one_per_bucket=True)
    expected = ("--suite", "models-tune", "--shapes", ",".join("x".join(map(str, s)) for s in shapes))
    assert [k["driver_args"] for k in profiled] == [expected, expected]  # the candidate, then the best's durations


def test_precompilation_children_build_the_parents_work_list(monkeypatch, tmp_path):
    """Each child rebuilds the work list and takes its share: it must be told the suite the parent listed."""
    from liger_perf.measure import precompile

    started = []

    class Popen:
        def __init__(self, argv, **kwargs):
            started.append(argv)
            raise OSError("a stand-in: nothing is started")

    monkeypatch.setattr(precompile.subprocess, "Popen", Popen)
    spec = get_spec("relu_squared")
    precompile.launch(spec, [baseline_path("relu_squared")], "interpret", workers=2, timeout_s=5, part="quick",
                      bench_suite="models-tune", bench_buckets=["4096x2", "8192x4"])
    assert started and all("--bench-suite=models-tune" in argv for argv in started)
    assert all([a for a in argv if a.startswith("--bench-bucket=")] == ["--bench-bucket=4096x2",
                                                                      "--bench-bucket=8192x4"] for argv in started)
    listed = []
    monkeypatch.setattr(precompile, "work_list", lambda *args, **kwargs: listed.append(kwargs) or [])
    precompile.main(["relu_squared", f"--variant={baseline_path('relu_squared')}", "--device=interpret",
                     "--bench-suite=models-tune", "--bench-bucket=4096x2", "--bench-bucket=8192x4", "--share=0/1"])
    assert listed[0]["bench_suite"] == "models-tune" and listed[0]["bench_buckets"] == ["4096x2", "8192x4"]


def test_the_ncu_driver_profiles_the_cases_of_the_suite_it_is_given(interpret_device, monkeypatch):
    from liger_perf.kernel import device, registry
    from liger_perf.measure import ncu_driver

    spec = get_spec("relu_squared")
    asked = []

    class Spec:
        def __getattr__(self, name):
            return getattr(spec, name)

        def cases(self, suite, kind):
            asked.append((suite, kind))
            return []

    monkeypatch.setattr(device, "select_device", lambda mode: interpret_device)
    monkeypatch.setattr(registry, "get_spec", lambda name: Spec())
    ncu_driver.main(["relu_squared", str(baseline_path("relu_squared")), "--suite", "models-tune"])
    ncu_driver.main(["relu_squared", str(baseline_path("relu_squared"))])
    assert asked == [("models-tune", "bench"), (interpret_device.suite, "bench")]


def test_the_trial_command_asks_for_the_suite(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from liger_perf import cli, run
    from liger_perf.run.papermill import PapermillRunner

    asked = []

    def run_trial(*args, **settings):
        asked.append(settings)
        raise _Asked

    monkeypatch.setenv("LIGER_PERF_NOTEBOOKS", str(tmp_path))
    monkeypatch.setattr(PapermillRunner, "mode", lambda self, device: "cuda")
    monkeypatch.setattr(run, "history_device", lambda runner, device: "nvidia-h200")
    monkeypatch.setattr(run, "run_trial", run_trial)
    result = CliRunner().invoke(cli.app, ["trial", "relu_squared", "--suite", "models-tune"])
    assert isinstance(result.exception, _Asked) and asked[0]["suite"] == "models-tune"


def test_optimize_refuses_the_model_suite_on_the_cpu_before_it_announces_a_loop(monkeypatch, tmp_path,
                                                                                interpret_device):
    from typer.testing import CliRunner

    from liger_perf import cli

    monkeypatch.setenv("LIGER_PERF_NOTEBOOKS", str(tmp_path))
    result = CliRunner().invoke(cli.app, ["optimize", "relu_squared", "--suite", "models-tune", "--device",
                                          "interpret"])
    assert isinstance(result.exception, UserError) and "needs a GPU" in str(result.exception)
    assert "No CUDA device" not in result.output


def test_the_chain_multiplies_only_what_every_accepted_step_timed():
    """A step on another suite times other shapes: the product at a shape it did not time would claim the best
    does there what only the other steps measured."""
    from liger_perf.record.history import chain_ratios

    def step(trial_id, ratios):
        return TrialResult.model_validate({
            "kernel": "relu_squared", "trial_id": trial_id, "name": f"t{trial_id}", "status": "complete",
            "device": "cuda", "verdict": "accepted", "variant": {"sha256": str(trial_id), "source": "x"},
            "timing": {"rows": [{"pass": "backward", "shape": shape, "dtype": "float32", "contender": "candidate",
                                 "relative_to": "against", "ratio": ratio, "median_ms": 1.0}
                                for shape, ratio in ratios.items()]}})

    on_gpu = step(1, {"2048x4096": 0.5, "2048x8192": 0.8})
    on_models = step(2, {"2048x4096": 0.5, "4096x5120": 0.9})
    assert chain_ratios([on_gpu, on_models]) == {("backward", "2048x4096", "float32"): 0.25}
    assert chain_ratios([on_gpu]) == {("backward", "2048x4096", "float32"): 0.5,
                                      ("backward", "2048x8192", "float32"): 0.8}
    assert chain_ratios([]) == {}


def test_the_best_slowdown_check_compares_with_a_trial_of_the_same_shapes(tmp_path):
    """The last trial that timed the best on another suite shares no shape with tonight's: the check looks further
    back, to one that timed these shapes."""
    from liger_perf.judge import best_slowdown

    def trial(trial_id, suite, shape, best_ms):
        return TrialResult.model_validate({
            "kernel": "relu_squared", "trial_id": trial_id, "name": f"t{trial_id}", "status": "complete",
            "device": "cuda", "suite": suite, "variant": {"sha256": f"v{trial_id}", "source": "x"},
            "against": {"sha256": "best"}, "fingerprint": {"gpu": "NVIDIA H200", "torch": "2.11", "triton": "3.6"},
            "timing": {"rows": [{"pass": "backward", "shape": shape, "dtype": "float32", "contender": "against",
                                 "median_ms": best_ms}]}})

    same_shapes = trial(1, "gpu", "2048x4096", 1.0)
    other_suite = trial(2, "models-tune", "4096x5120", 1.0)
    tonight = trial(3, "gpu", "2048x4096", 1.5)
    found = best_slowdown(tonight, [same_shapes, other_suite])
    assert found and "trial 0001" in found[0]


@pytest.mark.parametrize("mode, expected", [("cuda", "models-tune"), ("interpret", "")])
def test_a_nightly_revalidation_times_the_suite_the_job_tunes_on(tmp_path, monkeypatch, mode, expected):
    """A best accepted on the tuning split is re-validated there: the GPU suite's shapes would compare its gains
    with shapes it never measured (a false regression, or a hidden one)."""
    from liger_perf import nightly
    from liger_perf.judge.guardrails import Guardrails
    from liger_perf.run import TrialRun

    asked = []

    def run_trial(*args, **settings):
        asked.append(settings["suite"])
        return TrialRun(tmp_path / "x.ipynb", TrialResult.model_validate({
            "kernel": "relu_squared", "trial_id": 9, "name": "r", "status": "harness-error", "device": mode,
            "reason": "a stand-in", "variant": {"sha256": "best", "source": "x"}}))

    class Runner(_CudaRunner):
        def mode(self, device):
            return mode

    monkeypatch.setattr(nightly, "run_trial", run_trial)
    monkeypatch.setattr(nightly, "trial_variant_file", lambda *args: baseline_path("relu_squared"))
    config = nightly.NightlyConfig.model_validate(
        {"kernels": [{"name": "relu_squared", "target": "forward", "budget": 0, "suite": "models-tune"}]})
    night = nightly.Nightly(config, root=tmp_path / "notebooks", reports=tmp_path / "reports", runner=Runner(),
                            selfcheck=lambda *a, **k: None)
    best = TrialResult.model_validate({"kernel": "relu_squared", "trial_id": 2, "name": "best", "status": "complete",
                                       "device": mode, "suite": expected or "gpu", "verdict": "accepted",
                                       "variant": {"sha256": "best", "source": "x"}, "against": {"sha256": "b"}})
    # A completed re-validation of the other suite on this stack does not stand for tonight's.
    other = best.model_copy(update={"trial_id": 3, "kind": "revalidation", "verdict": None,
                                    "suite": "gpu" if expected else "models-tune"})
    entry = {"errors": []}
    night._revalidate(config.kernels[0], entry, [best, other], [best], Guardrails())
    assert asked == [expected]


def test_a_screening_on_the_tuning_split_times_its_cases(interpret_device, monkeypatch):
    from liger_perf.run.screening import Screen

    path = str(baseline_path("relu_squared"))
    screen = Screen({"kernel": "relu_squared", "variant": path, "device": "interpret", "kind": "screening",
                     "screen": [{"name": "0-same", "variant": path}]})
    screen.suite = "models-tune"  # as on a GPU asked for the tuning split
    asked = []

    def smoke(cases):
        asked.append(cases)
        raise _Asked

    monkeypatch.setattr(screen, "_smoke", smoke)
    with pytest.raises(_Asked):
        screen.time()
    assert asked == [screen.spec.cases("models-tune", "bench")]


def test_a_trial_records_the_suite_it_timed(monkeypatch):
    """Built as on a GPU (the device and the fingerprint stood in for): its result names the tuning split."""
    from liger_perf.kernel import device
    from liger_perf.kernel.device import Device
    from liger_perf.measure import fingerprint
    from liger_perf.run.trial import Trial

    monkeypatch.setattr(device, "select_device", lambda mode: Device("cuda", torch.device("cpu")))
    monkeypatch.setattr(fingerprint, "fingerprint", lambda *args: {})
    path = str(baseline_path("relu_squared"))
    assert Trial({"kernel": "relu_squared", "variant": path, "suite": "models-tune"}).data["suite"] == "models-tune"
    assert Trial({"kernel": "relu_squared", "variant": path}).data["suite"] == "gpu"


def test_the_pace_of_a_suite_is_read_from_its_own_trials():
    """A trial on the tuning split takes several times one on the GPU suite: a deadline planned on the other
    suite's pace would start rounds that cannot finish."""
    from liger_perf.record.history import trial_pace

    trials = [TrialResult.model_validate({"kernel": "relu_squared", "trial_id": i, "name": f"t{i}",
                                          "status": "complete", "device": "cuda", "suite": suite, "elapsed_s": s,
                                          "variant": {"sha256": f"v{i}", "source": "x"}})
              for i, (suite, s) in enumerate([("gpu", 80.0), ("models-tune", 300.0), ("gpu", 90.0)])]
    assert trial_pace(trials) == 90.0 and trial_pace(trials, "models-tune") == 300.0


def test_a_screening_of_moves_in_named_buckets_times_those_buckets_cases_alone(interpret_device, monkeypatch):
    """Only a bucket's cases decide whether a move in it is kept, so a screening whose every candidate is such a
    move times those cases alone (0070 and 0072 on the H200 spent about 180 of 250 s on the other buckets'); one
    candidate that changes a default (every bucket), or buckets no case falls in, and the whole suite is timed."""
    from liger_perf.kernel.registry import get_spec
    from liger_perf.kernel.variants import dispatch_bucket
    from liger_perf.run.screening import Screen

    path = str(baseline_path("fused_add_rms_norm"))

    def timed(*changes):
        screen = Screen({"kernel": "fused_add_rms_norm", "variant": path, "device": "interpret",
                         "kind": "screening", "screen": [{"name": f"{i}-move", "variant": path, "changes": c}
                                                         for i, c in enumerate(changes)]})
        screen.suite = "models-tune"
        screen.modules = {entry["name"]: object() for entry in screen.entries}  # every one past its quick gate
        asked = []

        def smoke(cases):
            asked.append(cases)
            raise _Asked

        monkeypatch.setattr(screen, "_smoke", smoke)
        with pytest.raises(_Asked):
            screen.time()
        return asked[0], screen

    every = get_spec("fused_add_rms_norm").cases("models-tune", "bench")
    cases, _ = timed({"num_stages@2048x2": 3}, {"bwd_programs_per_sm@2048x4": 2})
    assert cases and {dispatch_bucket(c.shape, c.dtype) for c in cases} == {"2048x2", "2048x4"}
    assert cases == [c for c in every if dispatch_bucket(c.shape, c.dtype) in {"2048x2", "2048x4"}]
    assert timed({"num_stages@2048x2": 3}, {"num_stages": 3})[0] == every  # a default moves every bucket
    assert timed({"num_stages@2048x2": 3}, None)[0] == every  # a candidate without recorded changes
    assert timed({"num_stages@131072x2": 3})[0] == every  # no case in the bucket: the suite, as before
    # A candidate dropped by its quick gate does not widen what is timed.
    screen = Screen({"kernel": "fused_add_rms_norm", "variant": path, "device": "interpret", "kind": "screening",
                     "screen": [{"name": "0-move", "variant": path, "changes": {"num_stages@2048x2": 3}},
                                {"name": "1-default", "variant": path, "changes": {"num_stages": 3}}]})
    screen.suite = "models-tune"
    screen.modules = {"0-move": object()}
    assert screen._buckets_screened(every) == {"2048x2"}
    # Its precompilation compiles those buckets' timing calls alone.
    from liger_perf.measure import precompile

    compiled = []
    monkeypatch.setattr(precompile, "precompile", lambda *args, **kwargs: compiled.append(kwargs) or {
        "status": "skipped", "reason": "a stand-in"})
    screen.precompile()
    assert compiled[0]["bench_buckets"] == ["2048x2"]
    screen.modules = {"0-move": object(), "1-default": object()}
    screen.precompile()
    assert compiled[1]["bench_buckets"] == []
