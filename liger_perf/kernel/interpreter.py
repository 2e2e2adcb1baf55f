"""A faster Triton interpreter for kernels that call ``@triton.jit`` helpers: the language is patched once per launch.

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
