"""``liger-perf bench``: contenders side by side in one child process, tables and plots in reports/<kernel>/."""

import json
import subprocess
import sys

from liger_perf.kernel.registry import baseline_path
from liger_perf.kernel.variants import with_knobs


def _bench(tmp_path, *args):
    env = {"LIGER_PERF_REPORTS": str(tmp_path / "reports"), "LIGER_PERF_NOTEBOOKS": str(tmp_path / "notebooks"),
           "TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    return subprocess.run([sys.executable, "-m", "liger_perf", "bench", "relu_squared", "--repetitions", "3", *args],
                          capture_output=True, text=True, env=env, timeout=900)


def test_bench_measures_best_beside_baseline_and_eager_and_writes_the_report(tmp_path):
    variant = tmp_path / "bigger.py"
    variant.write_text(with_knobs(baseline_path("relu_squared").read_text(), {"BLOCK_SIZE": 4096}))
    done = _bench(tmp_path, "--variant", str(variant))
    assert done.returncode == 0, done.stderr
    assert "interpreter" in done.stdout
    out = tmp_path / "reports" / "interpret" / "relu_squared"
    data = json.loads((out / "bench.json").read_text())
    assert data["contenders"] == ["best", "baseline", "eager"]
    assert set(data["unavailable"]) == {"liger-kernel", "torch.compile"}
    cases = {(r["pass"], r["shape"], r["dtype"]) for r in data["rows"]}
    assert {p for p, _, _ in cases} == {"forward", "backward", "full"}
    for r in data["rows"]:
        assert r["median_ms"] > 0 and r["relative_to"] == "best"
        assert (r["ratio"] == 1.0) == (r["contender"] == "best")
    report = (out / "bench.md").read_text()
    assert "geomean peer / best" in report and "baseline / best" in report and "Not measured: torch.compile" in report
    assert all((out / f"bench-{p}.png").stat().st_size > 1000 for p in ("forward", "backward", "full"))
    # Accuracy: every contender but torch.compile on the same inputs; the knob changes no rounding.
    accuracy = data["accuracy"]
    assert {r["contender"] for r in accuracy} == {"best", "baseline", "eager"}
    errors = {(r["shape"], r["dtype"], r["output"], r["contender"]): r["error"] for r in accuracy}
    assert all(errors[k[:3] + ("best",)] == errors[k[:3] + ("baseline",)] for k in errors)
    assert "## Accuracy against float64" in report and "best error / baseline's" in report
    assert not (out / ".bench.partial.json").exists()


def test_bench_of_some_shapes_times_only_those_and_leaves_the_whole_suites_report_alone(tmp_path):
    """``--shapes``: torch.compile at a few model shapes fits a call where the whole suite would not."""
    out = tmp_path / "reports" / "interpret" / "relu_squared"
    out.mkdir(parents=True)
    (out / "bench.md").write_text("the whole suite's report")
    done = _bench(tmp_path, "--shapes", "64x64")
    assert done.returncode == 0, done.stderr
    data = json.loads((out / "bench-shapes.json").read_text())
    assert data["shapes"] == ["64x64"]
    assert {(r["shape"], r["dtype"]) for r in data["rows"]} == {("64x64", "float32"), ("64x64", "float16")}
    assert "Only the shapes 64x64" in (out / "bench-shapes.md").read_text()
    assert (out / "bench.md").read_text() == "the whole suite's report" and not (out / "bench.json").exists()
    unknown = _bench(tmp_path, "--shapes", "64x64,7x7")
    assert unknown.returncode != 0 and "--shapes 7x7: not in the interpret suite" in unknown.stderr
    assert "8x300" in unknown.stderr and "Traceback" not in unknown.stderr


def test_bench_rejects_a_missing_variant_file_in_one_line(tmp_path):
    missing = _bench(tmp_path, "--variant", str(tmp_path / "nope.py"))
    assert missing.returncode != 0 and "does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_a_pipe_in_a_table_cell_is_escaped_not_replaced():
    """A gate's reason holds "||err||/||ref||": the report's tables keep it readable and the row's columns whole."""
    import pandas as pd

    from liger_perf.report import markdown_table

    table = markdown_table(pd.DataFrame([{"trial": "0031", "reasons": "dW: ||err||/||ref|| = 0.00454 > 0.004"}]))
    row = table.splitlines()[2]
    assert row == r"| 0031 | dW: \|\|err\|\|/\|\|ref\|\| = 0.00454 > 0.004 |"
    assert len(row.replace(r"\|", "").split("|")) == 4  # three separators: two cells


def test_no_compile_leaves_torch_compile_out_and_says_why(monkeypatch, interpret_device):
    """Where torch.compile is a peer (a GPU), --no-compile drops it from the run and names the flag as the reason;
    the other peers stay."""
    from liger_perf import bench
    from liger_perf.measure import timing

    real = timing.peer_contenders

    def with_compile(spec, device):
        found, unavailable = real(spec, device)
        unavailable.pop("torch.compile", None)
        return {**found, "torch.compile": spec.reference_forward()}, unavailable

    monkeypatch.setattr(timing, "peer_contenders", with_compile)
    path = str(baseline_path("relu_squared"))
    left_out = bench.measure("relu_squared", path, "interpret", 2, "", compiled=False)
    assert "torch.compile" not in left_out["contenders"] and "eager" in left_out["contenders"]
    assert left_out["unavailable"]["torch.compile"] == "left out of this run (--no-compile)"
    kept = bench.measure("relu_squared", path, "interpret", 2, "", compiled=True)
    assert "torch.compile" in kept["contenders"]


