"""The model suite: real models' widths and token counts, a tuning split and a held-out split nothing else reads."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from liger_perf.kernel import model_shapes
from liger_perf.kernel.model_shapes import MAX_ELEMENTS, MODELS, TOKENS, model_shapes as shapes_of, split_of, widths
from liger_perf.kernel.registry import baseline_path, get_spec
from liger_perf.kernel.spec import MODEL_SUITES

PACKAGE = Path(__file__).resolve().parents[1] / "liger_perf"


def test_the_suite_spans_a_dozen_families_the_widths_that_lost_and_1k_to_64k_tokens():
    assert len({m.family for m in MODELS}) >= 12
    hidden = widths("hidden")
    # Where the best lost to liger-kernel on the H200 (issue 30): H of 5120, 6144 and 12288, and float32 at 12288.
    assert {5120, 6144, 12288, 4096, 8192, 16384} <= set(hidden)
    assert min(TOKENS) == 1024 and max(TOKENS) == 65536 and any(t % 2 for t in TOKENS)
    for kind in ("hidden", "intermediate"):
        tune, held_out = shapes_of(kind, "tune"), shapes_of(kind, "held-out")
        assert all(tokens * width <= MAX_ELEMENTS for tokens, width in tune + held_out)
        # Every width in exactly one split; both splits meet small and large token counts.
        assert {w for _, w in tune} | {w for _, w in held_out} == set(widths(kind))
        assert not {w for _, w in tune} & {w for _, w in held_out}
        for split in (tune, held_out):
            assert min(t for t, _ in split) <= 2047 and max(t for t, _ in split) >= 8192
            assert max(t * w for t, w in split) >= MAX_ELEMENTS // 2  # large, DRAM-bound cases in both
        assert len(held_out) >= len(widths(kind)) // 3
        # Every width meets a short step and a long one (or the most tokens that fit): no bucket is tuned on its
        # noise-bound small cases alone (896 columns met 1024 and 2047 tokens only, until 2026-12-03).
        half = len(TOKENS) // 2
        for width in widths(kind):
            counts = [t for t, w in tune + held_out if w == width]
            assert min(counts) <= TOKENS[half - 1], (width, counts)
            assert max(counts) >= min(TOKENS[half], MAX_ELEMENTS // width), (width, counts)
    with pytest.raises(ValueError, match="no hidden width"):
        split_of(1000, "hidden")
    with pytest.raises(ValueError, match="split"):
        shapes_of("hidden", "test")


def test_a_kernel_spec_serves_both_splits_as_benchmark_cases_only():
    spec = get_spec("fused_add_rms_norm")
    for suite, split in MODEL_SUITES.items():
        cases = spec.cases(suite, "bench")
        assert [c.shape for c in cases if c.dtype == torch.bfloat16] == shapes_of(spec.model_widths, split)
        assert {c.shape for c in cases if c.dtype == torch.float32} == set(shapes_of(spec.model_widths, split))
        assert any(c.dtype == torch.float16 for c in cases)  # spot checks
        assert all(c.config == dict(spec.bench_config) for c in cases)
        with pytest.raises(ValueError, match="benchmark cases only"):
            spec.cases(suite, "check")


def _names_and_strings(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
        elif isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.add(node.name.rsplit(".", 1)[-1])
    return found


FORBIDDEN = {"models-held-out", "held-out", "MODEL_SUITES", "model_shapes"}


def test_only_the_bench_reads_the_model_suites_never_the_loop_the_trial_or_the_judge(tmp_path):
    """The held-out split is there to show what the loop never saw: no module that proposes, runs, judges or
    records a trial may name it, nor the model suites' table (a trial times the device's suite, or the tuning split
    by its name, "models-tune": ``tests/test_tuning_suite.py``)."""
    allowed = {PACKAGE / "kernel" / "spec.py", PACKAGE / "kernel" / "model_shapes.py", PACKAGE / "bench.py"}
    touching = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                      if p not in allowed and _names_and_strings(p) & FORBIDDEN)
    assert touching == []
    # The check sees each way a module could reach the split (planted, as the layout test does).
    for source in ("from liger_perf.kernel.spec import MODEL_SUITES\n",
                   "import liger_perf.kernel.model_shapes as m\n",
                   "def cases(spec):\n    return spec.cases('models-held-out', 'bench')\n",
                   "from liger_perf.kernel import spec\nx = spec.MODEL_SUITES\n"):
        planted = tmp_path / "planted.py"
        planted.write_text(source)
        assert _names_and_strings(planted) & FORBIDDEN, source


def test_the_bench_of_the_model_suite_reports_both_splits_side_by_side(tmp_path, monkeypatch, interpret_device):
    """Scaled down (three widths, two token counts) so that the interpreter runs it: the rows carry their split,
    and the report's summary and per-shape tables give the tuning split, then the held-out one."""
    from liger_perf import bench

    monkeypatch.setattr(model_shapes, "MODELS", (model_shapes.ModelWidths("A", "a", 40, 40),
                                                 model_shapes.ModelWidths("B", "b", 64, 64),
                                                 model_shapes.ModelWidths("C", "c", 100, 100)))
    monkeypatch.setattr(model_shapes, "TOKENS", (8, 13))
    data = bench.measure("relu_squared", str(baseline_path("relu_squared")), "interpret", 2, "models")
    assert data["suite"] == "models"
    splits = {(r["shape"], r["split"]) for r in data["rows"]}
    assert splits == {("8x40", "tune"), ("13x40", "tune"), ("8x64", "held-out"), ("13x64", "held-out"),
                      ("8x100", "tune"), ("13x100", "tune")}
    summary = bench.summary_table(data)
    assert list(summary.columns[:3]) == ["split", "pass", "peer"]
    assert list(dict.fromkeys(summary["split"])) == ["tune", "held-out"]
    per_shape = bench.speedups(data)
    assert list(dict.fromkeys(per_shape["split"])) == ["tune", "held-out"]
    path = bench.write_bench_report("relu_squared", data, tmp_path)
    assert path.name == "bench-models.md" and (tmp_path / "bench-models.json").is_file()
    text = path.read_text()
    assert "| tune | forward | eager |" in text and "| held-out | forward | eager |" in text
    assert "held-out` split, which only this command reads" in text
    assert json.loads((tmp_path / "bench-models.json").read_text())["suite"] == "models"
    assert not (tmp_path / "bench.md").exists()  # the device suite's report is left alone


