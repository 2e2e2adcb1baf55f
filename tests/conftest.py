import os

# Triton decides at @triton.jit time whether to interpret; set it before anything imports a variant.
os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

from liger_perf.device import select_device  # noqa: E402


@pytest.fixture(scope="session")
def interpret_device():
    return select_device("interpret")
