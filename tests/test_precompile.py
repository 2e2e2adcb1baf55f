"""The precompiler: nothing under the interpreter, a work list that covers the gate and the timing once, children
that report and survive a broken variant, a parent that adds their reports up and kills them past its timeout."""

import json
import subprocess
import sys

import pytest
import torch

from liger_perf.gate import correctness
from liger_perf.measure.accuracy import accuracy_cases
from liger_perf.kernel.device import Device
from liger_perf.measure.precompile import (INTERPRETED_REASON, WorkItem, child_environment, config_key, launch,
                                   precompile, shares, variant_source, work_list)
from liger_perf.kernel.registry import baseline_path, get_spec
from liger_perf.kernel.spec import dtype_name
from liger_perf.kernel.variants import Variant

RAISES_AT_CALL = '''

def relu_squared(X):  # the baseline's interface, broken at call time (the module imports fine)
    raise RuntimeError("deliberately broken at call time")
'''


def _sources(*kernels_or_paths):
    return [(p, variant_source(p)) for p in kernels_or_paths]


def _key(case, shape, inputs="contiguous", cotangents="contiguous"):
    return (tuple(shape), dtype_name(case.dtype), config_key(case.config), inputs, cotangents)


def _case_keys(items, variant):
    return {(tuple(i.case.shape), dtype_name(i.case.dtype), config_key(i.case.config), i.inputs, i.cotangents)
            for i in items if i.variant == variant and i.pass_name != "convergence"}


def _child(*args, cwd):
    done = subprocess.run([sys.executable, "-m", "liger_perf.measure.precompile", *args, "--device", "interpret"],
                          capture_output=True, text=True, env=child_environment(), cwd=cwd, timeout=120)
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"precompile"')]
    assert lines, done.stdout + done.stderr
    return done.returncode, json.loads(lines[-1])["precompile"]


