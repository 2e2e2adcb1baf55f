"""Side-by-side timing statistics: intervals that contain 1.0 for equal contenders and exclude it for a real gap."""

import numpy as np
import pandas as pd

from liger_perf.registry import get_spec
from liger_perf.timing import TimingPlan, ratio_interval, summarize


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
    from liger_perf.passes import case_inputs, prepare_pass
    from liger_perf.registry import baseline_path
    from liger_perf.spec import Case
    from liger_perf.variants import load_variant

    import torch

    spec = get_spec("fused_add_rms_norm")
    case = Case((6, 40), torch.float32, spec.bench_config)
    inputs, cotangents = case_inputs(spec, case, interpret_device)
    forward = spec.variant_forward(load_variant(baseline_path(spec.name), spec).module)
    for pass_name in ("backward", "full"):
        dX, dR, dW = prepare_pass(spec, forward, inputs, case.config, pass_name, cotangents).arm()()
        assert dX.data_ptr() == dR.data_ptr() and dW.shape == (40,)


def test_a_contender_that_replays_earlier_outputs_fails_the_spot_check_of_its_timed_calls(interpret_device):
    from liger_perf.registry import baseline_path
    from liger_perf.timing import time_suite
    from liger_perf.variants import load_variant

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
