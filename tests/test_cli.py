"""The command line: one-line errors for bad input, exit codes that a script can trust."""

import json
import os
import subprocess
import sys

import pytest
import torch

from broken_variants import BROKEN, ROOT, write_broken_variant


def run_cli(*args, cwd=None, env=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "liger_perf", *args], capture_output=True, text=True,
                          env=env, cwd=cwd or ROOT, timeout=900)


def test_kernels_lists_both_kernels():
    out = run_cli("kernels")
    assert out.returncode == 0, out.stderr
    assert "fused_add_rms_norm" in out.stdout and "relu_squared" in out.stdout
    assert "backward" in out.stdout and "bfloat16" in out.stdout


def test_check_passes_in_interpreter_mode_and_says_so():
    out = run_cli("check", "relu_squared")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Triton interpreter" in out.stdout
    assert "PASS" in out.stdout


def test_check_fails_with_nonzero_exit_for_broken_variant(tmp_path):
    broken = next(b for b in BROKEN if b.name == "backward_without_relu_mask")
    out = run_cli("check", "relu_squared", "--variant", str(write_broken_variant(broken, tmp_path)),
                  "--no-convergence")
    assert out.returncode == 1
    assert "FAIL" in out.stdout + out.stderr


def _one_line_error(out):
    assert out.returncode == 2, out.stdout + out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr
    return lines[0]


def test_unknown_kernel(tmp_path):
    line = _one_line_error(run_cli("check", "no_such_kernel"))
    assert "unknown kernel 'no_such_kernel'" in line and "fused_add_rms_norm" in line


def test_a_variant_file_given_as_the_kernel_says_where_it_goes():
    """`check variants/0087.py` offered `liger-perf new variants/0087.py`: a kernel named after a file."""
    line = _one_line_error(run_cli("check", "notebooks/0087.py"))
    assert "'notebooks/0087.py' is a file, not a kernel" in line and "--variant notebooks/0087.py" in line, line
    assert "liger-perf new" not in line and "fused_add_rms_norm" in line


def test_a_mistyped_kernel_name_suggests_the_registered_one_before_a_new_kernel():
    """`optimize fused_add_rms_nrom` suggested `liger-perf new fused_add_rms_nrom`: a new kernel of the typo."""
    import pydantic

    from liger_perf.nightly import KernelJob

    line = _one_line_error(run_cli("optimize", "fused_add_rms_nrom"))
    assert "unknown kernel 'fused_add_rms_nrom': did you mean 'fused_add_rms_norm'?" in line, line
    assert "new fused_add_rms_nrom" not in line and line.index("did you mean") < line.index("liger-perf new")
    with pytest.raises(pydantic.ValidationError, match="did you mean 'relu_squared'"):
        KernelJob(name="relu_sqaured")  # nightly.yaml's kernels


def test_missing_variant_file(tmp_path):
    line = _one_line_error(run_cli("check", "relu_squared", "--variant", str(tmp_path / "nope.py")))
    assert "does not exist" in line


