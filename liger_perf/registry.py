"""The kernel registry: every ``kernels/<name>/`` folder with a ``spec.py`` and a ``baseline.py``."""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from functools import lru_cache
from pathlib import Path

from liger_perf.errors import UserError
from liger_perf.spec import KernelSpec

KERNELS_ENV = "LIGER_PERF_KERNELS"


def project_root() -> Path:
    return Path(__file__).resolve().parent.parent


def kernels_dir() -> Path:
    return Path(os.environ.get(KERNELS_ENV, project_root() / "kernels"))


def kernel_names() -> list[str]:
    root = kernels_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "spec.py").is_file() and (p / "baseline.py").is_file())


def baseline_path(name: str) -> Path:
    get_spec(name)  # a clear error for an unknown name
    return kernels_dir() / name / "baseline.py"


@lru_cache(maxsize=None)
def get_spec(name: str) -> KernelSpec:
    names = kernel_names()
    if name not in names:
        raise UserError(f"unknown kernel {name!r}: registered kernels are {', '.join(names) or 'none'} "
                        f"(in {kernels_dir()})")
    path = kernels_dir() / name / "spec.py"
    module_name = f"liger_perf_kernel_spec_{name}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    loader_spec.loader.exec_module(module)
    classes = [c for _, c in inspect.getmembers(module, inspect.isclass)
               if issubclass(c, KernelSpec) and c is not KernelSpec and c.__module__ == module_name]
    if len(classes) != 1:
        raise UserError(f"{path} must define exactly one KernelSpec subclass, found {len(classes)}")
    return classes[0]()
