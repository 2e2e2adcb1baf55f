"""Variants: one self-contained module per implementation of a kernel, with its knobs in module-level literals.

``KNOBS`` maps each knob to its value and ``KNOB_CHOICES`` to its allowed values; both are plain literals, so
``read_knobs`` and ``with_knobs`` work on the source text without importing (or trusting) the module.

A variant may also carry a dispatch table, ``DISPATCH``: a literal dict from a shape bucket to the knobs that
differ from ``KNOBS`` at the shapes in it (``dispatch_bucket``: the row's width rounded up to a power of two,
the block a program holds a row in, and the element size). The loop tunes it one bucket at a time: a change
to a bucket's knob is written ``knob@bucket`` (``qualified``), a plain ``knob`` changes the default.
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
from types import FunctionType, ModuleType
from typing import Any, Iterable

from liger_perf.core.errors import UserError, syntax_error
from liger_perf.core.workspace import not_a_file
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


def batch_hash(hashes: Iterable[str]) -> str:
    """A screening's batch of candidates as one hash: of their source hashes, in order. The screening notebook
    records it as its "variant" and the runner checks it against the candidates it was given: both use this."""
    return source_hash("\n".join(hashes))


def variant_text(path: str | Path) -> str:
    """A variant file's text as a trial records it: UTF-8, undecodable bytes replaced (a file that is not UTF-8,
    an invalid variant, still has a text to record and hash)."""
    return Path(path).read_text(encoding="utf-8", errors="replace")


def variant_hash(path: str | Path) -> str:
    """A variant file's hash as a trial records it: of ``variant_text``'s text."""
    return source_hash(variant_text(path))


def missing_variant(path: Path, what: str = "variant file") -> str:
    """The line for a variant path that names no file: a folder or a device is said to be one."""
    return f"{what} {path} {not_a_file(path)}: give the path of a variant module (.py)"


def read_source(path: str | Path) -> str:
    path = Path(path)
    if not path.is_file():
        raise UserError(missing_variant(path))
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"variant file {path} is not UTF-8 text (byte {e.start}): save the module as UTF-8") from None


def parse_source(source: str, path: str | Path) -> ast.Module:
    try:
        return ast.parse(source, filename=str(path))
    except SyntaxError as e:
        raise UserError(f"variant {path} has {syntax_error(e)}") from None
    except ValueError:  # a lone surrogate (a model's "\ud800" escape): no UTF-8 text, no module
        raise UserError(f"variant {path} is not UTF-8 text (it holds a lone surrogate): save the module as UTF-8") \
            from None
    except (RecursionError, MemoryError):  # the parser's own stack, spent on thousands of nested operators
        raise UserError(f"variant {path} nests expressions too deeply for Python's parser: write them in steps") \
            from None


#: What measures and judges a variant, in the process that imports it: a variant that rebinds anything here at
#: import (a timer, a CUDA event, a tensor method, the gate or the timing code) could fake its own results.
WATCHED_MODULES = ("builtins", "time", "math", "torch", "torch.cuda", "torch.autograd", "torch.nn.functional",
                   "torch.testing", "triton", "triton.language", "triton.testing")
#: pandas' frame and series: the gate's rows are a DataFrame, and its verdict is read from them.
WATCHED_CLASSES = (("torch", "Tensor"), ("torch.cuda", "Event"), ("torch.autograd", "Function"),
                   ("pandas", "DataFrame"), ("pandas", "Series"))
_CLASS_SPACES = {f"{module}.{cls}" for module, cls in WATCHED_CLASSES}
#: liger-perf's modules that measure, loaded before the variant so that it cannot load and patch one first.
MEASURING = ("liger_perf.gate.correctness", "liger_perf.measure.timing", "liger_perf.kernel.passes", "liger_perf.gate.convergence")


def _dunder(attr: str) -> bool:
    return attr.startswith("__") and attr.endswith("__")


def _runs_the_harness(attr: str, value) -> bool:
    """What a patch made while a variant runs would change a result through: the public functions, methods and
    classes and every dunder (a tensor's ``__sub__``); not data nor private state, which the harness's own lazy
    start rebinds (CUDA's ``torch.cuda.default_generators`` and ``_initialized``)."""
    return _dunder(attr) or (not attr.startswith("_") and callable(value))


def _identity(value) -> tuple[int, ...]:
    """What a watched attribute is: the object it holds, and for a Python function also its code, defaults and
    keyword defaults, which can be swapped in place (``compare.__code__ = ...`` kept the same function object and
    made the gate pass a wrong kernel, in a review's escape through a since-closed route of the static check)."""
    if isinstance(value, FunctionType):
        return (id(value), id(value.__code__), id(value.__defaults__), id(value.__kwdefaults__))
    return (id(value),)


def harness_snapshot(while_running: bool = False) -> dict[tuple[str, str], tuple[int, ...]]:
    """The identity of every attribute of the watched modules and classes, and of liger-perf's own modules, as
    loaded now (only liger-perf's measuring modules are imported for it). ``while_running``: only those
    ``_runs_the_harness`` keeps, to compare across the gate's cases."""
    for name in MEASURING:
        importlib.import_module(name)
    namespaces = {name: vars(sys.modules[name]) for name in WATCHED_MODULES if name in sys.modules}
    namespaces.update({name: vars(module) for name, module in list(sys.modules.items())
                       if (name == "liger_perf" or name.startswith("liger_perf.")) and module is not None})
    for module_name, cls in WATCHED_CLASSES:
        owner = sys.modules.get(module_name)
        if owner is not None and isinstance(getattr(owner, cls, None), type):
            namespaces[f"{module_name}.{cls}"] = vars(getattr(owner, cls))
    return {(space, attr): _identity(value) for space, attrs in namespaces.items()
            for attr, value in list(attrs.items()) if not while_running or _runs_the_harness(attr, value)}


def _current(space: str, attr: str):
    """The value ``space.attr`` holds now (``space``: a module's name, or ``module.Class`` of a watched class)."""
    owner = sys.modules.get(space)
    if owner is None and "." in space:
        module, _, cls = space.rpartition(".")
        owner = getattr(sys.modules.get(module), cls, None)
    return getattr(owner, attr, None)


def changed_harness(before: dict[tuple[str, str], tuple[int, ...]], after: dict[tuple[str, str], tuple[int, ...]],
                    while_running: bool = False) -> list[str]:
    """``space.attr`` of every watched attribute rebound, added or removed between two snapshots; a submodule
    that an import attached to its package is not a change. ``while_running`` (snapshots of ``harness_snapshot(
    while_running=True)``): a public name added to a module is not a change either (one added to a watched class
    is: ``torch.Tensor.numel`` set there shadows what Tensor inherits from C, as a dunder does), nor a function rebound
    to a wrapper of itself (``torch._dynamo``, imported lazily by torch, wraps ``torch.manual_seed``)."""
    spaces = {space for space, _ in before}
    changed = []
    for key in sorted(set(before) | set(after)):
        space, attr = key
        if space not in spaces or before.get(key) == after.get(key):
            continue  # a module first loaded by the variant's imports; or nothing changed
        value = _current(space, attr)
        if key not in before:
            if value is not None and type(value).__name__ == "module":
                continue
            if while_running and not _dunder(attr) and space not in _CLASS_SPACES:
                continue  # a module's new name changes nothing the harness calls; a class's shadows what it inherits
        elif while_running and key in after and _identity(getattr(value, "__wrapped__", None)) == before[key]:
            continue
        changed.append(f"{space}.{attr}")
    return changed


def load_variant(path: str | Path, spec: KernelSpec) -> Variant:
    """Import a variant module from its file and check that it offers the spec's interface."""
    path = Path(path)
    source = read_source(path)
    tree = parse_source(source, path)
    if any(isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "DISPATCH" for t in node.targets)
           for node in tree.body):  # a table the harness would read otherwise than the kernel: refused before import
        read_dispatch(source, path)
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


def dispatch_bucket(shape: tuple[int, ...] | str, dtype: Any) -> str:
    """The ``DISPATCH`` bucket of a case: ``"<row block>x<element bytes>"``, e.g. ``"8192x2"`` for 4097 to 8192
    columns of bfloat16 or float16. ``shape`` may be a label (``"4096x5120"``), ``dtype`` a torch dtype or its
    name. A variant that carries a table computes the same key from its row width and dtype at launch."""
    import torch

    width = int(shape.split("x")[-1]) if isinstance(shape, str) else int(shape[-1])
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    block = 1 << (width - 1).bit_length() if width > 0 else 0  # as triton.next_power_of_2, which the kernel calls
    return f"{block}x{dtype.itemsize}"


def qualified(knob: str, bucket: str | None) -> str:
    """The name a change to ``knob`` in ``bucket`` goes by (``knob@bucket``); the plain name for the default."""
    return f"{knob}@{bucket}" if bucket else knob


def split_qualified(name: str) -> tuple[str, str | None]:
    """``"knob@bucket"`` -> ``("knob", "bucket")``; ``"knob"`` -> ``("knob", None)``."""
    knob, _, bucket = name.partition("@")
    return knob, bucket or None


def target_buckets(changes: dict[str, Any] | None) -> set[str]:
    """The buckets a trial is judged on: those its changes name when every change names one (a one-bucket move
    changes nothing elsewhere); empty (the whole suite) when any change is to a default, or there is none."""
    buckets = [split_qualified(name)[1] for name in changes or {}]
    return set(buckets) if buckets and None not in buckets else set()


def split_by_buckets(cases: list, buckets) -> tuple[list, list]:
    """``(the cases of buckets, the others)`` in the suite's order; ``(cases, [])`` where none falls in them (or
    none is named): what a trial confined to ``buckets`` times, and what it leaves out."""
    inside = [dispatch_bucket(case.shape, case.dtype) in buckets for case in cases]
    if not any(inside):
        return list(cases), []
    return [c for c, i in zip(cases, inside) if i], [c for c, i in zip(cases, inside) if not i]


def screened_buckets(changes: list[dict[str, Any] | None], cases) -> set[str]:
    """The dispatch buckets a screening of candidates with these ``changes`` times: those the changes name, where
    every candidate is a move in named buckets (``target_buckets``) and some of ``cases`` falls in them; else none
    (the whole suite)."""
    named = [target_buckets(c) for c in changes]
    if not named or not all(named):
        return set()
    scope = set().union(*named)
    return scope if any(dispatch_bucket(case.shape, case.dtype) in scope for case in cases) else set()


def bucket_columns(bucket: str) -> str:
    """The widths a bucket covers: ``"8192x2"`` -> ``"4097-8192"``."""
    block = int(bucket.partition("x")[0])
    return f"{block // 2 + 1}-{block}"


def knobs_in(knobs: dict[str, Any], dispatch: dict[str, dict[str, Any]], bucket: str | None) -> dict[str, Any]:
    """The knobs a launch in ``bucket`` runs with: the defaults, overridden by the bucket's entry."""
    return {**knobs, **(dispatch.get(bucket, {}) if bucket else {})}


def changes_between(knobs: dict[str, Any], table: dict[str, dict[str, Any]], new_knobs: dict[str, Any],
                    new_table: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The changes (plain names and ``knob@bucket``) that take one variant's settings to another's: each default
    that differs, and, in each bucket either table names, each knob either entry names where the other runs
    another value (an entry set, changed, or dropped back to the default)."""
    changes = {k: v for k, v in new_knobs.items() if knobs.get(k) != v}
    for bucket in sorted(set(table) | set(new_table)):
        before, after = knobs_in(knobs, table, bucket), knobs_in(new_knobs, new_table, bucket)
        named = {*table.get(bucket, {}), *new_table.get(bucket, {})}
        changes.update({qualified(k, bucket): after.get(k) for k in sorted(named) if before.get(k) != after.get(k)})
    return changes


def apply_changes(knobs: dict[str, Any], dispatch: dict[str, dict[str, Any]], changes: dict[str, Any]
                  ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``(KNOBS, DISPATCH)`` after ``changes`` (plain or ``knob@bucket`` names), an entry's knob equal to the
    new default dropped, and an entry left empty with it (it would say nothing)."""
    knobs = dict(knobs)
    table = {bucket: dict(entry) for bucket, entry in dispatch.items()}
    for name, value in changes.items():
        knob, bucket = split_qualified(name)
        if bucket is None:
            knobs[knob] = value
        else:
            table.setdefault(bucket, {})[knob] = value
    table = {b: kept for b, e in table.items() if (kept := {k: v for k, v in e.items() if knobs.get(k) != v})}
    return knobs, table


_LITERALS = ("KNOBS", "KNOB_CHOICES", "DISPATCH")


def _knob_literals(tree: ast.Module, path) -> dict[str, ast.Assign]:
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in _LITERALS:
                found[node.targets[0].id] = node
    for name in ("KNOBS", "KNOB_CHOICES"):
        if name not in found:
            raise UserError(f"variant {path} has no module-level {name} literal")
    return found


def read_knobs(source: str, path: str | Path = "<variant>") -> tuple[dict[str, Any], dict[str, list]]:
    """``(KNOBS, KNOB_CHOICES)`` read from the source text as literals."""
    return _read_knob_nodes(_knob_literals(parse_source(source, path), path), path)


def carries_dispatch(source: str, path: str | Path = "<variant>") -> bool:
    """Whether the variant has a ``DISPATCH`` table (even an empty one): only then can one bucket be tuned."""
    return "DISPATCH" in _knob_literals(parse_source(source, path), path)


def read_dispatch(source: str, path: str | Path = "<variant>") -> dict[str, dict[str, Any]]:
    """The variant's ``DISPATCH`` table read as a literal (empty where it has none), every entry checked against
    ``KNOBS`` and ``KNOB_CHOICES``."""
    nodes = _knob_literals(parse_source(source, path), path)
    return _read_dispatch_node(nodes, *_read_knob_nodes(nodes, path), path)


def recorded_dispatch(source: str) -> dict[str, dict[str, Any]]:
    """A recorded variant's dispatch table, for reading a history: empty where it has none, or where its source
    (one a model wrote, say) cannot be read as a variant."""
    try:
        return read_dispatch(source)
    except UserError:
        return {}


def check_bucket(bucket: str, path) -> None:
    """A bucket name as ``dispatch_bucket`` writes it (the kernel looks its entry up by that exact key)."""
    block, _, size = bucket.partition("x")
    if not (block.isascii() and block.isdigit() and size in ("2", "4", "8") and int(block) > 0
            and int(block) & (int(block) - 1) == 0
            and bucket == f"{int(block)}x{size}"):
        raise UserError(f"variant {path}: DISPATCH bucket {bucket!r} is not \"<row block>x<element bytes>\": a "
                        "power of two, then 2, 4 or 8 (\"8192x2\": 4097-8192 columns of a 2-byte dtype)")


def _read_dispatch_node(nodes: dict[str, ast.Assign], knobs: dict, choices: dict, path) -> dict[str, dict]:
    if "DISPATCH" not in nodes:
        return {}
    try:
        table = ast.literal_eval(nodes["DISPATCH"].value)
    except ValueError:
        raise UserError(f"variant {path}: DISPATCH must be a plain literal") from None
    if not isinstance(table, dict) or not all(isinstance(b, str) and isinstance(e, dict) for b, e in table.items()):
        raise UserError(f"variant {path}: DISPATCH must map a bucket name (\"8192x2\") to a dict of knob values")
    for bucket, entry in table.items():
        check_bucket(bucket, path)
        for name, value in entry.items():
            if name not in knobs:
                raise UserError(f"variant {path}: DISPATCH[{bucket!r}] names the unknown knob {name!r}")
            if value not in choices.get(name, [value]):
                raise UserError(f"variant {path}: DISPATCH[{bucket!r}] sets {name}={value!r}, which is not allowed: "
                                f"choose one of {choices[name]}")
    return table


def canonical_source(source: str, path: str | Path = "<variant>") -> str:
    """The source with its ``DISPATCH`` table written as ``with_knobs`` writes one: two variants that differ only
    in how their tables are laid out (spacing, order of buckets or of an entry's knobs, comments inside) read the
    same. (``with_knobs`` writes an entry's knobs in the order of the changes: the rules proposer's two-knob
    remedy in one bucket read as a different source from the same changes sorted, and a ``--buckets`` run
    stopped on it, 2026-12-04.)"""
    nodes = _knob_literals(parse_source(source, path), path)
    if "DISPATCH" not in nodes:
        return source
    table = _read_dispatch_node(nodes, *_read_knob_nodes(nodes, path), path)
    table = {bucket: dict(sorted(entry.items())) for bucket, entry in table.items()}
    start, end = _byte_span(source, nodes["DISPATCH"].value)
    encoded = source.encode()
    return (encoded[:start] + _dispatch_text(table).encode() + encoded[end:]).decode()


def _byte_span(source: str, node: ast.AST) -> tuple[int, int]:
    """Where a node of ``source``'s tree starts and ends, in bytes of its UTF-8 text (the AST's columns are bytes)."""
    offsets = [0]
    for line in source.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line.encode()))
    return offsets[node.lineno - 1] + node.col_offset, offsets[node.end_lineno - 1] + node.end_col_offset