def test_the_model_suite_is_refused_in_one_line_under_the_interpreter_and_an_unknown_suite_too(tmp_path):
    env = {"LIGER_PERF_REPORTS": str(tmp_path / "reports"), "LIGER_PERF_NOTEBOOKS": str(tmp_path / "notebooks"),
           "TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    for suite, says in (("models", "--suite models needs a GPU"), ("huge", "--suite huge: leave it out")):
        done = subprocess.run([sys.executable, "-m", "liger_perf", "bench", "relu_squared", "--suite", suite],
                              capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode != 0 and says in done.stderr and "Traceback" not in done.stderr


def test_each_kernel_takes_the_widths_its_rows_span_in_a_model():
    """A norm's row is the residual stream (hidden); an MLP activation's is the intermediate width."""
    from liger_perf.kernel.registry import get_spec

    assert get_spec("fused_add_rms_norm").model_widths == "hidden"
    assert get_spec("relu_squared").model_widths == "intermediate"
    widths = {case.shape[-1] for case in get_spec("relu_squared").cases("models-tune", "bench")}
    assert widths <= {m.intermediate for m in model_shapes.MODELS}
    assert widths - {m.hidden for m in model_shapes.MODELS}


def test_one_token_count_gives_each_width_one_case(monkeypatch):
    """With a single count there is no lower and upper half to take from: each width meets that count once."""
    monkeypatch.setattr(model_shapes, "TOKENS", (1024,))
    for split in ("tune", "held-out"):
        shapes = shapes_of("hidden", split)
        assert {t for t, _ in shapes} == {1024}
        assert sorted(w for _, w in shapes) == [w for w in widths("hidden") if split_of(w, "hidden") == split]
