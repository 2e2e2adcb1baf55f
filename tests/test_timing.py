"""Side-by-side timing statistics: intervals that contain 1.0 for equal contenders and exclude it for a real gap."""

import numpy as np
import pytest
import pandas as pd

from liger_perf.kernel.registry import get_spec
from liger_perf.measure.timing import TimingPlan, ratio_interval, summarize


def _samples(candidate, against, shape="64x64"):
    rows = []
    for name, times in (("candidate", candidate), ("against", against)):
        rows += [{"pass": "forward", "shape": shape, "dtype": "float32", "contender": name, "rep": i, "ms": t}
                 for i, t in enumerate(times)]
    return pd.DataFrame(rows)


def test_equal_contenders_interval_contains_one_and_a_real_gap_excludes_it():
    rng = np.random.default_rng(1)
    drift = np.linspace(1.0, 1.3, 200)  # the machine slows down during the run: pairing must absorb it
    a = drift * rng.lognormal(0, 0.03, 200)
    b = drift * rng.lognormal(0, 0.03, 200)
    ratio, low, high = ratio_interval(a, b, 0.05, 2000, np.random.default_rng(0))
    assert low <= 1.0 <= high and high - low < 0.05
    ratio, low, high = ratio_interval(0.9 * a, b, 0.05, 2000, np.random.default_rng(0))
    assert high < 1.0 and abs(ratio - 0.9) < 0.02


def test_summarize_states_ratios_to_the_reference_and_the_bandwidth_floor():
    spec = get_spec("relu_squared")
    samples = _samples([2.0] * 10, [4.0] * 10)
    summary = summarize(samples, "against", spec, bandwidth=1e9, plan=TimingPlan(10, 1))
    candidate = summary[summary.contender == "candidate"].iloc[0]
    assert candidate["ratio"] == 0.5 and candidate["relative_to"] == "against"
    # 64x64 float32 forward moves 2 * 4096 * 4 bytes: 32.768 us at 1 GB/s, against a 2 ms median.
    assert abs(candidate["bandwidth_fraction"] - 32768 / 1e9 / 2e-3) < 1e-9


def test_intervals_widen_with_the_number_of_comparisons():
    spec = get_spec("relu_squared")
    rng = np.random.default_rng(2)
    one = _samples(rng.lognormal(0, 0.05, 50), rng.lognormal(0, 0.05, 50))
    many = pd.concat([one.assign(shape=s) for s in ("64x64", "8x300", "1x1", "2x2")])
    width = lambda s: float((s.ci_high - s.ci_low)[s.contender == "candidate"].iloc[0])  # noqa: E731
    narrow = width(summarize(one, "against", spec, 1e9, TimingPlan(50, 1)))
    wide = width(summarize(many, "against", spec, 1e9, TimingPlan(50, 1)))
    assert wide > narrow  # Bonferroni: simultaneous intervals over every ratio of the trial


def test_timed_backward_takes_gradients_as_training_does_without_accumulate_grad_copies(interpret_device):
    """dX = dR is one tensor from the kernel; accumulated into two leaves' .grad, autograd would copy it (a full
    extra read and write that no training step pays). The timed pass must hand it over as it is."""
    from liger_perf.kernel.passes import case_inputs, prepare_pass
    from liger_perf.kernel.registry import baseline_path
    from liger_perf.kernel.spec import Case
    from liger_perf.kernel.variants import load_variant

    import torch

    spec = get_spec("fused_add_rms_norm")
    case = Case((6, 40), torch.float32, spec.bench_config)
    inputs, cotangents = case_inputs(spec, case, interpret_device)
    forward = spec.variant_forward(load_variant(baseline_path(spec.name), spec).module)
    for pass_name in ("backward", "full"):
        dX, dR, dW = prepare_pass(spec, forward, inputs, case.config, pass_name, cotangents).arm()()
        assert dX.data_ptr() == dR.data_ptr() and dW.shape == (40,)


def test_a_contender_that_replays_earlier_outputs_fails_the_spot_check_of_its_timed_calls(interpret_device):
    from liger_perf.kernel.registry import baseline_path
    from liger_perf.measure.timing import time_suite
    from liger_perf.kernel.variants import load_variant

    spec = get_spec("relu_squared")
    honest = spec.variant_forward(load_variant(baseline_path(spec.name), spec).module)
    remembered = {}

    def replaying(inputs, config):  # computes once per shape, then returns what it returned before
        key = tuple(inputs["X"].shape)
        if key not in remembered:
            remembered[key] = honest(inputs, config)
        return remembered[key]

    checks = []
    cases = spec.cases(interpret_device.suite, "bench")
    time_suite(spec, {"candidate": replaying, "against": honest, "eager": spec.reference_forward()}, cases,
               ["forward"], interpret_device, TimingPlan(3, 1), spot_checks=checks)
    assert len(checks) == 2 * len(cases)  # the judged pair, in every case; not the peers
    assert all(c["passed"] for c in checks if c["contender"] == "against")
    assert not any(c["passed"] for c in checks if c["contender"] == "candidate")


