"""``liger-perf new``: a kernel folder (``spec.py`` and ``baseline.py``) scaffolded from a PyTorch function.

The reference, ``module:function``, states the math. Its parameters without a default are the kernel's tensor
inputs (floating point, one shape, all differentiable); those with a default are options, which the scaffold
keeps at their defaults. Its source is copied into ``spec.py`` (a trial's sandbox sees only the kernel folder),
so it may use nothing of its module but ``torch``, ``math``, ``torch.nn.functional as F``, ``torch.nn as nn``
and the builtins.

For an elementwise function the baseline is a working Triton kernel: the function's forward and its
vector-Jacobian product are traced to ATen graphs (``make_fx``) and each ATen op is translated into a ``tl``
expression computed in float32 (``OPS`` lists the ops it knows), so special values come out where PyTorch puts
them. One flat kernel per pass, with ``BLOCK_SIZE``/``num_warps`` knobs for each, as ``kernels/relu_squared``.
Any other function needs a Triton kernel of the user's (``--baseline FILE --entry FN``), copied into the folder
with the interface the spec calls appended.

Either way ``liger-perf check NAME`` can run straight away, and ``liger-perf optimize NAME`` with it.

Here: the command (``scaffold_kernel``) and its parsers; ``reference`` loads and probes the function,
``translate`` turns its ATen graphs into Triton, ``source`` writes the files.
"""

from __future__ import annotations

import keyword
import math
from pathlib import Path

import torch

from liger_perf.core.errors import UserError
from liger_perf.record.store import write_file
from liger_perf.scaffold.reference import (_DTYPE_ALIASES, DEFAULT_DTYPES, DEFAULT_SHAPES, DTYPES, PROBE_SHAPE,
                                         RESERVED_PARAMETERS, load_reference, probe_reference)
from liger_perf.scaffold.source import baseline_source, spec_source, wrapped_baseline_source
from liger_perf.scaffold.translate import _Names, _output_names, translate_reference


# -- parsers for the command line --------------------------------------------------------------------------------

def parse_shapes(text: str) -> list[tuple[int, ...]]:
    """``"4096x4096,8192x8192"`` -> ``[(4096, 4096), (8192, 8192)]``: one or more shapes of one rank."""
    shapes = []
    for part in str(text).split(","):
        dims = part.strip().lower().split("x")
        try:
            shape = tuple(int(d) for d in dims)
        except ValueError:
            shape = ()
        if not shape or any(d <= 0 for d in shape):
            raise UserError(f"--shapes {text}: cannot read {part.strip()!r}; write positive sizes joined by x, "
                            "shapes by commas, e.g. 4096x4096,8192x8192")
        shapes.append(shape)
    _check_shapes(shapes)
    return shapes


def parse_dtypes(text: str) -> list[str]:
    """``"float32,bfloat16"`` -> ``["float32", "bfloat16"]`` (also fp32, bf16, fp16, half)."""
    names = []
    for part in str(text).split(","):
        name = part.strip().lower().removeprefix("torch.")
        name = _DTYPE_ALIASES.get(name, name)
        if name not in DTYPES:
            raise UserError(f"--dtypes {text}: unknown dtype {part.strip()!r}; choose among {', '.join(DTYPES)}")
        if name not in names:
            names.append(name)
    return names


#: The most elements a suite's shape may have: 2**36 of bfloat16 is 128 GiB, a whole H200's memory for one tensor.
MAX_ELEMENTS = 2**36


def _check_shapes(shapes) -> list[tuple[int, ...]]:
    if not shapes:
        raise UserError("--shapes is empty: give at least one shape, e.g. 4096x4096")
    checked = []
    for shape in shapes:
        if (not isinstance(shape, (tuple, list)) or not shape
                or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)):
            raise UserError(f"shape {shape!r} is not a tuple of positive sizes: write shapes as 4096x4096")
        if math.prod(shape) > MAX_ELEMENTS:
            raise UserError(f"shape {'x'.join(map(str, shape))} has {math.prod(shape):.3g} elements, more than any "
                            f"GPU holds (at most {MAX_ELEMENTS:.3g}): give the sizes a model's tensors have")
        checked.append(tuple(shape))
    if len({len(s) for s in checked}) > 1:
        raise UserError(f"--shapes {','.join('x'.join(map(str, s)) for s in checked)} mixes ranks: give shapes "
                        "with one number of dimensions")
    return checked


#: The longest kernel name: a folder name (and a module name), well under a file system's 255 bytes.
MAX_NAME = 100


# -- the command -------------------------------------------------------------------------------------------------------

