"""Secrets never reach a variant: every process that imports one starts with an allow-listed environment in a
scratch folder of its own (the trial's notebook kernel, check's process, bench's child)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from liger_perf.isolation.contained import reduced_environment, variant_environment
from liger_perf.kernel.registry import baseline_path
from liger_perf.run import run_trial

from broken_variants import ROOT

SECRETS = {"OPENAI_API_KEY": "sk-never-seen", "AWS_SECRET_ACCESS_KEY": "aws-never-seen",
           "GITHUB_TOKEN": "ghp-never-seen", "DB_PASSWORD": "pw-never-seen", "HF_AUTH": "hf-never-seen",
           "SOME_OTHER_SETTING": "other-never-seen"}


def _spy(out: Path) -> str:
    """The relu_squared baseline, plus a line at import that writes what the process sees to ``out``."""
    return (f"import json as _json, os as _os\n"
            f"_json.dump({{'env': dict(_os.environ), 'cwd': _os.getcwd()}}, open({str(out)!r}, 'w'))\n"
            + baseline_path("relu_squared").read_text())


def _assert_no_secret(seen: dict) -> None:
    text = json.dumps(seen)
    assert not [value for value in SECRETS.values() if value in text], seen["env"]
    assert set(seen["env"]) & set(SECRETS) == set()


def test_the_environment_keeps_what_runs_a_kernel_and_nothing_that_looks_like_a_credential(tmp_path):
    base = {**SECRETS, "PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "1", "TRITON_INTERPRET": "1",
            "LC_ALL": "C.UTF-8", "HOME": "/home/someone", "PYTHONPATH": "/opt/site", "CUDA_API_KEY": "x"}
    env = variant_environment(tmp_path, base)
    assert {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "1", "TRITON_INTERPRET": "1", "LC_ALL": "C.UTF-8"}.items() \
        <= env.items()
    assert env["HOME"] == env["TMPDIR"] == str(tmp_path.resolve())
    assert env["TRITON_CACHE_DIR"] == "/home/someone/.triton/cache"  # the warm cache, not a cold one per trial
    assert env["PYTHONPATH"].split(os.pathsep) == ["/opt/site", str(ROOT)]
    assert not set(env) & {*SECRETS, "CUDA_API_KEY"}


def test_the_reduced_environment_is_restored_after_the_block_even_on_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-kept")
    with pytest.raises(RuntimeError):
        with reduced_environment(tmp_path / "scratch"):
            assert "OPENAI_API_KEY" not in os.environ and os.environ["HOME"] == str((tmp_path / "scratch").resolve())
            raise RuntimeError("boom")
    assert os.environ["OPENAI_API_KEY"] == "sk-kept"


@pytest.mark.slow
def test_a_trial_s_variant_sees_no_secret_and_runs_in_the_trial_s_own_folder(tmp_path, monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    variant = tmp_path / "spy.py"
    variant.write_text(_spy(Path("seen.json")))  # in its working folder: in a sandbox, the one it may write
    run = run_trial("relu_squared", variant, root=tmp_path / "nb", device="interpret", repetitions=2,
                    convergence=False, ncu=False, peers=False)
    assert run.result.status == "complete", run.result.reason
    scratch = tmp_path / "nb" / "relu_squared" / "artifacts" / "0000-spy"
    seen = json.loads((scratch / "seen.json").read_text())
    _assert_no_secret(seen)
    assert Path(seen["cwd"]) == scratch.resolve()
    assert os.environ["OPENAI_API_KEY"] == SECRETS["OPENAI_API_KEY"]  # the caller keeps its own


def _cli(*args, env_extra=None):
    env = {**os.environ, **SECRETS, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "liger_perf", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)


def _telling_spy() -> str:
    """The baseline, refusing to import with what it saw: its error is the one line check and bench print (a
    sandboxed process writes nowhere the test could read)."""
    return ("import os as _os\n_v = dict(_os.environ)\n"
            "raise RuntimeError('saw ' + str(len(_v)) + ' variables; secrets: '"
            " + str([k for k, x in _v.items() if 'never-seen' in x]) + '; cwd ' + _os.getcwd())\n"
            + baseline_path("relu_squared").read_text())


@pytest.mark.slow
def test_check_imports_the_variant_in_a_process_without_secrets(tmp_path):
    variant = tmp_path / "spy.py"
    variant.write_text(_telling_spy())
    out = _cli("check", "relu_squared", "--variant", str(variant), "--no-convergence", "--trusted")
    assert out.returncode == 2 and "secrets: []; cwd " in out.stderr, out.stdout + out.stderr
    assert "never-seen" not in out.stdout + out.stderr and str(ROOT) not in out.stderr.split("; cwd ")[-1]


@pytest.mark.slow
def test_a_variant_that_ends_its_process_at_import_fails_check(tmp_path):
    variant = tmp_path / "quits.py"
    variant.write_text("import os\nos._exit(0)\n" + baseline_path("relu_squared").read_text())
    out = _cli("check", "relu_squared", "--variant", str(variant), "--no-convergence", "--trusted")
    assert out.returncode == 1 and "the gate did not finish" in out.stderr, out.stdout + out.stderr


@pytest.mark.slow
def test_bench_imports_the_variant_in_a_child_without_secrets(tmp_path):
    variant = tmp_path / "spy.py"
    variant.write_text(_telling_spy())
    out = _cli("bench", "relu_squared", "--variant", str(variant), "--device", "interpret", "--repetitions", "2",
               "--trusted",
               env_extra={"LIGER_PERF_REPORTS": str(tmp_path / "reports")})
    assert out.returncode == 2 and "secrets: []; cwd " in out.stderr, out.stdout + out.stderr
    assert "never-seen" not in out.stdout + out.stderr


HARNESS_PATCHES = {
    "a timer": "import time\ntime.perf_counter = lambda: 0.0\n",
    "CUDA events": "import torch\ntorch.cuda.Event.elapsed_time = lambda self, other: 0.001\n",
    "a tensor method": "import torch\ntorch.Tensor.__sub__ = lambda a, b: a * 0\n",
    "the comparison": "import torch\ntorch.allclose = lambda *a, **k: True\n",
    "the gate": "import liger_perf.gate.correctness as c\nc.check_case = lambda *a, **k: []\n",
    "the timing code": "import liger_perf.measure.timing as t\nt.summarize = lambda *a, **k: None\n",
    "a builtin": "import builtins\nbuiltins.max = min\n",
    "a new attribute": "import triton\ntriton.cheat = True\n",
    "a patch by a decorator": ("import torch\ndef _d(f):\n    torch.isfinite = lambda x: torch.ones_like(x, "
                               "dtype=torch.bool)\n    return f\n@_d\ndef _g():\n    pass\n"),
}


@pytest.mark.parametrize("what", sorted(HARNESS_PATCHES))
def test_a_variant_that_patches_what_measures_it_at_import_is_rejected(tmp_path, interpret_device, what):
    import time

    import torch

    from liger_perf.core.errors import UserError
    from liger_perf.kernel.registry import get_spec
    from liger_perf.kernel.variants import load_variant

    variant = tmp_path / "patcher.py"
    variant.write_text(HARNESS_PATCHES[what] + baseline_path("relu_squared").read_text())
    saved = {"perf_counter": time.perf_counter, "sub": torch.Tensor.__sub__, "allclose": torch.allclose,
             "elapsed": torch.cuda.Event.elapsed_time, "isfinite": torch.isfinite}
    import builtins

    import liger_perf.gate.correctness as correctness
    import liger_perf.measure.timing as timing
    import triton

    kept = (builtins.max, correctness.check_case, timing.summarize)
    try:
        with pytest.raises(UserError, match="at import: a variant may not touch torch"):
            load_variant(variant, get_spec("relu_squared"))
    finally:  # undo what the variant did to this test process
        time.perf_counter, torch.Tensor.__sub__, torch.allclose = saved["perf_counter"], saved["sub"], saved["allclose"]
        torch.cuda.Event.elapsed_time, torch.isfinite = saved["elapsed"], saved["isfinite"]
        builtins.max, correctness.check_case, timing.summarize = kept
        triton.__dict__.pop("cheat", None)


def test_every_committed_variant_loads_without_touching_the_harness(interpret_device):
    from liger_perf.kernel.registry import get_spec
    from liger_perf.kernel.variants import load_variant

    for kernel in ("relu_squared", "fused_add_rms_norm"):
        for path in [baseline_path(kernel), *sorted((ROOT / "notebooks" / "nvidia-h200" / kernel / "variants").glob("*.py"))]:
            load_variant(path, get_spec(kernel))


def test_the_measuring_modules_are_watched_even_before_a_trial_imports_them():
    code = ("import sys\nfrom liger_perf.kernel.variants import MEASURING, harness_snapshot\n"
            "assert 'liger_perf.measure.timing' not in sys.modules\n"
            "spaces = {space for space, _ in harness_snapshot()}\n"
            "assert set(MEASURING) <= spaces and {'torch', 'torch.Tensor', 'time', 'builtins'} <= spaces, spaces\n")
    out = subprocess.run([sys.executable, "-c", "import torch, triton\n" + code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.returncode == 0, out.stderr


from hostile_modules import HOSTILE, hostile_source  # noqa: E402


def test_there_are_at_least_fifty_hostile_modules_over_every_route():
    assert len(HOSTILE) >= 50


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_every_hostile_module_is_rejected_by_the_static_check(name):
    from liger_perf.propose.safety import check_generated_source
    from liger_perf.kernel.registry import get_spec

    reason = check_generated_source(hostile_source(name), get_spec("relu_squared"))
    assert reason.startswith("line "), (name, reason)


def test_every_committed_variant_passes_the_static_check():
    from liger_perf.propose.safety import check_generated_source
    from liger_perf.kernel.registry import get_spec

    for kernel in ("relu_squared", "fused_add_rms_norm"):
        for path in [baseline_path(kernel), *sorted((ROOT / "notebooks" / "nvidia-h200" / kernel / "variants").glob("*.py"))]:
            assert check_generated_source(path.read_text(), get_spec(kernel)) == "", path


def test_the_language_s_surface_is_what_kernels_are_written_in(monkeypatch):
    """A public host-side helper of triton.language (tl.str_to_ty ran its argument through eval) or another
    module's function re-exported there (tl.math.wraps) is never on the surface; builtins, the standard library,
    dtypes and classes are."""
    import functools

    import triton.language as tl

    from liger_perf.propose import safety

    monkeypatch.setattr(tl, "liger_perf_helper", lambda text: text, raising=False)
    monkeypatch.setattr(tl, "liger_perf_reexport", functools.partial, raising=False)
    safety.surface.cache_clear()
    try:
        names = safety.surface()
    finally:
        safety.surface.cache_clear()
    assert "triton.language.liger_perf_helper" not in names and "triton.language.liger_perf_reexport" not in names
    assert {"triton.language.load", "triton.language.sum", "triton.language.float32", "triton.language.constexpr",
            "triton.language.math.rsqrt"} <= names


def test_the_watch_while_a_variant_runs_tells_its_patches_from_torch_s_own_lazy_changes(monkeypatch):
    """The gate compares the harness before and after each case: torch's own lazy changes are not the variant's
    (torch._dynamo, imported on first use, rebinds `torch.manual_seed` to a wrapper of itself; data such as
    `torch.cuda.default_generators` is rebound when CUDA starts), a function rebound to something else is, and so
    is a method set on a watched class (it shadows what `torch.Tensor` inherits), where a new name on a module is
    not. The import-time check, stricter, counts every one of them."""
    import functools

    import torch

    from liger_perf.kernel.variants import changed_harness, harness_snapshot

    def changes(patch):
        before, strict = harness_snapshot(while_running=True), harness_snapshot()
        with monkeypatch.context() as m:
            patch(m)
            return (changed_harness(before, harness_snapshot(while_running=True), while_running=True),
                    changed_harness(strict, harness_snapshot()))

    seed = torch.manual_seed
    assert changes(lambda m: m.setattr(torch, "manual_seed", functools.wraps(seed)(lambda s: seed(s)))) == (
        [], ["torch.manual_seed"])
    assert changes(lambda m: m.setattr(torch.cuda, "default_generators", (None,))) == (
        [], ["torch.cuda.default_generators"])
    assert changes(lambda m: m.setattr(torch, "manual_seed", lambda s: None))[0] == ["torch.manual_seed"]
    assert changes(lambda m: m.setattr(torch.Tensor, "numel", lambda self: 0, raising=False))[0] == [
        "torch.Tensor.numel"]
    assert changes(lambda m: m.setattr(torch, "liger_perf_probe", len, raising=False)) == (
        [], ["torch.liger_perf_probe"])
    # The gate's verdict is read from a pandas DataFrame: a method set there is a patch of the harness too.
    import pandas

    assert changes(lambda m: m.setattr(pandas.DataFrame, "any", lambda self, *a, **k: False))[0] == [
        "pandas.DataFrame.any"]
    assert changes(lambda m: m.setattr(pandas.Series, "all", lambda self, *a, **k: True))[0] == [
        "pandas.Series.all"]
    # A function's code swapped in place keeps the object: still a change, in both snapshots.
    from liger_perf.gate import correctness

    running, strict = changes(lambda m: m.setattr(correctness.compare, "__code__", (lambda *a, **k: None).__code__))
    assert "liger_perf.gate.correctness.compare" in running and "liger_perf.gate.correctness.compare" in strict