def test_interpreter_starts_nothing(interpret_device, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("precompile started a process under the interpreter")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    spec = get_spec("relu_squared")
    result = precompile(spec, [baseline_path("relu_squared")], interpret_device)
    assert result["status"] == "skipped" and result["reason"] == INTERPRETED_REASON
    assert result["seconds"] == 0.0 and result["items"] == 0 and result["workers"] == 0


def test_arguments_are_checked(interpret_device, tmp_path):
    spec = get_spec("relu_squared")
    with pytest.raises(ValueError, match="no variant file"):
        precompile(spec, [tmp_path / "missing.py"], interpret_device)
    with pytest.raises(ValueError, match="workers"):
        precompile(spec, [baseline_path("relu_squared")], interpret_device, workers=0)


@pytest.mark.parametrize("kernel", ["relu_squared", "fused_add_rms_norm"])
def test_work_list_covers_gate_and_timing_once(kernel):
    spec = get_spec(kernel)
    path = baseline_path(kernel)
    variants = _sources(path, path)  # the candidate and the current best (here the same file)
    items = work_list(spec, variants, "gpu", timed_only=[1])
    again = work_list(spec, variants, "gpu", timed_only=[1])
    assert [i.key() for i in items] == [i.key() for i in again]  # deterministic
    assert len({i.key() for i in items}) == len(items)  # each call once
    assert {i.pass_name for i in items} == {"backward", "convergence"}  # a backward call runs the forward too

    gpu = Device("cuda", torch.device("cuda"))
    gated = correctness.gate_cases(spec, Variant(path, variants[0][1], None), gpu)
    assert any(g.kind == "large" for g in gated)
    candidate = _case_keys(items, 0)
    for g in gated:
        key = _key(g.case, g.shape(spec), g.probe.inputs, g.probe.cotangents)
        if g.kind == "large":
            assert not any(tuple(i.case.shape) == tuple(spec.large_shape()) for i in items)
        else:
            assert key in candidate, (g.kind, key)
    for g in correctness.quick_gate_cases(spec, gpu):
        assert _key(g.case, g.shape(spec), g.probe.inputs, g.probe.cotangents) in candidate
    bench = {_key(c, c.shape) for c in spec.cases("gpu", "bench")}
    accuracy = {_key(c, c.shape) for c in accuracy_cases(spec, "gpu")}
    assert bench | accuracy <= candidate
    # The current best is timed and measured for accuracy, not gated: those cases only.
    assert _case_keys(items, 1) == bench | accuracy
    assert {i.origin for i in items if i.variant == 0} >= {"gate", "determinism", "convergence", "bench"}

    for n in (1, 3, 8):
        dealt = shares(items, n)
        assert len(dealt) == n and shares(items, n) == dealt
        flat = [i.key() for share in dealt for i in share]
        assert sorted(flat) == sorted(i.key() for i in items)  # every item in exactly one share
        owner = {}
        for k, share in enumerate(dealt):
            for item in share:
                assert owner.setdefault(item.group(), k) == k  # a group's calls stay in one child
        sizes = [len(s) for s in dealt]
        assert max(sizes) - min(sizes) <= max(len(g) for g in _groups(items))  # balanced to within a group


def _groups(items):
    found = {}
    for item in items:
        found.setdefault(item.group(), []).append(item)
    return found.values()


@pytest.mark.parametrize("kernel", ["relu_squared", "fused_add_rms_norm"])
def test_a_staged_trial_precompiles_its_quick_part_first_and_the_rest_only_for_the_full_gate(kernel):
    """"quick": the quick gate's and the timing's calls (nothing of the full gate beyond them); "rest": the full
    gate's own calls, none of the timing's; together, every call of "all"."""
    spec = get_spec(kernel)
    path = baseline_path(kernel)
    variants = _sources(path, path)
    every, quick, rest = (work_list(spec, variants, "gpu", timed_only=[1], part=p) for p in ("all", "quick", "rest"))
    assert {"quick", "bench"} <= {i.origin for i in quick} <= {"quick", "bench", "accuracy"}
    assert not {i.origin for i in rest} & {"bench", "quick", "accuracy"}
    # A screening's: the quick gate and the timing, no accuracy cases (it measures none).
    screen = work_list(spec, variants, "gpu", timed_only=[1], part="screen")
    assert {i.origin for i in screen} == {"quick", "bench"} and not any(i.origin == "accuracy" for i in screen)
    assert {i.key() for i in screen} <= {i.key() for i in quick}
    assert {i.origin for i in rest} >= {"gate", "determinism", "convergence"}
    assert all(i.variant == 0 for i in rest)  # the current best is only timed
    assert {i.key() for i in quick} | {i.key() for i in rest} == {i.key() for i in every}


def test_a_trial_timed_on_some_buckets_precompiles_their_timing_calls_alone():
    """A move confined to dispatch buckets is timed on their shapes alone (``TrialRequest.buckets``), and so is a
    screening of such moves: the timing's calls of the other shapes are not compiled. The gate's and the
    accuracy step's calls stay; buckets no shape of the suite falls in leave every timing call."""
    from liger_perf.kernel.variants import dispatch_bucket

    spec = get_spec("fused_add_rms_norm")
    path = baseline_path("fused_add_rms_norm")
    variants = _sources(path, path)
    every = work_list(spec, variants, "gpu", timed_only=[1], part="quick", bench_suite="models-tune")
    confined = work_list(spec, variants, "gpu", timed_only=[1], part="quick", bench_suite="models-tune",
                         bench_buckets=["4096x2"])
    bench = {(i.case.shape, i.case.dtype) for i in confined if i.origin == "bench"}
    assert len(bench) == 10 and {dispatch_bucket(shape, dtype) for shape, dtype in bench} == {"4096x2"}
    assert {i.key() for i in confined if i.origin != "bench"} == {i.key() for i in every if i.origin != "bench"}
    assert len({(i.case.shape, i.case.dtype) for i in every if i.origin == "bench"}) == 57
    absent = work_list(spec, variants, "gpu", timed_only=[1], part="quick", bench_suite="models-tune",
                       bench_buckets=["65536x2"])
    assert {i.key() for i in absent} == {i.key() for i in every}


def test_work_list_under_the_interpreter_has_no_gpu_cases():
    spec = get_spec("fused_add_rms_norm")
    items = work_list(spec, _sources(baseline_path("fused_add_rms_norm")), "interpret", convergence=False)
    assert {i.origin for i in items} >= {"gate", "bench"} and "determinism" not in {i.origin for i in items}
    assert all(i.pass_name == "backward" for i in items)
    assert {dtype_name(i.case.dtype) for i in items} == {dtype_name(d) for d in spec.dtypes["interpret"]}
    assert isinstance(items[0], WorkItem)


def test_child_runs_its_share(tmp_path):
    path = baseline_path("relu_squared")
    rc, report = _child("relu_squared", "--variants", f"{path},{path}", "--share", "1/3", "--limit", "2",
                        cwd=tmp_path)
    assert rc == 0
    assert report["share"] == "1/3" and report["items"] == 2 == report["planned"]
    assert report["failed"] == 0 and report["first_error"] == "" and report["seconds"] > 0


def test_child_counts_a_broken_variant_and_exits_0(tmp_path):
    broken = tmp_path / "raises.py"
    broken.write_text(baseline_path("relu_squared").read_text() + RAISES_AT_CALL)
    rc, report = _child("relu_squared", "--variant", str(broken), "--limit", "3", cwd=tmp_path)
    assert rc == 0
    assert report["items"] == 3 and report["failed"] == 3
    assert "deliberately broken at call time" in report["first_error"] and len(report["first_error"]) <= 300


def test_parent_adds_up_children_and_kills_them_past_the_timeout(tmp_path):
    spec = get_spec("relu_squared")
    path = baseline_path("relu_squared")
    broken = tmp_path / "raises.py"
    broken.write_text(path.read_text() + RAISES_AT_CALL)
    # The broken variant as the gated candidate, the baseline as the current best (timed only).
    result = launch(spec, [broken, path], "interpret", 2, timeout_s=120, timed_only=[1], limit=3)
    assert result["workers"] == 2 and result["items"] == 6 and not result["timed_out"]
    items = work_list(spec, _sources(broken, path), "interpret", timed_only=[1])
    run = [i for share in shares(items, 2) for i in share[:3]]
    expected = sum(i.variant == 0 for i in run)  # the broken variant's calls among those run
    assert 0 < expected < len(run)  # both variants' calls ran
    assert result["failed"] == expected and result["status"] == "partial"
    assert "deliberately broken at call time" in result["first_error"]

    killed = launch(spec, [path], "interpret", 2, timeout_s=0.3)
    assert killed["status"] == "partial" and killed["timed_out"]
    assert killed["failed"] == killed["items"] > 0 and "killed after" in killed["first_error"]
