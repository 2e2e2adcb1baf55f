import os

# Triton decides at @triton.jit time whether to interpret; set it before anything imports a variant.
os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

from liger_perf.kernel.device import select_device  # noqa: E402


@pytest.fixture(scope="session")
def interpret_device():
    return select_device("interpret")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes 15 s or more on 2 cores; scheduled first")


def pytest_collection_modifyitems(config, items):
    # The long tests first, so that with several workers (pytest -n) none of them starts last and runs alone.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def recorded_baselines(tmp_path, monkeypatch):
    """The kernels as the recorded H200 history's loop ran them: each baseline.py is the source of the baseline
    trial that most of its kernel's trials were measured against (the files have been fixed since: a fix is a new
    baseline, and the history a replay test walks through was measured on the old one)."""
    import shutil

    from liger_perf.record.history import load_trials
    from liger_perf.kernel.registry import KERNELS_ENV
    from liger_perf.core.workspace import builtin_kernels

    from broken_variants import ROOT

    kernels = tmp_path / "recorded-kernels"
    shutil.copytree(builtin_kernels(), kernels, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    for folder in kernels.iterdir():
        trials = load_trials(folder.name, ROOT / "notebooks" / "nvidia-h200")
        baselines = [t for t in trials if not t.against and t.status == "complete" and t.variant.source]
        if baselines:
            used = max(baselines, key=lambda b: sum(t.against_sha == b.variant_sha for t in trials))
            (folder / "baseline.py").write_text(used.variant.source)
    monkeypatch.setenv(KERNELS_ENV, str(kernels))
    return kernels
