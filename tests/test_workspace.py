"""The workspace: found from where liger-perf runs, made by ``init``, its kernels before the built-in ones, one
history per device class, and (from a wheel, outside this checkout) nothing written anywhere else."""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from liger_perf.core import workspace
from liger_perf.kernel.registry import baseline_path, get_spec, kernel_names, kernel_origin
from liger_perf.record.store import Store, reading_device

from broken_variants import ROOT

H200 = ROOT / "notebooks" / "nvidia-h200"


def _cli(*args, cwd, env=None):
    full = {k: v for k, v in os.environ.items() if not k.startswith("LIGER_PERF_")}
    full.update(PYTHONPATH=str(ROOT), TRITON_INTERPRET="1", **(env or {}))
    return subprocess.run([sys.executable, "-m", "liger_perf", *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=600)


def test_the_workspace_is_the_nearest_folder_upward_with_a_guardrails_file(tmp_path, monkeypatch):
    monkeypatch.delenv(workspace.WORKSPACE_ENV, raising=False)
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    assert workspace.find_workspace(deep).root == deep  # none above: the folder itself
    (tmp_path / "guardrails.yaml").write_text("target: forward\n")
    assert workspace.find_workspace(deep).root == tmp_path
    monkeypatch.setenv(workspace.WORKSPACE_ENV, str(deep))
    assert workspace.find_workspace(tmp_path).root == deep  # stated wins


def test_init_makes_a_workspace_and_a_second_init_keeps_what_is_there(tmp_path):
    out = _cli("init", str(tmp_path / "ws"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    ws = tmp_path / "ws"
    assert {p.name for p in ws.iterdir()} == {"kernels", "notebooks", "reports", "guardrails.yaml", "nightly.yaml",
                                             ".gitignore"}
    from liger_perf.judge.guardrails import load_guardrails
    from liger_perf.nightly import load_config

    assert load_guardrails(ws / "guardrails.yaml").target == "backward"  # the commented defaults load
    assert load_config(ws / "nightly.yaml").kernels
    (ws / "guardrails.yaml").write_text("target: forward\n")
    again = _cli("init", cwd=ws)
    assert again.returncode == 0 and "kept" in again.stdout
    assert (ws / "guardrails.yaml").read_text() == "target: forward\n"
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    left = ["notebooks/interpret/k/.optimize.lock", "notebooks/interpret/.nightly.lock",
            "notebooks/interpret/k/.0003-x.partial.ipynb", "notebooks/interpret/k/artifacts/0003-x/profile.ncu-rep",
            "reports/nightly-cron.log"]
    kept = ["notebooks/interpret/k/0003-x.ipynb", "notebooks/interpret/k/variants/0003-x.py",
            "reports/interpret/k/report.md"]
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *left, *kept], cwd=ws, capture_output=True,
                             text=True).stdout.split()
    assert ignored == left  # what a run leaves that is not history is ignored, the history is not


def test_a_workspace_that_does_not_exist_is_a_typo_but_init_makes_it(tmp_path):
    out = _cli("--workspace", "typo", "report", "relu_squared", cwd=tmp_path)
    assert out.returncode == 2 and "does not exist" in out.stderr and "liger-perf init" in out.stderr
    assert not (tmp_path / "typo").exists()
    assert _cli("--workspace", "made", "init", cwd=tmp_path).returncode == 0 and (tmp_path / "made").is_dir()


@pytest.mark.slow
def test_relative_workspace_and_kernels_paths_reach_the_contained_child(tmp_path):
    """check runs the gate in a child process in a scratch folder (inside the sandbox where there is one): the
    paths it is handed must not depend on the caller's folder."""
    builtin = workspace.builtin_kernels() / "relu_squared"
    ws, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    _cli("init", str(ws), cwd=tmp_path)
    elsewhere.mkdir()
    mine = ws / "kernels" / "relu_mine"
    shutil.copytree(builtin, mine, ignore=shutil.ignore_patterns("__pycache__"))
    (mine / "spec.py").write_text((mine / "spec.py").read_text().replace('name = "relu_squared"', 'name = "relu_mine"'))
    out = _cli("-w", "../ws", "check", "relu_mine", "--no-convergence", cwd=elsewhere)
    assert out.returncode == 0 and "PASS" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    extra = elsewhere / "more" / "relu_extra"
    shutil.copytree(mine, extra)
    (extra / "spec.py").write_text((extra / "spec.py").read_text().replace('"relu_mine"', '"relu_extra"'))
    out = _cli("-w", "../ws", "check", "relu_extra", "--no-convergence", cwd=elsewhere,
               env={"LIGER_PERF_KERNELS": "more"})
    assert out.returncode == 0 and "PASS" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]


