import os

# Triton decides at @triton.jit time whether to interpret; set it before anything imports a variant.
os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

from liger_perf.device import select_device  # noqa: E402


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
    """The kernels as the recorded H200 history ran them: each baseline.py is the source of its kernel's last
    recorded baseline trial (the files have been fixed since: a fix is a new baseline, and the history a replay
    test walks through was measured on the old one)."""
    import shutil

    import nbformat

    from liger_perf import record
    from liger_perf.registry import KERNELS_ENV, kernels_dir

    from broken_variants import ROOT

    kernels = tmp_path / "recorded-kernels"
    shutil.copytree(kernels_dir(), kernels, ignore=shutil.ignore_patterns("__pycache__"))
    for folder in kernels.iterdir():
        for notebook in sorted((ROOT / "notebooks" / folder.name).glob("*-baseline.ipynb"), reverse=True):
            result = record.read_result(nbformat.read(notebook, as_version=4))
            if not result.against and result.variant.source:
                (folder / "baseline.py").write_text(result.variant.source)
                break
    monkeypatch.setenv(KERNELS_ENV, str(kernels))
    return kernels
