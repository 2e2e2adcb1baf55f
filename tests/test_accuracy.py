"""Accuracy is a guarded metric: each contender's error against float64 on the same inputs, the candidate's held
to the current best's by the judge (``max_accuracy_regression``)."""

import pytest

from liger_perf.judge.guardrails import Guardrails
from liger_perf.record.history import accuracy_ratios
from liger_perf.judge import judge
from liger_perf.kernel.registry import baseline_path
from liger_perf.run import run_trial
from liger_perf.record.schema import TrialResult

from test_judge import _result

RULES = Guardrails(target="backward")


def _with_accuracy(errors: dict, **row) -> TrialResult:
    """A clear backward improvement, with ``errors``: {(dtype, output): (candidate's, best's)} at two shapes, each
    row with the keys of ``row`` besides; the rows pass through the notebook's JSON as a trial's do."""
    from liger_perf.record.notebook import jsonable

    rows = [{"shape": shape, "dtype": dtype, "config": "casting_mode=llama", "output": output,
             "contender": contender, "error": value, **row}
            for (dtype, output), pair in errors.items() for shape in ("2048x1024", "2048x8192")
            for contender, value in zip(("candidate", "against"), pair)]
    return TrialResult.model_validate(jsonable({**_result(target_ratio=0.8).model_dump(by_alias=True),
                                                "accuracy": {"seed": 1, "rows": rows}}))


def test_a_gradient_rounded_once_more_is_rejected_however_much_faster():
    verdict = judge(_with_accuracy({("bfloat16", "dX"): (2.4e-3, 1.7e-3), ("bfloat16", "Y"): (2e-3, 2e-3)}), RULES)
    assert verdict.verdict == "rejected"
    assert any("accuracy of dX bfloat16 [casting_mode=llama]: error against float64 1.41x" in r
               for r in verdict.reasons), verdict.reasons


def test_more_accurate_is_reported_and_equal_accuracy_changes_nothing():
    better = judge(_with_accuracy({("bfloat16", "dX"): (1.2e-3, 2.4e-3)}), RULES)
    assert better.verdict == "accepted" and any("0.50x the current best's" in r for r in better.reasons)
    same = judge(_with_accuracy({("float32", "dW"): (3e-7, 3e-7)}), RULES)
    assert same.verdict == "accepted" and len(same.reasons) == 1


def test_errors_below_a_quarter_of_the_unit_roundoff_count_as_equal():
    # float32: 2**-26 is about 1.5e-8; 1e-9 against 4e-9 is the order of a sum, not a rounding.
    tiny = _with_accuracy({("float32", "Y"): (4e-9, 1e-9)})
    assert accuracy_ratios(tiny)[("float32", "casting_mode=llama", "Y")][2] == pytest.approx(1.0)
    assert judge(tiny, RULES).verdict == "accepted"
    assert judge(_with_accuracy({("float32", "Y"): (4e-8, 1e-9)}), RULES).verdict == "rejected"


def test_a_result_that_is_not_finite_is_rejected_after_the_notebook_s_json():
    import json
    import math

    import torch

    from liger_perf.measure.accuracy import _error

    row = _error(torch.tensor([1.0, math.inf]), torch.tensor([1.0, 2.0]))
    assert row == {"error": None, "nonfinite": True}
    broken = _with_accuracy({("float16", "dX"): (None, 2e-4)})
    rows = json.loads(broken.model_dump_json())["accuracy"]["rows"]
    for r in rows:
        r["nonfinite"] = r["contender"] == "candidate"
    broken = TrialResult.model_validate({**broken.model_dump(by_alias=True), "accuracy": {"rows": rows}})
    verdict = judge(broken, RULES)
    assert verdict.verdict == "rejected" and any("not finite" in r for r in verdict.reasons), verdict.reasons


def test_the_order_of_a_sum_over_rows_is_not_a_regression_but_an_extra_rounding_is():
    # dW of a tiled backward, summed in another order: 1.12x in float32 (as measured on the H200).
    assert judge(_with_accuracy({("float32", "dW"): (1.6e-7, 1.43e-7)}, reduction=True), RULES).verdict == "accepted"
    assert judge(_with_accuracy({("float32", "dW"): (1.6e-7, 1.43e-7)}), RULES).verdict == "rejected"
    # A half-precision accumulator: tenfold.
    assert judge(_with_accuracy({("float32", "dW"): (1.4e-6, 1.43e-7)}, reduction=True), RULES).verdict == "rejected"


def test_a_best_that_raised_or_an_exact_zero_compares_nothing_and_crashes_nothing():
    raised = _with_accuracy({("float16", "Y"): (3e-4, None)}, raised="OutOfResources")
    assert accuracy_ratios(raised) == {} and judge(raised, RULES).verdict == "accepted"
    exact = _with_accuracy({("int8", "Y"): (0.0, 0.0)})  # a dtype without a floor, both exact
    assert accuracy_ratios(exact)[("int8", "casting_mode=llama", "Y")][2] == 1.0


def test_the_guardrail_is_configurable():
    loose = Guardrails(target="backward", max_accuracy_regression=0.5)
    assert judge(_with_accuracy({("bfloat16", "dX"): (2.4e-3, 1.7e-3)}), loose).verdict == "accepted"


LOSSY = ("    r = _relu(x)\n    tl.store(Y + offsets, (r * r).to(Y.dtype.element_ty), mask=mask)",
         "    r = _relu(x)\n    # three ulps too large in float32: within the gate's tolerance, less accurate than r * r\n"
         "    tl.store(Y + offsets, (r * r * 1.0000003).to(Y.dtype.element_ty), mask=mask)")


@pytest.mark.slow
def test_a_trial_measures_both_contenders_on_the_same_inputs_and_the_judge_rejects_a_less_accurate_one(tmp_path):
    source = baseline_path("relu_squared").read_text()
    assert LOSSY[0] in source
    variant = tmp_path / "lossy.py"
    variant.write_text(source.replace(*LOSSY))
    run = run_trial("relu_squared", variant, against=baseline_path("relu_squared"), root=tmp_path / "nb",
                    device="interpret", repetitions=2, convergence=False, ncu=False, peers=False)
    result = run.result
    assert result.status == "complete", result.reason  # it passes the gate: only accuracy tells it apart
    rows = result.accuracy_rows()
    assert {r.contender for r in rows} == {"candidate", "against"}
    assert {(r.shape, r.dtype) for r in rows if r.contender == "candidate"} == \
        {(r.shape, r.dtype) for r in rows if r.contender == "against"}
    assert {r.dtype for r in rows} == {"float32", "float16"}
    ratios = accuracy_ratios(result)
    assert ratios[("float32", "", "Y")][2] > 1.5  # the forward lost accuracy in float32
    assert ratios[("float32", "", "dX")][2] == pytest.approx(1.0)  # the backward is the baseline's
    verdict = judge(result.model_copy(update={"device": "cuda"}), Guardrails(target="backward"))
    assert verdict.verdict == "rejected" and any(r.startswith("accuracy of Y float32") for r in verdict.reasons)