def _read_knob_nodes(nodes: dict[str, ast.Assign], path) -> tuple[dict[str, Any], dict[str, list]]:
    try:
        knobs, choices = ast.literal_eval(nodes["KNOBS"].value), ast.literal_eval(nodes["KNOB_CHOICES"].value)
    except (ValueError, TypeError, RecursionError):  # TypeError: a key that cannot be hashed ({[1]: 2})
        raise UserError(f"variant {path}: KNOBS and KNOB_CHOICES must be plain literals") from None
    # Every reader takes them as dicts by knob name (a model's ``KNOBS = [1, 2]`` or a choice that is a number
    # would break them far from here, the proposers and the judge with a traceback).
    if not (isinstance(knobs, dict) and isinstance(choices, dict) and all(isinstance(k, str) for k in knobs)
            and all(isinstance(v, (list, tuple)) for v in choices.values())):
        raise UserError(f"variant {path}: KNOBS must map each knob's name to its value, and KNOB_CHOICES each "
                        "knob's name to a list of its allowed values")
    return knobs, choices


def bucket_order(bucket: str) -> tuple:
    """A sort key: buckets by width, then element size (a name that is no bucket last)."""
    block, _, size = bucket.partition("x")
    return (int(block), int(size)) if block.isdigit() and size.isdigit() else (1 << 62, bucket)