def test_one_broken_workspace_spec_does_not_hide_the_other_kernels(tmp_path):
    (tmp_path / "guardrails.yaml").write_text("")
    (tmp_path / "kernels" / "broken").mkdir(parents=True)
    (tmp_path / "kernels" / "broken" / "spec.py").write_text("import not_a_module\n")
    (tmp_path / "kernels" / "broken" / "baseline.py").write_text("")
    out = _cli("kernels", cwd=tmp_path)
    assert out.returncode == 0 and "relu_squared" in out.stdout and "cannot be loaded" in out.stdout


def test_a_workspace_kernel_wins_over_the_built_in_one_and_the_environment_adds_kernels(tmp_path, monkeypatch):
    monkeypatch.setenv(workspace.WORKSPACE_ENV, str(tmp_path))
    monkeypatch.delenv("LIGER_PERF_KERNELS", raising=False)
    builtin = workspace.builtin_kernels() / "relu_squared"
    shutil.copytree(builtin, tmp_path / "kernels" / "relu_squared", ignore=shutil.ignore_patterns("__pycache__"))
    assert baseline_path("relu_squared") == tmp_path / "kernels" / "relu_squared" / "baseline.py"
    assert kernel_origin("relu_squared") == "workspace" and kernel_origin("fused_add_rms_norm") == "built-in"
    extra = tmp_path / "more"
    shutil.copytree(builtin, extra / "relu_cubed", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("LIGER_PERF_KERNELS", str(extra))
    names = kernel_names()
    assert {"relu_cubed", "relu_squared", "fused_add_rms_norm"} <= set(names)  # added to, not replaced
    assert kernel_origin("relu_cubed") == "LIGER_PERF_KERNELS"
    assert get_spec("relu_cubed").name == "relu_squared"  # the copied spec, loaded from its own folder


def test_long_names_wrap_at_hyphens_and_underscores_within_100_columns():
    from rich.console import Console

    from liger_perf.cli import history_table
    from made_trials import make_trial

    names = ["bwd_column_chunked_per_row_block_size_16384", "bwd-column-chunked-per-row-block-size-16384", "a-a"]
    trials = [make_trial(trial_id=i, name=n, hypothesis="word " * 40) for i, n in enumerate(names)]
    console = Console(width=160, record=True)
    console.print(history_table("k", "interpret", trials))
    lines = console.export_text().splitlines()
    assert max(map(len, lines)) <= 100
    cells = [line.split("│")[2].strip() for line in lines if line.count("│") > 3]
    assert "bwd_column_chunked_per_" in cells and "row_block_size_16384" in cells
    assert "bwd-column-chunked-per-" in cells and "row-block-size-16384" in cells and "a-a" in cells


def test_of_several_gpu_histories_the_latest_trial_decides(tmp_path, monkeypatch):
    import json

    ws = _workspace_with_h200_history(tmp_path)
    other = ws / "notebooks" / "nvidia-a100" / "relu_squared"
    other.mkdir(parents=True)
    for name, when in (("0000-baseline.ipynb", "2020-01-01T00:00:00"), ):
        nb = json.loads((H200 / "relu_squared" / name).read_text())
        nb["metadata"]["papermill"]["end_time"] = when
        (other / name).write_text(json.dumps(nb))
    os.utime(other / "0000-baseline.ipynb")  # written last, but ended first: the file time must not decide
    monkeypatch.setenv(workspace.WORKSPACE_ENV, str(ws))
    warnings = []
    assert reading_device("relu_squared", warn=warnings.append) == "nvidia-h200"
    assert "nvidia-h200, nvidia-a100" in warnings[0]
    assert reading_device("relu_squared", "nvidia-a100") == "nvidia-a100"


def _workspace_with_h200_history(tmp_path, kernel="relu_squared"):
    ws = tmp_path / "ws"
    shutil.copytree(H200 / kernel, ws / "notebooks" / "nvidia-h200" / kernel,
                    ignore=shutil.ignore_patterns("artifacts", ".*"))
    (ws / "guardrails.yaml").write_text("target: forward\n")
    return ws


def test_a_cpu_machine_reads_the_recorded_gpu_history_by_default(tmp_path, monkeypatch):
    ws = _workspace_with_h200_history(tmp_path)
    monkeypatch.setenv(workspace.WORKSPACE_ENV, str(ws))
    assert reading_device("relu_squared") == "nvidia-h200"
    assert reading_device("relu_squared", "cuda") == "nvidia-h200"
    assert reading_device("relu_squared", "interpret") == "interpret"
    from liger_perf.core.errors import UserError

    with pytest.raises(UserError, match="recorded: nvidia-h200"):
        reading_device("relu_squared", "nvidia-a100")
    warnings = []
    reading_device("relu_squared", warn=warnings.append)
    assert warnings == []  # no trials of this machine's own: nothing to point to
    shutil.copytree(H200 / "relu_squared", ws / "notebooks" / "interpret" / "relu_squared",
                    ignore=shutil.ignore_patterns("artifacts", ".*", "0001*", "0002*", "0003*", "0004*", "0005*"))
    assert reading_device("relu_squared", warn=warnings.append) == "nvidia-h200"
    # After `trial relu_squared` on a CPU, `history relu_squared` read the H200's and said nothing of the new trial.
    assert len(warnings) == 1 and "--device interpret" in warnings[0] and "nvidia-h200" in warnings[0], warnings
    out = _cli("history", "relu_squared", cwd=ws)
    assert out.returncode == 0, out.stderr
    assert "relu_squared on nvidia-h200" in out.stdout and "0005" in out.stdout
    assert max(len(line) for line in out.stdout.splitlines()) <= 100
    names = {line.split("│")[2].strip() for line in out.stdout.splitlines() if line.count("│") > 3}
    assert "bwd-block-size-4096" in names  # whole, never cut mid-word
    report = _cli("report", "relu_squared", cwd=ws)
    assert report.returncode == 0, report.stderr
    text = (ws / "reports" / "nvidia-h200" / "relu_squared" / "report.md").read_text()
    assert "NVIDIA H200" in text and "forward speedup" in text
    assert "speedup vs torch.compile" in text  # the peers, from the baseline trial of an earlier baseline.py
    assert str(tmp_path) not in text  # no path of this machine in what is committed


def test_an_interpreter_trial_never_joins_or_numbers_against_the_gpu_history(tmp_path):
    ws = _workspace_with_h200_history(tmp_path)
    gpu = ws / "notebooks" / "nvidia-h200" / "relu_squared"
    before = sorted(p.name for p in gpu.iterdir())
    out = _cli("trial", "relu_squared", "--repetitions", "2", "--passes", "forward", "--no-ncu", cwd=ws)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(p.name for p in gpu.iterdir()) == before
    (trial,) = (ws / "notebooks" / "interpret" / "relu_squared").glob("*.ipynb")
    assert trial.name.startswith("0000-")  # its own numbering, from 0
    assert Store(ws / "notebooks" / "interpret").trial_notebooks("relu_squared") == [trial]
    history = _cli("history", "relu_squared", "--device", "interpret", cwd=ws)
    assert "relu_squared on interpret" in history.stdout and "0005" not in history.stdout


def test_help_and_version_read_well():
    out = _cli("--version", cwd=ROOT)
    assert out.returncode == 0 and out.stdout.startswith("liger-perf ")
    for command in ("optimize", "trial", "check", "history"):
        text = _cli(command, "--help", cwd=ROOT).stdout
        assert "--device" in text and "<bool>" not in text, text


@pytest.mark.slow
def test_from_a_wheel_in_an_empty_folder_init_new_check_optimize_write_only_there(tmp_path):
    """The new user's path: the wheel installed (not editable) into a fresh venv; in a folder outside this
    checkout, a workspace, a kernel of their own from a PyTorch function, its gate and a one-trial loop."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "liger_perf", "kernels"):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, source / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                            if (ROOT / name).is_dir() else {}))
    dist = tmp_path / "dist"
    isolation = [] if _importable("setuptools") else None
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(source),
                            *(["--no-build-isolation"] if isolation is not None else [])],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("liger_perf-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # The dependencies from this environment (torch is gigabytes), liger-perf itself only from the wheel: a .pth
    # names the folder but runs none of its .pth files, so this checkout's editable install is not seen.
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                                "-q", str(wheel)], capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "myops.py").write_text("import torch\n\n\ndef scaled_tanh(x):\n    return 2.0 * torch.tanh(x)\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "TMPDIR": str(home), "TRITON_INTERPRET": "1",
           "TRITON_CACHE_DIR": str(home / "triton")}
    before = _snapshot(ROOT, venv)

    def run(*args):
        done = subprocess.run([str(venv / "bin" / "liger-perf"), *args], cwd=work, env=env, capture_output=True,
                              text=True, timeout=1200)
        # A message string, not a tuple: pytest prints a string whole, a tuple's repr cut in the middle.
        assert done.returncode == 0, f"{args}: exit code {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    where = subprocess.run([python, "-c", "import liger_perf; print(liger_perf.__file__)"], env=env, cwd=work,
                           capture_output=True, text=True).stdout
    assert where.startswith(str(site)), where
    run("init")
    run("new", "scaled_tanh", "--reference", "myops:scaled_tanh")
    listed = run("kernels")
    assert "scaled_tanh" in listed and "workspace" in listed and "built-in" in listed
    run("check", "scaled_tanh", "--no-convergence")
    out = run("optimize", "scaled_tanh", "--budget", "1", "--repetitions", "2", "--no-convergence",
              "--target", "forward")
    assert "interpreter" in out
    assert list((work / "notebooks" / "interpret" / "scaled_tanh").glob("0000-*.ipynb"))
    assert (work / "reports" / "interpret" / "scaled_tanh" / "report.md").is_file()
    assert _snapshot(ROOT, venv) == before  # neither this checkout nor the installed package was written
    # Outside the workspace only the caches of Triton and PyTorch, in the home folder the test gave them.
    caches = {"triton", ".triton", ".cache", ".config"} | {p.name for p in home.iterdir()
                                                          if p.name.startswith(("torchinductor_", "tmp"))}
    assert {p.name for p in home.iterdir()} <= caches
    assert not (home / ".config").exists() or {p.name for p in (home / ".config").iterdir()} <= {"matplotlib"}


def _importable(name: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True).returncode == 0


def _snapshot(checkout: Path, venv: Path) -> tuple:
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=checkout,
                            capture_output=True, text=True).stdout
    files = sorted(str(p.relative_to(venv)) for p in venv.rglob("*")
                   if "__pycache__" not in p.parts and not p.name.endswith(".pyc"))
    return status, files
