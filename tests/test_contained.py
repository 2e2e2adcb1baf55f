"""Secrets never reach a variant: every process that imports one starts with an allow-listed environment in a
scratch folder of its own (the trial's notebook kernel, check's process, bench's child)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from liger_perf.contained import reduced_environment, variant_environment
from liger_perf.registry import baseline_path
from liger_perf.runners import run_trial

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


def test_a_trial_s_variant_sees_no_secret_and_runs_in_the_trial_s_own_folder(tmp_path, monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    seen_file = tmp_path / "seen.json"
    variant = tmp_path / "spy.py"
    variant.write_text(_spy(seen_file))
    run = run_trial("relu_squared", variant, root=tmp_path / "nb", device="interpret", repetitions=2,
                    convergence=False, ncu=False, peers=False)
    assert run.result.status == "complete", run.result.reason
    seen = json.loads(seen_file.read_text())
    _assert_no_secret(seen)
    assert Path(seen["cwd"]) == (tmp_path / "nb" / "relu_squared" / "artifacts" / "0000-spy").resolve()
    assert os.environ["OPENAI_API_KEY"] == SECRETS["OPENAI_API_KEY"]  # the caller keeps its own


def _cli(*args, env_extra=None):
    env = {**os.environ, **SECRETS, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "liger_perf", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)


def test_check_imports_the_variant_in_a_process_without_secrets(tmp_path):
    seen_file = tmp_path / "seen.json"
    variant = tmp_path / "spy.py"
    variant.write_text(_spy(seen_file))
    out = _cli("check", "relu_squared", "--variant", str(variant), "--no-convergence")
    assert out.returncode == 0, out.stdout + out.stderr
    _assert_no_secret(json.loads(seen_file.read_text()))


def test_a_variant_that_ends_its_process_at_import_fails_check(tmp_path):
    variant = tmp_path / "quits.py"
    variant.write_text("import os\nos._exit(0)\n" + baseline_path("relu_squared").read_text())
    out = _cli("check", "relu_squared", "--variant", str(variant), "--no-convergence")
    assert out.returncode == 1 and "the gate did not finish" in out.stderr, out.stdout + out.stderr


def test_bench_imports_the_variant_in_a_child_without_secrets(tmp_path):
    seen_file = tmp_path / "seen.json"
    variant = tmp_path / "spy.py"
    variant.write_text(_spy(seen_file))
    out = _cli("bench", "relu_squared", "--variant", str(variant), "--device", "interpret", "--repetitions", "2",
               env_extra={"LIGER_PERF_REPORTS": str(tmp_path / "reports")})
    assert out.returncode == 0, out.stdout + out.stderr
    _assert_no_secret(json.loads(seen_file.read_text()))