def _placement_trial(device, monkeypatch, plan):
    """An A/A trial of one function whose time depends only on where its input sits: 1 ms for the buffer
    allocated first in its pool up to 3 ms for the last (a memory-bound kernel's placement effect, magnified
    and made deterministic). The simultaneous interval of the ratio, from ``summarize``."""
    import time

    import torch

    from liger_perf.kernel import passes
    from liger_perf.kernel.spec import Case
    from liger_perf.measure.timing import time_suite

    spec = get_spec("relu_squared")
    pool_size = 2 * plan.slots
    allocated: list[int] = []
    place: dict[int, float] = {}  # a slot's X (data_ptr) -> its place in the order its pool was allocated, 0-1
    real = passes.training_leaves

    def recording(spec, inputs):  # every slot's leaves are allocated here
        leaves = real(spec, inputs)
        place[leaves["X"].data_ptr()] = (len(allocated) % pool_size) / max(1, pool_size - 1)
        allocated.append(leaves["X"].data_ptr())
        return leaves

    def placed(inputs, config):
        time.sleep(1e-3 * (1 + 2 * place[inputs["X"].data_ptr()]))

    monkeypatch.setattr(passes, "training_leaves", recording)
    samples = time_suite(spec, {"candidate": placed, "against": placed}, [Case((8, 16), torch.float32, {})],
                         ["forward"], device, plan)
    row = summarize(samples, "against", spec, 1e9, plan).query("contender == 'candidate'").iloc[0]
    return row["ratio"], row["ci_low"], row["ci_high"]


def test_buffer_placement_is_randomised_into_the_noise_so_an_a_a_interval_contains_one(interpret_device,
                                                                                      monkeypatch):
    """Two copies of one kernel, timed side by side: with one placement per contender (allocated once, in a
    fixed order) the placement is a per-role effect that no repetition varies, and the interval excludes 1
    although the code is the same. With a pool of slots per contender, allocated in a random order, a slot
    drawn at random per repetition and the pool re-allocated every few repetitions, placement is repetition
    noise: the intervals contain 1 (at about their confidence, so over ten seeds, not one)."""
    randomised = [_placement_trial(interpret_device, monkeypatch,
                                   TimingPlan(40, 0, seed=seed, slots=4, rebuild_every=5)) for seed in range(10)]
    fixed = [_placement_trial(interpret_device, monkeypatch, TimingPlan(40, 0, seed=seed, slots=1, rebuild_every=-1))
             for seed in range(10)]
    assert sum(low <= 1.0 <= high for _, low, high in randomised) >= 8, randomised
    assert not any(low <= 1.0 <= high for _, low, high in fixed), fixed
    assert all(abs(ratio - 1) > 0.3 for ratio, _, _ in fixed)  # one contender always on the slow buffer


def test_every_judged_contender_gets_a_spot_check_and_every_contender_its_slots(interpret_device, monkeypatch):
    """A screening passes every candidate and the current best as ``judged``; peers are timed, not checked."""
    import torch

    from liger_perf.kernel import passes
    from liger_perf.kernel.spec import Case
    from liger_perf.measure.timing import time_suite

    spec = get_spec("relu_squared")
    calls: list[int] = []
    real = passes.training_leaves
    monkeypatch.setattr(passes, "training_leaves", lambda s, i: calls.append(1) or real(s, i))
    contenders = {name: spec.reference_forward() for name in ("c1", "c2", "against", "eager")}
    checks: list[dict] = []
    case = Case((8, 16), torch.float32, {})
    time_suite(spec, contenders, [case], ["forward", "backward"], interpret_device,
               TimingPlan(4, 1, slots=3, rebuild_every=2), spot_checks=checks, judged=("c1", "c2", "against", "gone"))
    assert sorted(c["contender"] for c in checks) == sorted(["c1", "c2", "against"] * 2)
    assert all(c["passed"] for c in checks)
    # Per pass: two pools (rebuilt at repetition 2) of 3 slots for each of 4 contenders; the 3 spot-checked calls
    # and their float64 reference.
    assert len(calls) == 2 * (2 * 3 * 4 + 3 + 1)