def test_syntax_error_in_variant(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def relu_squared(x:\n    return x\n")
    line = _one_line_error(run_cli("check", "relu_squared", "--variant", str(bad)))
    assert "syntax error at line 1" in line and "--trusted" not in line  # no flag makes it run


def test_variant_missing_interface(tmp_path):
    bad = tmp_path / "empty.py"
    bad.write_text("KNOBS = {}\nKNOB_CHOICES = {}\n")
    line = _one_line_error(run_cli("check", "relu_squared", "--variant", str(bad)))
    assert "does not define relu_squared" in line


def test_bad_device_mode():
    line = _one_line_error(run_cli("check", "relu_squared", "--device", "tpu"))
    assert "unknown device mode" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="only meaningful where no GPU is visible")
def test_cuda_mode_without_gpu_is_a_clear_error():
    line = _one_line_error(run_cli("check", "relu_squared", "--device", "cuda"))
    assert "no CUDA device" in line


def test_usage_error_is_reported_without_traceback():
    out = run_cli("check")  # the kernel argument is missing
    assert out.returncode == 2
    assert "Missing argument" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_usage_error_is_one_line_naming_the_option_its_value_and_the_help_to_read():
    """`optimize fused_add_rms_norm --budget -1` printed four lines, a usage line with `{kernel}` among them."""
    line = _one_line_error(run_cli("optimize", "fused_add_rms_norm", "--budget", "-1"))
    assert line.startswith("liger-perf: error: --budget -1: ") and "1" in line.split("--budget -1: ")[1]
    assert line.endswith(" optimize --help`)") and "(see `" in line and "Usage" not in line
    line = _one_line_error(run_cli("history", "relu_squared", "--sideways"))
    assert line.startswith("liger-perf: error: No such option: --sideways (see `") and line.endswith(" history --help`)")
    assert "No such command 'optimise'" in _one_line_error(run_cli("optimise", "relu_squared"))
    for args in (["--help"], ["optimize", "--help"], ["--version"]):  # still answered, on stdout, exit code 0
        out = run_cli(*args)
        assert out.returncode == 0 and not out.stderr and ("Usage" in out.stdout or "liger-perf 0" in out.stdout), args


def test_the_history_of_a_kernel_without_trials_is_one_line_saying_how_to_run_the_first(tmp_path):
    out = run_cli("history", "relu_squared", env={"LIGER_PERF_NOTEBOOKS": str(tmp_path)})
    assert out.returncode == 0 and not out.stderr, out.stderr
    assert out.stdout == ("no trials of relu_squared on interpret yet: `liger-perf optimize relu_squared` runs the "
                          "first\n")


@pytest.mark.slow
def test_trial_then_history_from_the_command_line(tmp_path):
    env = {"LIGER_PERF_NOTEBOOKS": str(tmp_path)}
    out = run_cli("trial", "relu_squared", "--repetitions", "2", "--passes", "forward", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0000-baseline.ipynb" in out.stdout and "status complete" in out.stdout
    assert "CPU timings" in out.stdout and "ncu: unavailable" in out.stdout
    out = run_cli("history", "relu_squared", "--format", "json", env=env)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {r["metric"] for r in rows} >= {"median_ms", "ratio", "peak_bytes"}
    assert {r["pass"] for r in rows if r["metric"] == "median_ms"} == {"forward"}
    out = run_cli("history", "relu_squared", env=env)
    assert "0000" in out.stdout and "baseline" in out.stdout and "relu_squared on interpret" in out.stdout


def test_trial_and_history_bad_input_is_one_line(tmp_path):
    env = {"LIGER_PERF_NOTEBOOKS": str(tmp_path)}
    assert "has the passes" in _one_line_error(run_cli("trial", "relu_squared", "--passes", "sideways", env=env))
    line = _one_line_error(run_cli("trial", "relu_squared", "--variant", str(tmp_path / "nope.py"), env=env))
    assert "does not exist" in line
    for command in ("trial", "check"):  # a folder is said to be one, not to be missing
        line = _one_line_error(run_cli(command, "relu_squared", "--variant", str(tmp_path), env=env))
        assert f"{tmp_path} is a folder, not a file" in line, line
    assert "use table, csv or json" in _one_line_error(run_cli("history", "relu_squared", "--format", "xml"))
    assert "unknown kernel" in _one_line_error(run_cli("history", "softmax"))
    assert not list(tmp_path.iterdir())  # bad input writes nothing


def _gate_fooling_variant(tmp_path):
    """A wrong kernel (every output 1.5 times too large) that tells the gate it passed: two lines at import make
    pandas' ``Series.all``, which the gate's verdict reads, say True. Run unchecked, `check` printed 24 FAIL rows,
    then PASS, and exited 0 (a review, 2026-12-05)."""
    from liger_perf.kernel.registry import baseline_path

    source = baseline_path("relu_squared").read_text()
    wrong = source.replace("(r * r).to(Y.dtype.element_ty)", "(1.5 * r * r).to(Y.dtype.element_ty)")
    assert wrong != source
    variant = tmp_path / "fools_the_gate.py"
    variant.write_text("import pandas as _pd\n_pd.Series.all = lambda self, *a, **k: True\n" + wrong)
    return variant


def test_a_variant_file_named_on_the_command_line_meets_the_static_check(tmp_path):
    """check, trial and bench refuse a file the static check of generated code refuses, in one line that says how
    to run a file of one's own anyway, before any process imports it: no trial number is taken."""
    variant = _gate_fooling_variant(tmp_path)
    env = {"LIGER_PERF_NOTEBOOKS": str(tmp_path / "nb"), "LIGER_PERF_REPORTS": str(tmp_path / "reports")}
    for command in (["check", "relu_squared", "--variant", str(variant), "--no-convergence"],
                    ["trial", "relu_squared", "--variant", str(variant), "--no-ncu"],
                    ["trial", "relu_squared", "--against", str(variant), "--no-ncu"],
                    ["bench", "relu_squared", "--variant", str(variant), "--repetitions", "2"]):
        line = _one_line_error(run_cli(*command, env=env))
        assert "fails the static check of generated code" in line and "pandas" in line, (command, line)
        assert "--trusted" in line, line
    assert not (tmp_path / "nb").exists() and not (tmp_path / "reports").exists()  # nothing ran, nothing written


def test_the_kernel_s_own_baseline_is_trusted_when_named_and_a_missing_best_is_said_to_be_the_best(tmp_path,
                                                                                                    monkeypatch):
    """`trial --against kernels/K/baseline.py` (device.sh's knob checks) named the kernel's own file, which a
    scaffolded kernel may write with imports the static check refuses; and a missing --against file was called a
    "variant file"."""
    from liger_perf import cli
    from liger_perf.core.errors import UserError
    from liger_perf.kernel.registry import baseline_path
    from liger_perf.propose import safety

    monkeypatch.setattr(safety, "check_generated_source", lambda source, spec: "refused (a stand-in)")
    cli._vet_variant("relu_squared", baseline_path("relu_squared"), trusted=False)
    copy = tmp_path / "copy.py"
    copy.write_text(baseline_path("relu_squared").read_text())
    with pytest.raises(UserError, match="fails the static check of generated code: refused"):
        cli._vet_variant("relu_squared", copy, trusted=False)
    cli._vet_variant("relu_squared", copy, trusted=True)
    line = _one_line_error(run_cli("trial", "relu_squared", "--against", str(tmp_path / "nope.py")))
    assert line.endswith(f"--against file {tmp_path / 'nope.py'} does not exist: give the path of a variant module "
                         "(.py)"), line


def test_more_local_workers_than_gpus_is_refused_before_a_cluster_starts(monkeypatch, tmp_path):
    """On a host with one GPU, --workers 2 would pin two workers to GPUs that are not there."""
    from types import SimpleNamespace

    from typer.testing import CliRunner

    from liger_perf import cli
    from liger_perf.kernel import device
    from liger_perf.core.errors import UserError
    from liger_perf.run import dask as dask_runner

    monkeypatch.setattr(device, "select_device", lambda mode: SimpleNamespace(mode="cuda"))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    started = []
    monkeypatch.setattr(dask_runner, "DaskRunner", lambda **settings: started.append(settings))
    monkeypatch.setenv("LIGER_PERF_NOTEBOOKS", str(tmp_path))
    result = CliRunner().invoke(cli.app, ["optimize", "relu_squared", "--workers", "2"])
    assert isinstance(result.exception, UserError) and not started
    assert "--workers 2: this host has 1 GPU, one per worker" in str(result.exception)
    assert not list(tmp_path.iterdir())  # no trial was started


def test_a_variant_that_exits_at_import_fails_the_check_and_never_passes_it(tmp_path):
    from broken_variants import ROOT as root

    variant = tmp_path / "quits.py"
    variant.write_text("import sys\nsys.exit(0)\n" + (root / "kernels" / "relu_squared" / "baseline.py").read_text())
    out = run_cli("check", "relu_squared", "--variant", str(variant), "--no-convergence", "--trusted")
    assert out.returncode == 2 and "called exit(0) at import" in out.stderr, out.stdout + out.stderr


def test_a_trial_while_a_loop_holds_the_kernel_is_refused_in_one_line(tmp_path):
    from liger_perf.record.store import Store

    with Store(tmp_path / "interpret").lock("optimize", "relu_squared"):
        out = run_cli("trial", "relu_squared", "--device", "interpret", env={"LIGER_PERF_NOTEBOOKS": str(tmp_path)})
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1 and "another optimize run (pid" in lines[0], out.stderr
    assert not list((tmp_path / "interpret" / "relu_squared").glob("*.ipynb"))


def test_a_bucket_that_is_no_dispatch_key_is_one_line(tmp_path):
    env = {"LIGER_PERF_NOTEBOOKS": str(tmp_path)}
    for bad in ("1536x2", "2048", "2048x3", "x2", "\u00b2x2", "02048x2", "2048x1", ""):
        line = _one_line_error(run_cli("optimize", "fused_add_rms_norm", "--buckets", f"1024x2,{bad}", env=env))
        assert f"--buckets '{bad}'" in line and "e.g. 2048x2" in line
    assert not list(tmp_path.iterdir())  # refused before a trial or a notebook
