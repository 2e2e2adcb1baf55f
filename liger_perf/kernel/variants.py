"""Variants: one self-contained module per implementation of a kernel, with its knobs in module-level literals.

``KNOBS`` maps each knob to its value and ``KNOB_CHOICES`` to its allowed values; both are plain literals, so
``read_knobs`` and ``with_knobs`` work on the source text without importing (or trusting) the module.
"""

from __future__ import annotations

import ast
import hashlib
import json
import importlib.util
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from liger_perf.core.errors import UserError
from liger_perf.kernel.spec import KernelSpec

_counter = itertools.count()


@dataclass(frozen=True)
class Variant:
    path: Path
    source: str
    module: ModuleType

    @property
    def sha256(self) -> str:
        return source_hash(self.source)


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def read_source(path: str | Path) -> str:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"variant file {path} does not exist: give the path of a variant module (.py)")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"variant file {path} is not UTF-8 text (byte {e.start}): save the module as UTF-8") from None


def parse_source(source: str, path: str | Path) -> ast.Module:
    try:
        return ast.parse(source, filename=str(path))
    except SyntaxError as e:
        raise UserError(f"variant {path} has a syntax error at line {e.lineno}: {e.msg}") from None


#: What measures and judges a variant, in the process that imports it: a variant that rebinds anything here at
#: import (a timer, a CUDA event, a tensor method, the gate or the timing code) could fake its own results.
WATCHED_MODULES = ("builtins", "time", "math", "torch", "torch.cuda", "torch.autograd", "torch.nn.functional",
                   "torch.testing", "triton", "triton.language", "triton.testing")
WATCHED_CLASSES = (("torch", "Tensor"), ("torch.cuda", "Event"), ("torch.autograd", "Function"))
#: liger-perf's modules that measure, loaded before the variant so that it cannot load and patch one first.
MEASURING = ("liger_perf.gate.correctness", "liger_perf.measure.timing", "liger_perf.kernel.passes", "liger_perf.gate.convergence")


def harness_snapshot() -> dict[tuple[str, str], int]:
    """The identity of every attribute of the watched modules and classes, and of liger-perf's own modules, as
    loaded now (only liger-perf's measuring modules are imported for it)."""
    for name in MEASURING:
        importlib.import_module(name)
    namespaces = {name: vars(sys.modules[name]) for name in WATCHED_MODULES if name in sys.modules}
    namespaces.update({name: vars(module) for name, module in list(sys.modules.items())
                       if (name == "liger_perf" or name.startswith("liger_perf.")) and module is not None})
    for module_name, cls in WATCHED_CLASSES:
        owner = sys.modules.get(module_name)
        if owner is not None and isinstance(getattr(owner, cls, None), type):
            namespaces[f"{module_name}.{cls}"] = vars(getattr(owner, cls))
    return {(space, attr): id(value) for space, attrs in namespaces.items() for attr, value in list(attrs.items())}


def changed_harness(before: dict[tuple[str, str], int], after: dict[tuple[str, str], int]) -> list[str]:
    """``space.attr`` of every watched attribute rebound, added or removed between two snapshots; a submodule
    that an import attached to its package is not a change."""
    spaces = {space for space, _ in before}
    changed = []
    for key in sorted(set(before) | set(after)):
        space, attr = key
        if space not in spaces or before.get(key) == after.get(key):
            continue  # a module first loaded by the variant's imports; or nothing changed
        if key not in before:
            value = getattr(sys.modules.get(space), attr, None)
            if value is not None and type(value).__name__ == "module":
                continue
        changed.append(f"{space}.{attr}")
    return changed


def load_variant(path: str | Path, spec: KernelSpec) -> Variant:
    """Import a variant module from its file and check that it offers the spec's interface."""
    path = Path(path)
    source = read_source(path)
    parse_source(source, path)
    module_name = f"liger_perf_variant_{path.stem}_{next(_counter)}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module  # Triton looks a jitted function's globals up through its module
    before = harness_snapshot()
    try:
        loader_spec.loader.exec_module(module)
    except SystemExit as e:  # sys.exit() at import would end the gate with the variant's exit code
        raise UserError(f"variant {path} called exit({e.code!r}) at import: a variant module only defines "
                        "things") from None
    except Exception as e:  # the module's own code failed: report it in one line
        raise UserError(f"variant {path} failed to import: {type(e).__name__}: {e}") from None
    changed = changed_harness(before, harness_snapshot())
    if changed:
        raise UserError(f"variant {path} changed {', '.join(changed[:3])} at import: a variant may not touch torch, "
                        "triton, the timers or liger-perf, which measure it")
    missing = [name for name in spec.interface if not hasattr(module, name)]
    if missing:
        raise UserError(f"variant {path} does not define {', '.join(missing)}, which the "
                        f"{spec.name} interface requires ({', '.join(spec.interface)})")
    return Variant(path, source, module)


def _knob_literals(tree: ast.Module, path) -> dict[str, ast.Assign]:
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("KNOBS", "KNOB_CHOICES"):
                found[node.targets[0].id] = node
    for name in ("KNOBS", "KNOB_CHOICES"):
        if name not in found:
            raise UserError(f"variant {path} has no module-level {name} literal")
    return found


def read_knobs(source: str, path: str | Path = "<variant>") -> tuple[dict[str, Any], dict[str, list]]:
    """``(KNOBS, KNOB_CHOICES)`` read from the source text as literals."""
    return _read_knob_nodes(_knob_literals(parse_source(source, path), path), path)


def _read_knob_nodes(nodes: dict[str, ast.Assign], path) -> tuple[dict[str, Any], dict[str, list]]:
    try:
        return ast.literal_eval(nodes["KNOBS"].value), ast.literal_eval(nodes["KNOB_CHOICES"].value)
    except ValueError:
        raise UserError(f"variant {path}: KNOBS and KNOB_CHOICES must be plain literals") from None


def with_knobs(source: str, changes: dict[str, Any], path: str | Path = "<variant>") -> str:
    """The source of a new variant: the same code with some knob values changed (and checked against their choices)."""
    nodes = _knob_literals(parse_source(source, path), path)
    knobs, choices = _read_knob_nodes(nodes, path)
    for name, value in changes.items():
        if name not in knobs:
            raise UserError(f"unknown knob {name!r}: this variant has {', '.join(knobs)}")
        if value not in choices.get(name, [value]):
            raise UserError(f"knob {name}={value!r} is not allowed: choose one of {choices[name]}")
    # Only the changed values are rewritten, in place: the diff from the parent shows exactly the change, and
    # the comments beside the knobs survive.
    node = nodes["KNOBS"].value
    if not isinstance(node, ast.Dict):
        raise UserError(f"variant {path}: KNOBS must be a dict literal")
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode()))
    encoded = source.encode()
    edits = []
    for key, value in zip(node.keys, node.values):
        name = ast.literal_eval(key) if key is not None else None
        if name in changes:
            start = offsets[value.lineno - 1] + value.col_offset
            end = offsets[value.end_lineno - 1] + value.end_col_offset
            value_text = json.dumps(changes[name]) if isinstance(changes[name], str) else repr(changes[name])
            edits.append((start, end, value_text.encode()))
    for start, end, text in sorted(edits, reverse=True):
        encoded = encoded[:start] + text + encoded[end:]
    return encoded.decode()