def _command_line(name, reference, shapes, dtypes, baseline, entry) -> str:
    parts = [f"liger-perf new {name} --reference {reference}"]
    if shapes:
        parts.append("--shapes " + ",".join("x".join(map(str, s)) for s in shapes))
    if dtypes:
        parts.append("--dtypes " + ",".join(dtypes))
    if baseline is not None:
        parts.append(f"--baseline {Path(baseline).name} --entry {entry}")
    return " ".join(parts)


def scaffold_kernel(kernels_dir: Path, name: str, reference: str, shapes: list[tuple[int, ...]] | None = None,
                    dtypes: list[str] | None = None, baseline: Path | None = None, entry: str | None = None,
                    force: bool = False) -> list[Path]:
    """Write ``kernels_dir/name/spec.py`` and ``baseline.py`` for the PyTorch function ``reference``
    (``module:function``) and return their paths; a bad input raises ``UserError`` saying what to do."""
    name = str(name)
    if not name.isascii() or not name.isidentifier() or keyword.iskeyword(name):
        # ASCII: Python reads an identifier NFKC-normalized (the folder 'ｋern' would define 'kern'), and a file
        # system may store a name in another normal form than it was typed.
        raise UserError(f"kernel name {name!r} is not a Python identifier of ASCII letters, digits and "
                        "underscores (nor a keyword): e.g. silu_squared")
    if len(name) > MAX_NAME:
        raise UserError(f"kernel name {name[:20]}... is {len(name)} characters long: use at most {MAX_NAME}")
    if name.startswith("_") or name in RESERVED_PARAMETERS or name in {"annotations"}:
        raise UserError(f"kernel name {name!r} is private or a name the generated code uses itself: choose another")
    shapes = _check_shapes(list(shapes)) if shapes is not None else None
    if dtypes is not None:
        dtypes = parse_dtypes(",".join(str(d).removeprefix("torch.") for d in dtypes)) if dtypes else []
        if not dtypes:
            raise UserError("--dtypes is empty: give at least one dtype, e.g. float32,bfloat16")
    if (baseline is None) != (entry is None):
        raise UserError("--baseline FILE and --entry FN go together: FILE is your Triton module, FN the function "
                        "in it that runs the kernel")
    folder = Path(kernels_dir) / name
    spec_path, baseline_path = folder / "spec.py", folder / "baseline.py"
    if folder.is_symlink() and not folder.exists():
        raise UserError(f"{folder} is a link to nothing: remove it, or choose another NAME")
    if folder.exists() and not force:
        raise UserError(f"{folder} exists: choose another NAME, or pass --force to overwrite its spec.py and "
                        "baseline.py")
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder} exists and is not a folder: remove it or choose another NAME")
    command = _command_line(name, reference, shapes, dtypes, baseline, entry)

    ref = load_reference(reference)
    probe = probe_reference(ref)
    names = _Names(ref.inputs, _output_names(ref.inputs, probe.n_outputs))
    if baseline is not None:
        baseline_text = wrapped_baseline_source(name, ref, Path(baseline), str(entry), command)
        tier = "kernel"
    elif not probe.elementwise:
        raise UserError(f"--reference {reference} is not elementwise (an output element depends on other "
                        "positions, or its shape differs from the inputs'): write its Triton kernel and pass it with "
                        "--baseline FILE --entry FN")
    else:
        fwd, bwd = translate_reference(ref, probe, names)
        baseline_text = baseline_source(name, ref, probe, names, fwd, bwd, command)
        tier = "transcendental" if fwd.transcendental or bwd.transcendental else "exact"
    if not probe.same_shape:
        try:
            meta = [torch.empty(PROBE_SHAPE, device="meta") for _ in ref.inputs]
            ref.fn(*meta)
        except Exception as e:
            raise UserError(f"--reference {reference} does not run on the meta device ({type(e).__name__}), which "
                            "the spec needs to size outputs that are not of the inputs' shape: write spec.py by "
                            "hand") from None
    spec_text = spec_source(name, ref, probe, names, shapes or DEFAULT_SHAPES, dtypes or DEFAULT_DTYPES, tier,
                            command)
    for path, text in ((spec_path, spec_text), (baseline_path, baseline_text)):
        try:  # a generator bug, never the user's: fail before writing anything, in one line
            compile(text, str(path), "exec")
        except SyntaxError as e:
            raise UserError(f"liger-perf new could not generate a valid {path.name} for {reference} ({e.msg}, "
                            f"line {e.lineno}): a bug of the scaffold; please report it with your reference, "
                            "or use --baseline") from None
    write_file(spec_path, spec_text)  # over a link --force replaces, never writes through it
    write_file(baseline_path, baseline_text)
    return [spec_path, baseline_path]