def _copies_trial(device, plan, loaded: int, monkeypatch):
    """An A/A trial where one loaded copy of the module runs 0.5 ms slower than the other (its kernels' code
    placed worse): the candidate's first copy is the slow one, the best's second. ``loaded``: copies timed.
    The CPU timer reads a clock the copies advance, not the wall clock: slept times on a loaded CI machine
    stretched, and an interval of one copy each held 1 once (2026-12-06)."""
    import types

    import torch

    from liger_perf.kernel.spec import Case
    from liger_perf.measure import timing
    from liger_perf.measure.timing import time_suite

    spec = get_spec("relu_squared")
    rng = np.random.default_rng(plan.seed + 100)
    clock = [0.0]
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))

    def copy(extra_ms):
        def forward(inputs, config):
            clock[0] += 1e-3 * (1 + extra_ms + rng.uniform(0, 1))
        return forward

    contenders = {"candidate": [copy(0.5), copy(0.0)][:loaded], "against": [copy(0.0), copy(0.5)][:loaded]}
    samples = time_suite(spec, contenders, [Case((8, 16), torch.float32, {})], ["forward"], device, plan)
    row = summarize(samples, "against", spec, 1e9, plan).query("contender == 'candidate'").iloc[0]
    return row["ratio"], row["ci_low"], row["ci_high"]


def test_an_effect_of_one_loaded_copy_is_randomised_into_the_noise(interpret_device, monkeypatch):
    """Two A/A trials' exclusions on the H200 were one copy 3 % faster at the shortest backward, with the input
    slots randomised: a contender imported twice has its copies dealt over its slots, so a copy's own effect is
    repetition noise too. With one copy each, the same effect excludes 1 every time."""
    two = [_copies_trial(interpret_device, TimingPlan(40, 0, seed=seed, slots=4, rebuild_every=-1), 2, monkeypatch)
           for seed in range(8)]
    one = [_copies_trial(interpret_device, TimingPlan(40, 0, seed=seed, slots=4, rebuild_every=-1), 1, monkeypatch)
           for seed in range(8)]
    assert sum(low <= 1.0 <= high for _, low, high in two) >= 6, two
    assert not any(low <= 1.0 <= high for _, low, high in one), one


def test_intervals_are_widened_by_the_timer_resolution_on_a_gpu_and_not_under_the_interpreter():
    """A/A trials on the H200 had a copy 2-3 % (0.4-0.8 us) faster at a 23 us backward, an interval excluding 1 in
    3 of 6: a difference of two CUDA-event medians is known to no better than the events' resolution. Each
    interval is widened by it over the reference's median; a real gap at a long pass still shows."""
    import torch

    from liger_perf.kernel.device import Device
    from liger_perf.measure.timing import CUDA_EVENT_RESOLUTION_MS, widened

    assert TimingPlan.default(Device("cuda", torch.device("cuda"))).resolution_ms == CUDA_EVENT_RESOLUTION_MS == 0.5e-3
    assert TimingPlan.default(Device("cuda", torch.device("cuda")), repetitions=7).resolution_ms == CUDA_EVENT_RESOLUTION_MS
    assert TimingPlan.default(Device("interpret", torch.device("cpu"))).resolution_ms == 0.0
    spec = get_spec("relu_squared")
    rng = np.random.default_rng(3)
    # The copy 1.7 % faster at a 23 us pass, tightly: the bootstrap alone excludes 1, the widened interval not.
    short = _samples(0.0227 * rng.lognormal(0, 0.002, 100), 0.0231 * rng.lognormal(0, 0.002, 100))
    plain = summarize(short, "against", spec, 1e9, TimingPlan(100, 1))
    wide = summarize(short, "against", spec, 1e9, TimingPlan(100, 1, resolution_ms=0.5e-3))
    row, widened_row = (s[s.contender == "candidate"].iloc[0] for s in (plain, wide))
    assert row.ci_high < 1.0 <= widened_row.ci_high and widened_row.ratio == row.ratio
    margin = 0.5e-3 / float(short[short.contender == "against"].ms.median())
    assert widened_row.ci_high - row.ci_high == pytest.approx(margin, rel=0.01)
    assert row.ci_low - widened_row.ci_low == pytest.approx(margin, rel=0.01)
    # 10 % faster at a 1 ms pass: 0.05 % wider, still excluding 1.
    long = _samples(0.9 * rng.lognormal(0, 0.01, 100), rng.lognormal(0, 0.01, 100))
    wide = summarize(long, "against", spec, 1e9, TimingPlan(100, 1, resolution_ms=0.5e-3))
    assert wide[wide.contender == "candidate"].iloc[0].ci_high < 0.95
    assert widened(0.9, 1.1, 0.0, 1.0) == (0.9, 1.1) and widened(0.9, 1.1, 0.5e-3, 0.0) == (0.9, 1.1)
