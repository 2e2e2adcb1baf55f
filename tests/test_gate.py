"""The correctness gate passes the baselines and catches each kind of real mistake."""

import pytest
import torch

from liger_perf.correctness import PoisonAllocations, check_variant, compare
from liger_perf.registry import baseline_path, get_spec
from liger_perf.spec import Tolerance
from liger_perf.variants import load_variant

from broken_variants import BROKEN, write_broken_variant
from gate_cover import pairwise_cases


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["relu_squared", "fused_add_rms_norm"])
def test_baseline_passes_gate_and_convergence(kernel, interpret_device):
    spec = get_spec(kernel)
    # The fused kernel's whole interpreter gate takes a minute on 2 cores and runs in the nightly test (its
    # baseline trial); here its pairwise cover, which meets every shape, dtype, casting mode and layout.
    cases = pairwise_cases(spec, interpret_device.suite) if kernel == "fused_add_rms_norm" else None
    result = check_variant(spec, load_variant(baseline_path(kernel), spec), interpret_device, cases=cases)
    assert result.failures().empty, result.failures()[["case", "output", "against", "reason"]].to_string()
    assert not result.convergence.empty and (result.convergence["verdict"] == "pass").all()
    assert result.passed
    # Every output and gradient is compared against both references.
    assert set(result.rows["output"]) == set(spec.outputs) | set(spec.gradient_names())
    assert set(result.rows["against"]) == {"same-dtype", "float64"}
    assert set(result.rows["layout"]) == {"contiguous", "padded"}


@pytest.mark.slow
@pytest.mark.parametrize("broken", BROKEN, ids=[b.name for b in BROKEN])
def test_gate_catches_broken_variant(broken, interpret_device, tmp_path):
    # The gate draws its inputs from the global generator, randomly seeded per process: seed it, so the
    # outcome does not depend on which tests ran before (some mistakes show only on some inputs: issue 18).
    torch.manual_seed(0)
    spec = get_spec(broken.kernel)
    variant = load_variant(write_broken_variant(broken, tmp_path), spec)
    result = check_variant(spec, variant, interpret_device, fail_fast=True)
    assert not result.passed
    assert result.convergence_skipped
    failures = result.failures()
    exposed = set(broken.exposed_in.split("|"))
    assert exposed & set(failures["output"]), failures[["output", "reason"]].to_string()


def test_unwritten_output_is_reported_as_non_finite(interpret_device, tmp_path):
    spec = get_spec("fused_add_rms_norm")
    broken = next(b for b in BROKEN if b.name == "last_column_unwritten")
    variant = load_variant(write_broken_variant(broken, tmp_path), spec)
    failures = check_variant(spec, variant, interpret_device, fail_fast=True).failures()
    assert failures["reason"].str.contains("non-finite").any()


def test_poison_fills_uninitialised_allocations():
    with PoisonAllocations():
        a = torch.empty(5)
        b = torch.empty_like(torch.ones(3, 2))
        c = torch.empty(4, dtype=torch.int32)
        z = torch.zeros(3)
    assert torch.isnan(a).all() and torch.isnan(b).all()
    assert (c == -1).all()
    assert (z == 0).all()


def test_compare_never_passes_nan_or_inf():
    tol = Tolerance(atol=1e9, rtol=1e9, norm=1e9)
    ref = torch.ones(4)
    assert compare(torch.tensor([1.0, float("nan"), 1.0, 1.0]), ref, tol)["verdict"] == "FAIL"
    assert compare(torch.tensor([1.0, float("inf"), 1.0, 1.0]), ref, tol)["verdict"] == "FAIL"
    assert compare(ref.clone(), ref, Tolerance(0, 0, 0))["verdict"] == "pass"


def test_compare_norm_bound_catches_systematic_error_within_elementwise_bound():
    ref = torch.linspace(1, 2, 1000)
    out = ref * (1 + 5e-4)  # every element off by a little: inside rtol, outside the norm bound
    verdict = compare(out, ref, Tolerance(atol=0, rtol=1e-3, norm=1e-4))
    assert verdict["verdict"] == "FAIL" and "||err||" in verdict["reason"]


def test_compare_norm_bound_allows_subnormal_rounding_but_not_real_error():
    tol = Tolerance(atol=1e-2, rtol=1e-2, norm=2e-3)
    x = torch.tensor([5e-4], dtype=torch.float16)
    ref = x.double() ** 2  # 2.5e-7: subnormal in float16, where one rounding costs ~5% relative error
    assert compare((x.float() ** 2).half(), ref, tol)["verdict"] == "pass"
    normal = torch.tensor([0.5], dtype=torch.float16).double()
    assert compare((normal * 1.01).half(), normal, tol)["verdict"] == "FAIL"
