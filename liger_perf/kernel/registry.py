"""The kernel registry: every ``<kernels folder>/<name>/`` with a ``spec.py`` and a ``baseline.py``.

The kernels folders, searched in this order (the first that holds a name wins):

1. each folder of ``$LIGER_PERF_KERNELS`` (``os.pathsep``-separated): kernels added for one run;
2. the workspace's ``kernels/`` (``liger_perf.core.workspace``);
3. the kernels that ship with liger-perf.

So a workspace kernel named like a built-in one replaces it, and ``liger-perf kernels`` says where each came from.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import sys
from functools import lru_cache
from pathlib import Path

from liger_perf.core import workspace
from liger_perf.core.errors import UserError
from liger_perf.kernel.spec import KernelSpec
from liger_perf.core.workspace import KERNELS_ENV



def kernel_folders() -> list[tuple[Path, str]]:
    """``(folder, origin)`` of every kernels folder, in search order; a folder named twice counts once."""
    stated = [(workspace.absolute_path(p), KERNELS_ENV)
              for p in os.environ.get(KERNELS_ENV, "").split(os.pathsep) if p]
    builtin = workspace.builtin_kernels()
    found: dict[Path, tuple[Path, str]] = {}
    for folder, origin in [*stated, (workspace.current().kernels, "workspace"), (builtin, "built-in")]:
        real = folder.resolve()
        if real == builtin.resolve():  # this checkout's kernels/: the built-in ones, wherever they are named from
            origin = "built-in"
        found.setdefault(real, (folder, origin))
    return list(found.values())


def _kernels() -> dict[str, tuple[Path, str]]:
    """Every registered kernel's folder and origin, by name."""
    kernels: dict[str, tuple[Path, str]] = {}
    for root, origin in kernel_folders():
        if not root.is_dir():
            continue
        for folder in sorted(root.iterdir()):
            if not _a_name(folder.name):  # bytes that are not UTF-8: no name anyone could type or print
                continue
            if (folder / "spec.py").is_file() and (folder / "baseline.py").is_file():
                kernels.setdefault(folder.name, (folder, origin))
    return kernels


def _a_name(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return name.isprintable()


def kernel_names() -> list[str]:
    return sorted(_kernels())


def kernel_folder(name: str) -> Path:
    """The folder of a registered kernel (a clear error for an unknown name)."""
    kernels = _kernels()
    if name not in kernels:
        searched = ", ".join(str(folder) for folder, _ in kernel_folders())
        raise UserError(unknown_kernel(name, sorted(kernels), searched))
    return kernels[name][0]


def closest_kernel(name: str, names: list[str]) -> str | None:
    """The registered name a mistyped one most likely meant (None when none is close)."""
    import difflib

    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_kernel(name: str, names: list[str], searched: str = "") -> str:
    """Why ``name`` is not a kernel, in one line: the registered name it most likely meant first, and only then
    how to make a new kernel (of that name where no registered one is close)."""
    listed = (", ".join(names) or "none") + (f" (searched {searched})" if searched else "")
    if "/" in name or name.endswith(".py"):  # a variant's file where the kernel's name goes: no kernel to make
        return (f"{name!r} is a file, not a kernel: name the kernel first, and the file with --variant where the "
                f"command takes one (`liger-perf check KERNEL --variant {name}`); registered kernels: {listed}")
    meant = closest_kernel(name, names)
    if meant is not None:
        return (f"unknown kernel {name!r}: did you mean {meant!r}? Registered kernels: {listed}; "
                "`liger-perf new NAME --reference module:function` makes a new one")
    return (f"unknown kernel {name!r}: registered kernels are {listed}; `liger-perf new {name} --reference "
            "module:function` makes one")


def kernel_origin(name: str) -> str:
    """Where a kernel comes from: ``workspace``, ``built-in`` or ``LIGER_PERF_KERNELS``."""
    kernel_folder(name)
    return _kernels()[name][1]


def baseline_path(name: str) -> Path:
    return kernel_folder(name) / "baseline.py"


def get_spec(name: str) -> KernelSpec:
    return _load_spec(kernel_folder(name) / "spec.py")


@lru_cache(maxsize=None)
def _load_spec(path: Path) -> KernelSpec:
    name = path.parent.name
    module_name = f"liger_perf_kernel_spec_{name}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as e:  # a user's spec: its mistake is one line that names the file
        sys.modules.pop(module_name, None)
        first = (str(e).splitlines() or [""])[0][:200]
        raise UserError(f"{path}: importing it failed ({type(e).__name__}: {first}); fix the spec") from None
    classes = [c for _, c in inspect.getmembers(module, inspect.isclass)
               if issubclass(c, KernelSpec) and c is not KernelSpec and c.__module__ == module_name]
    if len(classes) != 1:
        raise UserError(f"{path} must define exactly one KernelSpec subclass, found {len(classes)}")
    return classes[0]()
