"""Triton's interpreter as liger-perf runs it: faster for kernels that call ``@triton.jit`` helpers (the language is
patched once per launch, ``install``), and confined to each launch's tensors (``confine_memory``).

Triton's interpreter (3.x) swaps ``triton.language`` for its NumPy implementation when a kernel is launched
(``_patch_lang`` in ``triton/runtime/interpreter.py``) and restores it when the launch ends. It also calls
``_patch_lang`` on every call of a ``@triton.jit`` helper from inside the kernel, and each of those walks every
member of ``triton.language`` again although the launch has patched them already; what that second patch sets
is never restored by it and is overwritten by the launch's own restore, so it changes nothing. For a kernel
whose row loop calls helpers (the fused backward calls several per row), those walks were 38 % of an
interpreted correctness-gate case (cProfile: 40 s of 104 s at 1021 rows).

``install()`` wraps ``_patch_lang`` so that a helper called inside a launch, whose language modules the launch
has patched, is not patched again. Anything else (a launch, a helper that sees another module) goes through
Triton's own function. Only the interpreter is touched, only when liger-perf runs in interpreter mode, and
nothing is done when Triton's internals are not the ones this was written against.
"""

from __future__ import annotations

import inspect
import threading

_state = threading.local()  # the language modules each launch under way has patched (a stack: launches nest)


class _Unpatched:
    """The scope of a patch that was not needed: nothing to restore."""

    def restore(self) -> None:
        pass


def install() -> bool:
    """Make nested helper calls skip the redundant patch; True when it is in place."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return False
    original = getattr(interpreter, "_patch_lang", None)
    if original is None or getattr(original, "_liger_perf_once", False):
        return original is not None
    try:  # the internals this relies on: a scope with restore(), and the rule for which modules are patched
        if list(inspect.signature(original).parameters) != ["fn"] or not hasattr(interpreter, "GridExecutor"):
            return False
    except (TypeError, ValueError):
        return False

    def languages(fn) -> frozenset[int]:
        return frozenset(id(v) for v in getattr(fn, "__globals__", {}).values()
                         if inspect.ismodule(v) and v in (tl, tl.core))

    def patch_lang_once(fn):
        stack = getattr(_state, "stack", None)
        if stack is None:
            stack = _state.stack = []
        wanted = languages(fn)
        if stack and wanted and wanted <= stack[-1]:
            return _Unpatched()
        scope = original(fn)
        depth = len(stack)
        stack.append(wanted | (stack[-1] if stack else frozenset()))
        restore = scope.restore

        def restore_and_pop() -> None:
            try:
                restore()
            finally:  # also drops what helpers patched inside this launch (Triton never restores those)
                del stack[depth:]

        scope.restore = restore_and_pop
        return scope

    patch_lang_once._liger_perf_once = True
    patch_lang_once.__wrapped__ = original
    interpreter._patch_lang = patch_lang_once
    return True


# -- memory confinement -----------------------------------------------------------------------------------------

class MemoryOutsideLaunch(RuntimeError):
    """A kernel under the interpreter read or wrote memory outside every tensor it was launched with."""


def _launch_ranges(args) -> list[tuple[int, int]]:
    """[start, end) of the storage of every tensor among a launch's arguments (in tuples and descriptors too)."""
    ranges = []
    for arg in args:
        if isinstance(arg, (tuple, list)):
            ranges += _launch_ranges(arg)
        elif hasattr(arg, "base") and hasattr(arg, "block_shape"):  # a TensorDescriptor: its base tensor
            ranges += _launch_ranges([arg.base])
        elif hasattr(arg, "untyped_storage"):
            storage = arg.untyped_storage()
            ranges.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
    return ranges


def check_addresses(addresses, mask, item_bytes: int, ranges: list[tuple[int, int]] | None) -> None:
    """Raise ``MemoryOutsideLaunch`` unless every address under ``mask`` (None: all), ``item_bytes`` wide, lies
    within one of ``ranges`` (None: no launch under way)."""
    import numpy as np

    wanted = np.asarray(addresses, dtype=np.uint64).reshape(-1)
    if mask is not None:
        wanted = wanted[np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(addresses)).reshape(-1)]
    if wanted.size == 0:
        return
    if ranges is None:
        raise MemoryOutsideLaunch("a memory access outside any kernel launch")
    inside = np.zeros(wanted.shape, dtype=bool)
    for start, end in ranges:
        inside |= (wanted >= np.uint64(start)) & (wanted + np.uint64(item_bytes) <= np.uint64(end))
    if not inside.all():
        raise MemoryOutsideLaunch(
            f"the kernel accessed address {int(wanted[~inside][0]):#x}, outside every tensor it was launched with: "
            "under the interpreter a kernel may touch only its arguments' memory")


def _current_ranges():
    """The storages of the launch this thread is running (None outside a launch)."""
    return getattr(_state, "ranges", None)


class _ConfinedMemory:
    """Triton's native interpreter module with its four memory operations checked against the launch's tensors;
    everything else is the module's own."""

    def __init__(self, native):
        self._native = native

    def __getattr__(self, name):
        return getattr(self._native, name)

    def load(self, ptrs, mask, other, dtype):
        import numpy as np

        check_addresses(ptrs, mask, np.dtype(dtype).itemsize, _current_ranges())
        return self._native.load(ptrs, mask, other, dtype)

    def store(self, ptrs, value, mask):
        check_addresses(ptrs, mask, value.dtype.itemsize, _current_ranges())
        return self._native.store(ptrs, value, mask)

    def atomic_cas(self, ptrs, cmp, value, sem):
        check_addresses(ptrs, None, value.dtype.itemsize, _current_ranges())
        return self._native.atomic_cas(ptrs, cmp, value, sem)

    def atomic_rmw(self, op, ptrs, value, mask, sem):
        check_addresses(ptrs, mask, value.dtype.itemsize, _current_ranges())
        return self._native.atomic_rmw(op, ptrs, value, mask, sem)


def confine_memory() -> bool:
    """Let a kernel under the interpreter load, store and update atomically only within the storage of the tensors
    it was launched with; True when that holds.

    The interpreter runs a kernel's loads and stores as plain reads and writes of this process's memory at
    whatever address the kernel computes. A review (2026-12-06) had a variant that passed the static check read
    a Python function's address from its ``repr``, overwrite the function's defaults with its builtins through
    two ``tl.store``s, and so run any Python it liked: it read the API key and forged the gate's verdict. Here
    each launch records its tensors' storages (``GridExecutor._init_args_hst``, which also copies device tensors
    to the host) and Triton's native memory operations refuse any address outside them (``MemoryOutsideLaunch``,
    the kernel's failure). A kernel on the GPU is not interpreted and is not confined by this."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    native = getattr(interpreter, "_interpreter", None)
    executor = getattr(interpreter, "GridExecutor", None)
    if isinstance(native, _ConfinedMemory):
        return True
    if native is None or executor is None or not all(
            hasattr(native, op) for op in ("load", "store", "atomic_cas", "atomic_rmw")) or not all(
            hasattr(executor, name) for name in ("_init_args_hst", "__call__")):
        return False
    init_args, call = executor._init_args_hst, executor.__call__

    def init_args_recorded(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        _state.ranges = _launch_ranges([*args_hst, *kwargs_hst.values()])
        return args_hst, kwargs_hst

    def call_confined(self, *args, **kwargs):
        outer = _current_ranges()
        try:
            return call(self, *args, **kwargs)
        finally:
            _state.ranges = outer

    executor._init_args_hst, executor.__call__ = init_args_recorded, call_confined
    interpreter._interpreter = _ConfinedMemory(native)
    return True
