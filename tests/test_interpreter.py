"""The interpreter speed-up: a helper called inside a kernel is not re-patched, with the same results."""

import importlib.util

import pytest
import torch

KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def _scaled(x, scale):
    return x * scale


@triton.jit
def _row_kernel(X, Y, n_cols, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=0.0)
    for _ in range(3):
        x = _scaled(x, scale)
    tl.store(Y + row * n_cols + cols, x, mask=mask)


@triton.jit
def _failing_kernel(X):
    tl.store(X + tl.arange(0, 4), _scaled(tl.load(X + tl.arange(0, 8)), 2.0))
'''


@pytest.fixture
def counted(tmp_path, monkeypatch, interpret_device):
    """The kernel module, and Triton's ``_patch_lang`` counting its calls (then wrapped by ``install``)."""
    from triton.runtime import interpreter

    from liger_perf.kernel.interpreter import install

    calls = []
    triton_patch = getattr(interpreter._patch_lang, "__wrapped__", interpreter._patch_lang)  # Triton's own

    def _patch_lang(fn):
        calls.append(fn.__name__)
        return triton_patch(fn)

    monkeypatch.setattr(interpreter, "_patch_lang", _patch_lang)
    path = tmp_path / "helper_kernel.py"
    path.write_text(KERNEL)
    spec = importlib.util.spec_from_file_location("helper_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, calls, install


def _run(module, x):
    y = torch.empty_like(x)
    module._row_kernel[(x.shape[0],)](x, y, x.shape[1], 0.5, BLOCK=64)
    return y


def test_helpers_inside_a_launch_are_patched_once_and_compute_the_same(counted):
    import triton.language as tl

    module, calls, install = counted
    x = torch.randn(5, 40)
    before = _run(module, x)
    assert calls.count("_scaled") == 5 * 3  # Triton's own: every helper call patches the language again
    calls.clear()
    load = tl.load
    assert install()
    after = _run(module, x)
    assert calls == ["_row_kernel"]  # the launch patches; its helpers do not
    assert torch.equal(before, after) and torch.allclose(after, x * 0.125)
    assert tl.load is load  # the launch restored the language


def test_a_failing_launch_leaves_the_language_restored_and_the_next_launch_patches_again(counted):
    import triton.language as tl
    from triton.runtime.interpreter import InterpreterError

    module, calls, install = counted
    assert install()
    load = tl.load
    with pytest.raises((InterpreterError, ValueError, AssertionError)):
        module._failing_kernel[(1,)](torch.zeros(4))
    assert tl.load is load
    calls.clear()
    _run(module, torch.randn(2, 8))
    assert calls == ["_row_kernel"]
