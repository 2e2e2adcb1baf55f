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


CONFINED = '''
import triton
import triton.language as tl


@triton.jit
def _copy_at(SRC, DST, offset, n, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    tl.store(DST + cols, tl.load(SRC + offset + cols, mask=mask, other=0), mask=mask)


@triton.jit
def _add_at(DST, offset, value):
    tl.atomic_add(DST + offset, value)


def function_to_find(x=0):
    return x
'''


@pytest.fixture
def confined(tmp_path, interpret_device):
    from liger_perf.kernel.interpreter import confine_memory

    assert confine_memory()  # interpret_device installed it already: a second call keeps the one in place
    path = tmp_path / "confined_kernel.py"
    path.write_text(CONFINED)
    spec = importlib.util.spec_from_file_location("confined_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_kernel_reads_and_writes_its_own_tensors_views_and_masked_lanes_included(confined):
    big = torch.arange(64, dtype=torch.int64)
    view = big[8:40]  # a view: its storage is the whole of big, which the kernel may read
    out = torch.zeros(16, dtype=torch.int64)
    confined._copy_at[(1,)](view, out, -8, 16, BLOCK=32)  # lanes 16-31 masked: their addresses are never checked
    assert torch.equal(out, big[:16])
    confined._add_at[(1,)](out, 3, 5)
    assert int(out[3]) == 8


def test_a_kernel_that_reaches_past_its_tensors_into_the_process_is_stopped(confined):
    """The route of the review of 2026-12-06: a function's address from its repr, then a load there (and a store
    would follow). Under confinement the kernel fails instead."""
    from triton.runtime.interpreter import InterpreterError

    source = torch.zeros(4, dtype=torch.int64)
    out = torch.zeros(4, dtype=torch.int64)
    address = int(repr(confined.function_to_find).split(" at ")[1].rstrip(">"), 16)
    with pytest.raises(InterpreterError, match="outside every tensor it was launched with"):
        confined._copy_at[(1,)](source, out, (address - source.data_ptr()) // 8, 1, BLOCK=4)
    with pytest.raises(InterpreterError, match="outside every tensor"):
        confined._copy_at[(1,)](source, out, 4, 1, BLOCK=4)  # one element past the storage's end
    with pytest.raises(InterpreterError, match="outside every tensor"):
        confined._add_at[(1,)](out, -1, 1)  # an atomic one element before it
    assert torch.equal(out, torch.zeros(4, dtype=torch.int64))


def test_the_address_check_itself():
    from liger_perf.kernel.interpreter import MemoryOutsideLaunch, check_addresses

    ranges = [(1000, 1016), (2000, 2008)]
    check_addresses([1000, 1008, 2000], None, 8, ranges)
    check_addresses([1012, 5000], [True, False], 4, ranges)  # the masked lane is not checked
    for addresses, width in (([1012], 8), ([1016], 1), ([999], 1), ([2004], 8)):
        with pytest.raises(MemoryOutsideLaunch):
            check_addresses(addresses, None, width, ranges)
    with pytest.raises(MemoryOutsideLaunch, match="outside any kernel launch"):
        check_addresses([1000], None, 8, None)
    check_addresses([5000], [False], 8, None)  # nothing accessed
