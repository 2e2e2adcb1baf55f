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
