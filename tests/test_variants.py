import pytest

from liger_perf.errors import UserError
from liger_perf.registry import baseline_path, get_spec
from liger_perf.variants import load_variant, read_knobs, with_knobs


def test_knobs_are_readable_without_import():
    knobs, choices = read_knobs(baseline_path("fused_add_rms_norm").read_text())
    assert knobs["bwd_rows_per_program"] == "auto"
    for name, value in knobs.items():
        assert value in choices[name], name


def test_with_knobs_writes_a_loadable_variant_with_new_values(tmp_path):
    source = baseline_path("fused_add_rms_norm").read_text()
    new = with_knobs(source, {"num_warps": 8, "column_chunked": True, "BLOCK_SIZE": 256})
    assert read_knobs(new)[0]["num_warps"] == 8
    assert read_knobs(source)[0]["num_warps"] == "auto"  # the original text is untouched
    path = tmp_path / "v1.py"
    path.write_text(new)
    module = load_variant(path, get_spec("fused_add_rms_norm")).module
    assert module.KNOBS["column_chunked"] is True


def test_with_knobs_rejects_values_outside_choices():
    source = baseline_path("relu_squared").read_text()
    with pytest.raises(UserError, match="not allowed"):
        with_knobs(source, {"num_warps": 3})
    with pytest.raises(UserError, match="unknown knob"):
        with_knobs(source, {"warps": 4})


def test_column_chunked_variant_passes_gate(tmp_path, interpret_device):
    from liger_perf.correctness import check_variant

    spec = get_spec("fused_add_rms_norm")
    path = tmp_path / "chunked.py"
    path.write_text(with_knobs(baseline_path(spec.name).read_text(),
                               {"column_chunked": True, "BLOCK_SIZE": 256, "dw_reduction": "triton",
                                "bwd_rows_per_program": 8, "fwd_rows_per_program": 2}))
    result = check_variant(spec, load_variant(path, spec), interpret_device, convergence=False, fail_fast=True)
    assert result.failures().empty, result.failures()[["case", "output", "reason"]].to_string()