def _dispatch_text(table: dict[str, dict[str, Any]]) -> str:
    """The ``DISPATCH`` literal, a bucket per line in width order (a change to one bucket is a one-line diff)."""
    if not table:
        return "{}"
    lines = [f"    {json.dumps(bucket)}: {{" + ", ".join(f"{json.dumps(k)}: {_value_text(v)}" for k, v in entry.items())
             + "},\n" for bucket, entry in sorted(table.items(), key=lambda kv: bucket_order(kv[0]))]
    return "{\n" + "".join(lines) + "}"


def _value_text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else repr(value)


def with_knobs(source: str, changes: dict[str, Any], path: str | Path = "<variant>") -> str:
    """The source of a new variant: the same code with some knob values changed (and checked against their
    choices). A change named ``knob@bucket`` (``qualified``) is written into that bucket's ``DISPATCH`` entry; a
    bucket entry that comes to equal the defaults is dropped."""
    nodes = _knob_literals(parse_source(source, path), path)
    knobs, choices = _read_knob_nodes(nodes, path)
    table = _read_dispatch_node(nodes, knobs, choices, path)
    plain, per_bucket = {}, {}
    for name, value in changes.items():
        knob, bucket = split_qualified(name)
        if knob not in knobs:
            raise UserError(f"unknown knob {knob!r}: this variant has {', '.join(knobs)}")
        if value not in choices.get(knob, [value]):
            raise UserError(f"knob {knob}={value!r} is not allowed: choose one of {choices[knob]}")
        if bucket is None:
            plain[knob] = value
        else:
            check_bucket(bucket, path)
            per_bucket.setdefault(bucket, {})[knob] = value
    if per_bucket and "DISPATCH" not in nodes:
        raise UserError(f"variant {path} has no DISPATCH table, so it cannot take a change to one bucket "
                        f"({', '.join(per_bucket)}): change the knob for every shape instead")
    # Only the changed values are rewritten, in place: the diff from the parent shows exactly the change, and
    # the comments beside the knobs survive.
    node = nodes["KNOBS"].value
    if not isinstance(node, ast.Dict):
        raise UserError(f"variant {path}: KNOBS must be a dict literal")
    encoded = source.encode()
    edits = []
    for key, value in zip(node.keys, node.values):
        name = ast.literal_eval(key) if key is not None else None
        if name in plain:
            edits.append((*_byte_span(source, value), _value_text(plain[name]).encode()))
    if per_bucket or (plain and table):
        _, new_table = apply_changes(knobs, table, changes)
        if new_table != table:  # else the table stays as it is written, comments and all
            edits.append((*_byte_span(source, nodes["DISPATCH"].value), _dispatch_text(new_table).encode()))
    for start, end, text in sorted(edits, reverse=True):
        encoded = encoded[:start] + text + encoded[end:]
    return encoded.decode()