class _Killed(Exception):
    """Stands for the time limit's kill of the bench's child process."""


def test_a_bench_stopped_by_its_time_limit_reports_the_cases_it_finished(tmp_path, monkeypatch, interpret_device):
    """The child rewrites its samples after each case. Stopped during its third case, the bench reports the two it
    finished, under bench-partial.* (the whole suite's report is left alone), says so in the report and on the
    command line, and a stop before any case is done is still one clear line."""
    import shutil

    import pytest
    from typer.testing import CliRunner

    from liger_perf import bench, cli
    from liger_perf.core.errors import UserError
    from liger_perf.kernel.registry import get_spec
    from liger_perf.kernel.spec import shape_label
    from liger_perf.measure import timing

    real, begun = timing.time_suite, []

    def killed_in_the_third_case(spec, contenders, cases, *args, **kwargs):
        begun.extend(cases)
        if len(begun) == 3:
            raise _Killed
        return real(spec, contenders, cases, *args, **kwargs)

    monkeypatch.setattr(timing, "time_suite", killed_in_the_third_case)
    partial = tmp_path / "scratch" / bench.PARTIAL_FILE
    partial.parent.mkdir()
    with pytest.raises(_Killed):
        bench.measure("relu_squared", str(baseline_path("relu_squared")), "interpret", 2, partial=partial)
    data = bench.partial_result(partial)
    all_cases = get_spec("relu_squared").cases("interpret", "bench")
    assert data["partial"] == {"cases_done": 2, "cases": len(all_cases)} and len(all_cases) > 3
    finished = {(shape_label(c.shape), str(c.dtype).removeprefix("torch.")) for c in begun[:2]}
    assert {(r["shape"], r["dtype"]) for r in data["rows"]} == finished
    assert {r["pass"] for r in data["rows"]} == {"forward", "backward", "full"}
    assert data["memory"] == [] and data["accuracy"] == []
    out = tmp_path / "reports"
    path = bench.write_bench_report("relu_squared", data, out)
    assert path.name == "bench-partial.md" and not (out / "bench.md").exists()
    assert f"Stopped by its time limit after 2 of {len(all_cases)} cases" in path.read_text()
    assert bench.partial_result(tmp_path / "none.json") is None
    # The child's entry point writes the partial file where the parent looks: beside its result, in its scratch.
    monkeypatch.setattr(timing, "time_suite", real)
    child = tmp_path / "child"
    child.mkdir()
    bench._main(["relu_squared", str(baseline_path("relu_squared")), "interpret", "2", str(child / "bench.json"), "",
                 "eager-only", "64x64"])
    assert bench.partial_result(child / bench.PARTIAL_FILE)["partial"] == {"cases_done": 2, "cases": 2}
    # A line cut by the kill is dropped; every case timed, the report says the stop came after them.
    cut = tmp_path / "cut.json"
    cut.write_text(partial.read_text() + '{"samples": [{"pass": "forw')
    assert bench.partial_result(cut)["partial"] == data["partial"]
    timed_all = {**data, "partial": {"cases_done": 2, "cases": 2}}
    assert "after timing all 2 cases**, before peak memory" in \
        bench.write_bench_report("relu_squared", timed_all, tmp_path / "all").read_text()

    # The parent's side: the child's time ran out. With a finished case, the bench of it; without, one line.
    def ran_out(argv, scratch, **kwargs):
        if leave_partial:
            shutil.copy(partial, scratch / bench.PARTIAL_FILE)
        raise bench.subprocess.TimeoutExpired(argv, kwargs["timeout"])

    monkeypatch.setattr(bench, "run_contained", ran_out)
    leave_partial = True
    assert bench.run_bench("relu_squared", baseline_path("relu_squared"), "interpret", timeout_s=5)["partial"] == \
        data["partial"]
    monkeypatch.setenv("LIGER_PERF_REPORTS", str(tmp_path / "cli-reports"))
    monkeypatch.setenv("LIGER_PERF_NOTEBOOKS", str(tmp_path / "notebooks"))
    result = CliRunner().invoke(cli.app, ["bench", "relu_squared", "--device", "interpret", "--timeout", "5"])
    assert isinstance(result.exception, UserError)
    assert f"stopped after 2 of {len(all_cases)} cases: bench-partial.md holds what it measured" in \
        str(result.exception)
    assert (tmp_path / "cli-reports" / "interpret" / "relu_squared" / "bench-partial.json").is_file()
    leave_partial = False
    with pytest.raises(UserError, match="stopped before its first case was done"):
        bench.run_bench("relu_squared", baseline_path("relu_squared"), "interpret", timeout_s=5)
