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
"""

from __future__ import annotations

import ast
import builtins
import copy
import importlib
import importlib.util
import inspect
import keyword
import math
import os
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from liger_perf.errors import UserError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_DTYPE_ALIASES = {"fp32": "float32", "f32": "float32", "float": "float32", "bf16": "bfloat16",
                  "fp16": "float16", "f16": "float16", "half": "float16"}
DEFAULT_SHAPES = [(4096, 4096), (8192, 8192)]
DEFAULT_DTYPES = ["float32", "bfloat16"]
INTERPRET_DTYPES = ["float32", "float16"]
#: Inputs the reference is probed with: small, no dimension a multiple of another.
PROBE_SHAPE = (6, 10)
#: A second shape the elementwise translation must give the same kernel for (else the ops depend on the shape).
SECOND_PROBE_SHAPE = (5, 7)
#: Flat positions whose inputs the elementwise check perturbs one at a time (first, inner, last element).
PROBE_POSITIONS = (0, 13, 37, 59)
#: Globals of its module the reference may use: each is imported under that name in the generated spec.
ALLOWED_GLOBALS = {"torch": torch, "math": math, "F": torch.nn.functional, "nn": torch.nn}
#: Parameter names the generated code uses for itself.
RESERVED_PARAMETERS = {"self", "inputs", "config", "ctx", "settings", "torch", "triton", "tl", "math", "F", "nn",
                       "KNOBS", "KNOB_CHOICES", "INPUTS"}


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


def _check_shapes(shapes) -> list[tuple[int, ...]]:
    if not shapes:
        raise UserError("--shapes is empty: give at least one shape, e.g. 4096x4096")
    checked = []
    for shape in shapes:
        if (not isinstance(shape, (tuple, list)) or not shape
                or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)):
            raise UserError(f"shape {shape!r} is not a tuple of positive sizes: write shapes as 4096x4096")
        checked.append(tuple(shape))
    if len({len(s) for s in checked}) > 1:
        raise UserError(f"--shapes {','.join('x'.join(map(str, s)) for s in checked)} mixes ranks: give shapes "
                        "with one number of dimensions")
    return checked


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- the reference -------------------------------------------------------------------------------------------------

@dataclass
class Reference:
    """The reference function and what the scaffold reads off it."""

    fn: Callable
    spec: str  # "module:function", as given
    name: str  # the function's name in its source (and in the generated spec)
    source: str  # dedented
    inputs: tuple[str, ...]  # tensor parameters, in order
    options: dict[str, str]  # option -> its default's source text (a literal)
    arguments: str  # the parameter list, annotations dropped, as the generated public function takes it
    uses: set[str] = field(default_factory=set)  # allowed module globals it uses (torch, math, F, nn)


def load_reference(reference: str) -> Reference:
    """Import ``module:function`` (the current directory on ``sys.path`` first) and read its interface."""
    module_name, sep, func_name = str(reference).partition(":")
    module_name, func_name = module_name.strip(), func_name.strip()
    if not sep or not module_name or not func_name.isidentifier():
        raise UserError(f"--reference {reference}: write it as module:function, with the module importable from "
                        "the current directory, e.g. my_ops:silu_squared")
    cwd = os.getcwd()
    sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise UserError(f"--reference {reference}: no module {module_name!r} in the current directory or the "
                            f"environment: run from the folder that holds {module_name.split('.')[0]}.py") from None
        raise UserError(f"--reference {reference}: importing {module_name} failed: {_one_line(e)}: install it, "
                        "or remove the import") from None
    except Exception as e:  # the module's own code failed
        raise UserError(f"--reference {reference}: importing {module_name} raised {type(e).__name__}: "
                        f"{_one_line(e, 200)}: fix the module") from None
    finally:
        if sys.path and sys.path[0] == cwd:
            del sys.path[0]
    local = Path(cwd, *module_name.split(".")).with_suffix(".py")
    found = getattr(module, "__file__", None)
    if local.is_file() and (found is None or Path(found).resolve() != local.resolve()):
        raise UserError(f"--reference {reference}: {local.name} in this folder is hidden by the module "
                        f"{module_name} of {'Python' if found is None else found}, imported first: rename "
                        f"{local.name} (and the reference)")
    fn = getattr(module, func_name, None)
    if fn is None:
        defined = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_"))
        raise UserError(f"--reference {reference}: module {module_name} has no function {func_name} (its "
                        f"functions: {', '.join(defined) or 'none'})")
    if not inspect.isfunction(fn):
        raise UserError(f"--reference {reference} is a {type(fn).__name__}, not a Python function: point it at a "
                        "function defined with def")
    if fn.__name__ == "<lambda>":
        raise UserError(f"--reference {reference} is a lambda: define it with def")
    if fn.__qualname__ != fn.__name__ or fn.__code__.co_freevars:
        raise UserError(f"--reference {reference} is defined inside another function or class: define it at the "
                        "top level of its module")
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise UserError(f"--reference {reference}: cannot read its source ({_one_line(e, 120)}): define it in a "
                        ".py file") from None
    tree = ast.parse(source)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        raise UserError(f"--reference {reference}: its source is not one plain def: define it with def (not async)")
    func = tree.body[0]
    if func.decorator_list:
        raise UserError(f"--reference {reference} is decorated: give an undecorated function (the source is "
                        "copied into spec.py, the decorator would not be)")
    uses = _check_globals(reference, func, fn)
    inputs, options, arguments = _interface(reference, func)
    reserved = {"torch", "math", "F", "nn", "KernelSpec", "Tolerance", "Tolerances", "INPUTS", "annotations"}
    if func.name in reserved or func.name.startswith("_"):
        raise UserError(f"--reference {reference}: the function's name {func.name} is one the generated spec uses "
                        "itself (or private): rename the function")
    return Reference(fn, reference, func.name, source.rstrip() + "\n", inputs, options, arguments, uses)


def _free_names(func: ast.FunctionDef) -> set[str]:
    """Names the function reads without binding them itself (its globals and builtins)."""
    loaded, bound = set(), set()
    for node in ast.walk(func):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            if node is not func and not isinstance(node, ast.Lambda):
                bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return loaded - bound


def _check_globals(reference: str, func: ast.FunctionDef, fn: Callable) -> set[str]:
    uses, refused = set(), []
    module_globals = fn.__globals__
    for name in sorted(_free_names(func)):
        if name in module_globals:
            if name in ALLOWED_GLOBALS and module_globals[name] is ALLOWED_GLOBALS[name]:
                uses.add(name)
            else:
                refused.append(name)
        elif not hasattr(builtins, name):
            refused.append(name)
    if refused:
        raise UserError(f"--reference {reference} uses {', '.join(refused)} from its module; its source is "
                        "copied into spec.py, where only torch, math, F (torch.nn.functional), nn (torch.nn) and "
                        "the builtins exist: inline them into the function")
    return uses


def _interface(reference: str, func: ast.FunctionDef) -> tuple[tuple[str, ...], dict[str, str], str]:
    args = func.args
    if args.vararg or args.kwarg:
        raise UserError(f"--reference {reference} takes *args or **kwargs: name each tensor input and option")
    positional = [*args.posonlyargs, *args.args]
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults))
    for a, default in zip(args.kwonlyargs, args.kw_defaults):
        if default is None:
            raise UserError(f"--reference {reference}: keyword-only parameter {a.arg} has no default: tensor "
                            "inputs come before the options, without defaults")
        defaults[a.arg] = default
    inputs = tuple(a.arg for a in positional if a.arg not in defaults)
    if not inputs:
        raise UserError(f"--reference {reference} has no parameter without a default: its tensor inputs must be "
                        "parameters without defaults")
    options = {}
    for name, node in defaults.items():
        try:
            ast.literal_eval(node)
        except ValueError:
            raise UserError(f"--reference {reference}: option {name}={ast.unparse(node)} is not a literal: give "
                            "options literal defaults (numbers, strings, None, tuples)") from None
        options[name] = ast.unparse(node)
    names = [a.arg for a in [*positional, *args.kwonlyargs]]
    clashes = sorted(set(names) & (RESERVED_PARAMETERS | {"BLOCK_SIZE"}) | {n for n in names if n.startswith("_")})
    if clashes:
        raise UserError(f"--reference {reference}: parameter {', '.join(clashes)} is a name the generated code "
                        "uses itself: rename it")
    gradients = {f"d{name}" for name in inputs}
    if gradients & set(names):
        raise UserError(f"--reference {reference}: parameter {', '.join(sorted(gradients & set(names)))} clashes "
                        "with the name of a gradient (d<input>): rename it")
    bare = copy.deepcopy(args)
    for a in [*bare.posonlyargs, *bare.args, *bare.kwonlyargs]:
        a.annotation = None
    return inputs, options, ast.unparse(bare)


# -- probing the reference: its outputs, its domain, whether it is elementwise -----------------------------------

@dataclass
class Probe:
    n_outputs: int
    same_shape: bool  # every output has the inputs' shape
    domain: str  # "real" (standard normal inputs) or "positive" (inputs in [0.1, 2.1))
    elementwise: bool


def _draw(shape, n: int, domain: str, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    if domain == "positive":
        return [torch.rand(*shape, generator=generator) * 2 + 0.1 for _ in range(n)]
    return [torch.randn(*shape, generator=generator) for _ in range(n)]


def _call(ref: Reference, tensors) -> tuple[torch.Tensor, ...]:
    shape = "x".join(map(str, tensors[0].shape))
    try:
        out = ref.fn(*tensors)
    except Exception as e:
        raise UserError(f"--reference {ref.spec} raised {type(e).__name__} on float32 inputs of shape {shape} each "
                        f"({_one_line(e, 160)}): liger-perf new needs a function of tensors of one shape") from None
    outputs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if not outputs or not all(isinstance(o, torch.Tensor) for o in outputs):
        raise UserError(f"--reference {ref.spec} returns {type(out).__name__}: return a tensor or a tuple of "
                        "tensors")
    for i, o in enumerate(outputs):
        if not o.is_floating_point():
            raise UserError(f"--reference {ref.spec}: output {i} is {str(o.dtype).removeprefix('torch.')}: "
                            "liger-perf new makes kernels with floating-point outputs only")
    return outputs


def _finite_with_gradients(ref: Reference, domain: str) -> bool:
    inputs = [t.requires_grad_() for t in _draw(PROBE_SHAPE, len(ref.inputs), domain)]
    outputs = _call(ref, inputs)
    for i, o in enumerate(outputs):
        if o.grad_fn is None:
            raise UserError(f"--reference {ref.spec}: output {i} does not depend on the inputs through autograd: "
                            "every output must be differentiable")
    try:
        grads = torch.autograd.grad(outputs, inputs, [torch.ones_like(o) for o in outputs], allow_unused=True,
                                    materialize_grads=True)
    except Exception as e:
        raise UserError(f"--reference {ref.spec}: its backward raised {type(e).__name__} "
                        f"({_one_line(e, 160)}): the gate checks gradients, so the function must be differentiable"
                        ) from None
    return all(bool(torch.isfinite(t).all()) for t in (*outputs, *grads))


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a == b) | (torch.isnan(a) & torch.isnan(b))


def probe_reference(ref: Reference) -> Probe:
    """Call the reference on small random inputs: how many outputs, of which shape, and whether each output
    element depends on the inputs' elements at its own position only."""
    domain = "real"
    if not _finite_with_gradients(ref, "real") and _finite_with_gradients(ref, "positive"):
        domain = "positive"
    inputs = _draw(PROBE_SHAPE, len(ref.inputs), domain)
    with torch.no_grad():
        outputs = _call(ref, inputs)
    same_shape = all(o.shape == inputs[0].shape for o in outputs)
    elementwise = same_shape
    with torch.no_grad():
        for k in range(len(inputs)):
            for position in PROBE_POSITIONS:
                if not elementwise:
                    break
                bumped = [t.clone() for t in inputs]
                bumped[k].view(-1)[position] += 0.375
                changed = _call(ref, bumped)
                for before, after in zip(outputs, changed):
                    differs = ~_same(before, after).reshape(-1)
                    differs[position] = False
                    if bool(differs.any()):
                        elementwise = False
    return Probe(len(outputs), same_shape, domain, elementwise)


# -- the translation of ATen graphs into Triton ------------------------------------------------------------------

class Untranslatable(Exception):
    """An ATen op (or use of one) with no Triton translation here."""


@dataclass
class _Value:
    expr: str  # a name in the kernel, or a Python literal
    kind: str  # "float", "bool" or "const"
    const: Any = None  # the value of a const (a Python float or bool)


def _literal(value) -> str:
    if isinstance(value, bool):
        return repr(value)
    value = float(value)
    if math.isnan(value):
        return 'float("nan")'
    if math.isinf(value):
        return 'float("inf")' if value > 0 else '-float("inf")'
    return repr(value)


def _const(value) -> _Value:
    if isinstance(value, bool):
        return _Value(repr(value), "const", value)
    return _Value(_literal(value), "const", float(value))


#: ``@triton.jit`` helpers the translations call, emitted into the baseline when used.
HELPERS = {
    "_relu": '''
@triton.jit
def _relu(x):
    # As torch.relu: NaN stays NaN (tl.maximum(x, 0.0) would return 0 for it, on the GPU and the interpreter).
    return tl.where(x < 0.0, 0.0, x)
''',
    "_maximum": '''
@triton.jit
def _maximum(a, b):
    # As torch.maximum and torch.clamp: NaN if either is NaN (tl.maximum's default returns the other one).
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
''',
    "_minimum": '''
@triton.jit
def _minimum(a, b):
    # As torch.minimum and torch.clamp: NaN if either is NaN (tl.minimum's default returns the other one).
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
''',
    "_sign": '''
@triton.jit
def _sign(x):
    # As torch.sign: -1, 0 or 1; 0 for NaN.
    return (x > 0.0).to(tl.float32) - (x < 0.0).to(tl.float32)
''',
    "_tanh": '''
@triton.jit
def _tanh(x):
    # tl has no tanh: (1 - e) / (1 + e) with e = exp(-2|x|), the sign put back. Exact at 0 and +-inf, NaN stays
    # NaN; near 0 its error is absolute (~1e-7), not relative.
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0.0, -t, t)
''',
    "_silu": '''
@triton.jit
def _silu(x):
    # As PyTorch: x / (1 + exp(-x)) (NaN at -inf, as there).
    return x / (1.0 + tl.exp(-x))
''',
    "_silu_backward": '''
@triton.jit
def _silu_backward(dy, x):
    # As PyTorch's silu_backward: dy * s * (1 + x * (1 - s)), s = sigmoid(x).
    s = 1.0 / (1.0 + tl.exp(-x))
    return dy * s * (1.0 + x * (1.0 - s))
''',
    "_gelu": '''
@triton.jit
def _gelu(x):
    # As PyTorch's gelu (approximate="none"): x * Phi(x) = x / 2 * (1 + erf(x / sqrt(2))).
    return x * 0.5 * (1.0 + tl.erf(x * 0.7071067811865476))
''',
    "_gelu_backward": '''
@triton.jit
def _gelu_backward(dy, x):
    # As PyTorch's gelu_backward (approximate="none"): dy * (Phi(x) + x * phi(x)).
    cdf = 0.5 * (1.0 + tl.erf(x * 0.7071067811865476))
    pdf = 0.3989422804014327 * tl.exp(x * x * -0.5)
    return dy * (cdf + x * pdf)
''',
    "_gelu_tanh": '''
@triton.jit
def _gelu_tanh(x):
    # As PyTorch's gelu (approximate="tanh"): x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))).
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + _tanh(inner))
''',
    "_gelu_tanh_backward": '''
@triton.jit
def _gelu_tanh_backward(dy, x):
    # As PyTorch's gelu_backward (approximate="tanh").
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    t = _tanh(inner)
    left = 0.5 * x
    right_derivative = left * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x)
    return dy * (0.5 * (1.0 + t) + right_derivative)
''',
    "_softplus": '''
@triton.jit
def _softplus(x, beta, threshold):
    # As PyTorch: x where x * beta > threshold, else log(1 + exp(x * beta)) / beta.
    return tl.where(x * beta > threshold, x, tl.log(1.0 + tl.exp(x * beta)) / beta)
''',
    "_softplus_backward": '''
@triton.jit
def _softplus_backward(dy, x, beta, threshold):
    # As PyTorch's softplus_backward: dy where x * beta > threshold, else dy * z / (z + 1), z = exp(x * beta).
    z = tl.exp(x * beta)
    return tl.where(x * beta > threshold, dy, dy * z / (z + 1.0))
''',
    "_hardsigmoid": '''
@triton.jit
def _hardsigmoid(x):
    # As PyTorch: min(max(x + 3, 0), 6) / 6, NaN staying NaN.
    return _minimum(_maximum(x + 3.0, 0.0), 6.0) / 6.0
''',
    "_hardswish": '''
@triton.jit
def _hardswish(x):
    # As PyTorch: x * min(max(x + 3, 0), 6) / 6, NaN staying NaN.
    return x * _minimum(_maximum(x + 3.0, 0.0), 6.0) / 6.0
''',
}
_HELPER_CALLS = {"_hardsigmoid": ("_minimum", "_maximum"), "_hardswish": ("_minimum", "_maximum"),
                 "_gelu_tanh": ("_tanh",), "_gelu_tanh_backward": ("_tanh",)}

#: ATen ops translated by a template: (template over the op's normalized argument names, helpers, transcendental).
_TEMPLATES: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "neg": ("-{input}", (), False),
    "reciprocal": ("1.0 / {input}", (), False),
    "square": ("{input} * {input}", (), False),
    "mul": ("{input} * {other}", (), False),
    "abs": ("tl.abs({input})", (), False),
    "sqrt": ("tl.sqrt({input})", (), False),
    "rsqrt": ("tl.rsqrt({input})", (), False),
    "floor": ("tl.floor({input})", (), False),
    "ceil": ("tl.ceil({input})", (), False),
    "sign": ("_sign({input})", ("_sign",), False),
    "sgn": ("_sign({input})", ("_sign",), False),
    "relu": ("_relu({input})", ("_relu",), False),
    "maximum": ("_maximum({input}, {other})", ("_maximum",), False),
    "minimum": ("_minimum({input}, {other})", ("_minimum",), False),
    "clamp_min": ("_maximum({input}, {min})", ("_maximum",), False),
    "clamp_max": ("_minimum({input}, {max})", ("_minimum",), False),
    "hardtanh": ("_minimum(_maximum({input}, {min_val}), {max_val})", ("_maximum", "_minimum"), False),
    "hardtanh_backward": ("tl.where(({input} <= {min_val}) | ({input} >= {max_val}), 0.0, {grad_output})", (),
                          False),
    "leaky_relu": ("tl.where({input} > 0.0, {input}, {input} * {negative_slope})", (), False),
    "leaky_relu_backward": ("tl.where({input} > 0.0, {grad_output}, {grad_output} * {negative_slope})", (), False),
    "threshold": ("tl.where({input} <= {threshold}, {value}, {input})", (), False),
    "threshold_backward": ("tl.where({input} <= {threshold}, 0.0, {grad_output})", (), False),
    "hardsigmoid": ("_hardsigmoid({input})", ("_hardsigmoid",), False),
    "hardsigmoid_backward": ("tl.where(({input} > -3.0) & ({input} < 3.0), {grad_output} / 6.0, 0.0)", (), False),
    "hardswish": ("_hardswish({input})", ("_hardswish",), False),
    "hardswish_backward": ("tl.where({input} <= -3.0, 0.0, tl.where({input} < 3.0, {grad_output} * ({input} / 3.0 "
                           "+ 0.5), {grad_output}))", (), False),
    "addcmul": ("{input} + {value} * {tensor1} * {tensor2}", (), False),
    "addcdiv": ("{input} + {value} * ({tensor1} / {tensor2})", (), False),
    "exp": ("tl.exp({input})", (), True),
    "exp2": ("tl.exp2({input})", (), True),
    "expm1": ("tl.exp({input}) - 1.0", (), True),  # absolute, not relative, precision near 0
    "log": ("tl.log({input})", (), True),
    "log2": ("tl.log2({input})", (), True),
    "log10": ("tl.log({input}) * 0.4342944819032518", (), True),
    "log1p": ("tl.log(1.0 + {input})", (), True),  # absolute, not relative, precision near 0
    "sigmoid": ("tl.sigmoid({input})", (), True),
    "sigmoid_backward": ("{grad_output} * (1.0 - {output}) * {output}", (), False),
    "tanh": ("_tanh({input})", ("_tanh",), True),
    "tanh_backward": ("{grad_output} * (1.0 - {output} * {output})", (), False),
    "erf": ("tl.erf({input})", (), True),
    "sin": ("tl.sin({input})", (), True),
    "cos": ("tl.cos({input})", (), True),
    "silu": ("_silu({input})", ("_silu",), True),
    "silu_backward": ("_silu_backward({grad_output}, {input})", ("_silu_backward",), True),
    "softplus": ("_softplus({input}, {beta}, {threshold})", ("_softplus",), True),
    "softplus_backward": ("_softplus_backward({grad_output}, {input}, {beta}, {threshold})",
                          ("_softplus_backward",), True),
}
_COMPARISONS = {"eq": "==", "ne": "!=", "gt": ">", "ge": ">=", "lt": "<", "le": "<="}
_LOGICAL = {"logical_and": "&", "logical_or": "|", "logical_xor": "^", "bitwise_and": "&", "bitwise_or": "|",
            "bitwise_xor": "^"}
#: Ops that pass their input on: copies, aliases, and views that keep every element in its place.
_IDENTITY = {"clone", "alias", "alias_copy", "detach", "detach_copy", "lift_fresh_copy", "lift_fresh",
             "contiguous", "view", "view_copy", "_unsafe_view", "reshape", "expand", "expand_copy", "squeeze",
             "squeeze_copy", "unsqueeze", "unsqueeze_copy", "flatten", "positive"}
#: Ops that allocate a buffer without values: only a fill or a copy may use it.
_EMPTY = {"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided"}
#: Ops that make a tensor of one value: (normalized argument holding the value, or a number).
_FILLS = {"zeros_like": 0.0, "ones_like": 1.0, "full_like": "fill_value", "fill": "value", "new_zeros": 0.0,
          "new_ones": 1.0, "new_full": "fill_value", "zeros": 0.0, "ones": 1.0, "full": "fill_value",
          "scalar_tensor": "s"}

#: Every op name the translation knows (``aten.<name>.<overload>``), for the report and the error message.
OPS = sorted({*_TEMPLATES, *_COMPARISONS, *_LOGICAL, *_IDENTITY, *_FILLS, "add", "sub", "rsub", "div", "pow",
              "clamp", "where", "masked_fill", "logical_not", "bitwise_not", "isnan", "isinf", "isfinite",
              "_to_copy", "copy", "elu", "elu_backward", "gelu", "gelu_backward"})


class _Translator:
    """One traced graph -> the body of a flat elementwise Triton kernel, one statement per ATen op."""

    def __init__(self, gm: torch.fx.GraphModule, placeholders: list[str], reserved: set[str]):
        self.gm = gm
        self.placeholders = placeholders
        self.taken = set(reserved) | set(placeholders)
        self.statements: list[tuple[str, list[str]]] = []  # (name assigned, its lines)
        self.helpers: set[str] = set()
        self.transcendental = False  # an op whose Triton and PyTorch results differ by a few ulps
        self.used: set[str] = set()  # names the body reads (after ``body``)

    def _fresh(self, name: str) -> str:
        base, k = name, 1
        while name in self.taken or keyword.iskeyword(name):
            name = f"{base}_v{k}"
            k += 1
        self.taken.add(name)
        return name

    # -- operands
    def _value(self, values, arg) -> _Value:
        if isinstance(arg, torch.fx.Node):
            if values[arg].kind == "empty":
                raise Untranslatable(f"a read of uninitialised memory ({values[arg].expr})")
            return values[arg]
        if isinstance(arg, (bool, int, float)):
            return _const(arg)
        raise Untranslatable(f"an argument {arg!r}")

    @staticmethod
    def _num(v: _Value) -> str:
        if v.kind == "bool":
            return f"{v.expr}.to(tl.float32)"
        if v.kind == "const":
            return _literal(float(v.const))
        return v.expr

    @staticmethod
    def _cond(v: _Value) -> str:
        if v.kind == "bool":
            return v.expr
        if v.kind == "const":
            return repr(bool(v.const))
        return f"({v.expr} != 0.0)"

    def run(self) -> list[_Value]:
        values: dict[torch.fx.Node, _Value] = {}
        placeholders = iter(self.placeholders)
        outputs: list[_Value] = []
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                values[node] = _Value(next(placeholders), "float")
            elif node.op == "get_attr":
                tensor = getattr(self.gm, node.target)
                values[node] = self._uniform(tensor, "a tensor constant")
            elif node.op == "call_function":
                values[node] = self._translate(node, values)
            elif node.op == "output":
                result = node.args[0]
                result = result if isinstance(result, (tuple, list)) else (result,)
                outputs = [self._value(values, r) if r is not None else _const(0.0) for r in result]
            else:
                raise Untranslatable(f"a graph node of kind {node.op}")
        return outputs

    @staticmethod
    def _uniform(tensor: torch.Tensor, what: str) -> _Value:
        flat = tensor.detach().reshape(-1)
        if flat.numel() == 0 or not bool(_same(flat, flat[0]).all()):
            raise Untranslatable(f"{what} of shape {tuple(tensor.shape)} (not one value)")
        if flat.dtype == torch.bool:
            return _const(bool(flat[0]))
        if not (flat.is_floating_point() or flat.dtype in (torch.int64, torch.int32)):
            raise Untranslatable(f"{what} of dtype {flat.dtype}")
        return _const(float(flat[0]))

    def _translate(self, node: torch.fx.Node, values) -> _Value:
        target = node.target
        if not isinstance(target, torch._ops.OpOverload):
            raise Untranslatable(f"a call of {getattr(target, '__name__', target)}")
        packet = target.overloadpacket.__name__
        op = packet if packet.startswith("_") else packet.removesuffix("_")  # an in-place op as its functional one
        label = str(target).removesuffix(".default")
        normalized = node.normalized_arguments(self.gm, normalize_to_only_use_kwargs=True)
        if normalized is None:
            raise Untranslatable(label)
        kw = dict(normalized.kwargs)
        val = node.meta.get("val")
        kind = "bool" if isinstance(val, torch.Tensor) and val.dtype == torch.bool else "float"
        operands = node.all_input_nodes
        if op in _EMPTY:
            return _Value(label, "empty")  # a buffer that a fill or a copy overwrites before it is read
        # Every tensor operand known at generation time: PyTorch computes the value itself.
        if (operands and all(values[a].kind == "const" for a in operands)) or (not operands and op not in _FILLS):
            return self._fold(node, values, label)
        if op in _IDENTITY:
            return self._identity(node, values, kw, label)
        if op in _FILLS:
            fill = _FILLS[op]
            value = kw.get(fill) if isinstance(fill, str) else fill
            if isinstance(value, torch.fx.Node):
                raise Untranslatable(f"{label} with a tensor fill value")
            return _const(value)
        handler = getattr(self, f"_op_{op}", None)
        lines = None
        if handler is not None:
            result = handler(kw, values, label, kind)
            if isinstance(result, _Value):
                return result
            lines, expr = (result, None) if isinstance(result, list) else (None, result)
        elif op in _TEMPLATES:
            template, helpers, transcendental = _TEMPLATES[op]
            for helper in helpers:
                self.helpers.update({helper, *_HELPER_CALLS.get(helper, ())})
            self.transcendental |= transcendental
            expr = template.format(**{k: self._num(self._value(values, v)) for k, v in kw.items()
                                      if isinstance(v, (torch.fx.Node, bool, int, float))})
            if kind == "bool":  # arithmetic that PyTorch keeps boolean (a product of masks, say)
                expr = f"({expr}) != 0.0"
        elif op in _COMPARISONS:
            a, b = (self._num(self._value(values, kw[k])) for k in ("input", "other"))
            expr, kind = f"{a} {_COMPARISONS[op]} {b}", "comparison"
        elif op in _LOGICAL:
            a, b = (self._cond(self._value(values, kw[k])) for k in ("input", "other"))
            expr, kind = f"{a} {_LOGICAL[op]} {b}", "comparison"
        else:
            raise Untranslatable(label)
        kind = "bool" if kind == "comparison" else kind
        name = self._fresh(node.name)
        if lines is None:
            lines = [f"{name} = {expr}  # {label}"]
        else:
            lines = [line.replace("{name}", name) for line in lines]
            lines[0] += f"  # {label}"
        self.statements.append((name, lines))
        return _Value(name, kind)

    def _fold(self, node, values, label) -> _Value:
        def concrete(a):
            if isinstance(a, torch.fx.Node):
                v = values[a]
                return torch.tensor(v.const, dtype=torch.bool if isinstance(v.const, bool) else torch.float32)
            return a
        try:
            result = node.target(*torch.fx.node.map_aggregate(node.args, concrete),
                                 **torch.fx.node.map_aggregate(node.kwargs, concrete))
        except Exception as e:
            raise Untranslatable(f"{label} on constants ({_one_line(e, 80)})") from None
        if not isinstance(result, torch.Tensor):
            raise Untranslatable(label)
        return self._uniform(result, f"the result of {label}")

    def _identity(self, node, values, kw, label) -> _Value:
        source = self._value(values, kw.get("input", kw.get("self")))
        val, before = node.meta.get("val"), kw.get("input", kw.get("self"))
        before = before.meta.get("val") if isinstance(before, torch.fx.Node) else None
        if source.kind != "const" and (val is None or before is None or val.numel() != before.numel()):
            raise Untranslatable(f"{label} that changes the number of elements")
        return source

    # -- ops that need more than a template
    def _op_add(self, kw, values, label, kind):
        return self._sum(kw, values, "+")

    def _op_sub(self, kw, values, label, kind):
        return self._sum(kw, values, "-")

    def _op_rsub(self, kw, values, label, kind):
        return self._sum({"input": kw["other"], "other": kw["input"], "alpha": kw.get("alpha", 1)}, values, "-")

    def _sum(self, kw, values, sign):
        a, b = (self._num(self._value(values, kw[k])) for k in ("input", "other"))
        alpha = kw.get("alpha", 1)
        if isinstance(alpha, torch.fx.Node):
            raise Untranslatable("add/sub with a tensor alpha")
        return f"{a} {sign} {b}" if alpha == 1 else f"{a} {sign} {_literal(alpha)} * {b}"

    def _op_div(self, kw, values, label, kind):
        if kw.get("rounding_mode") is not None:
            raise Untranslatable(f"{label} with rounding_mode={kw['rounding_mode']!r}")
        a, b = (self._num(self._value(values, kw[k])) for k in ("input", "other"))
        return f"{a} / {b}"

    def _op_clamp(self, kw, values, label, kind):
        x = self._num(self._value(values, kw["input"]))
        lo, hi = kw.get("min"), kw.get("max")
        if lo is not None:
            self.helpers.add("_maximum")
            x = f"_maximum({x}, {self._num(self._value(values, lo))})"
        if hi is not None:
            self.helpers.add("_minimum")
            x = f"_minimum({x}, {self._num(self._value(values, hi))})"
        return x

    def _op_where(self, kw, values, label, kind):
        c = self._cond(self._value(values, kw["condition"]))
        convert = self._cond if kind == "bool" else self._num
        a, b = (convert(self._value(values, kw[k])) for k in ("input", "other"))
        return f"tl.where({c}, {a}, {b})"

    def _op_masked_fill(self, kw, values, label, kind):
        c = self._cond(self._value(values, kw["mask"]))
        convert = self._cond if kind == "bool" else self._num
        a, v = (convert(self._value(values, kw[k])) for k in ("input", "value"))
        return f"tl.where({c}, {v}, {a})"

    def _op_logical_not(self, kw, values, label, kind):
        return f"~{self._cond(self._value(values, kw['input']))}"

    _op_bitwise_not = _op_logical_not

    def _op_isnan(self, kw, values, label, kind):
        x = self._num(self._value(values, kw["input"]))
        return f"{x} != {x}"

    def _op_isinf(self, kw, values, label, kind):
        return f'tl.abs({self._num(self._value(values, kw["input"]))}) == float("inf")'

    def _op_isfinite(self, kw, values, label, kind):
        return f'tl.abs({self._num(self._value(values, kw["input"]))}) < float("inf")'

    def _op__to_copy(self, kw, values, label, kind):
        source = self._value(values, kw["input"])
        dtype = kw.get("dtype")
        if dtype in (torch.float16, torch.bfloat16) and source.kind == "float":
            # A rounding the function asks for: kept, as PyTorch does it (then back to float32 to go on).
            return f"{source.expr}.to(tl.{str(dtype).removeprefix('torch.')}).to(tl.float32)"
        if dtype is None or (dtype.is_floating_point and source.kind != "bool"):
            return source  # float32 or float64: every intermediate is float32 here, the store rounds once
        if dtype.is_floating_point:
            return self._num(source)
        if dtype == torch.bool:
            return self._cond(source)
        raise Untranslatable(f"{label} to {str(dtype).removeprefix('torch.')} (only floating and bool casts)")

    def _op_copy(self, kw, values, label, kind):
        return self._value(values, kw["src"])

    def _op_pow(self, kw, values, label, kind):
        self_arg, exponent = kw.get("input"), kw.get("exponent")
        if isinstance(exponent, torch.fx.Node):
            if isinstance(self_arg, (int, float)) and not isinstance(self_arg, bool):
                return self._scalar_base_pow(float(self_arg), self._num(values[exponent]), label)
            raise Untranslatable(f"{label} (a tensor exponent: only scalar exponents)")
        x = self._num(self._value(values, self_arg))
        e = float(exponent)
        if e == 0:
            return _const(1.0)  # as PyTorch: x ** 0 is 1 for every x, NaN included
        if e == 1:
            return self._value(values, self_arg)
        if e == 0.5:
            return f"tl.sqrt({x})"
        if e == -0.5:
            return f"tl.rsqrt({x})"
        if e.is_integer() and abs(e) <= 8:  # repeated products: as exact as PyTorch's pow at these exponents
            product = " * ".join([x] * int(abs(e)))
            return product if e > 0 else f"1.0 / ({product})"
        self.transcendental = True
        lines = ["{name} = tl.exp2(" + _literal(e) + f" * tl.log2(tl.abs({x})))"]
        if e.is_integer() and int(e) % 2:
            lines.append(f"{{name}} = tl.where({x} < 0.0, -{{name}}, {{name}})  # an odd power keeps the sign")
        elif not e.is_integer():
            lines.append(f'{{name}} = tl.where(({x} < 0.0) & ({x} > -float("inf")), float("nan"), {{name}})'
                         "  # as std::pow")
        return lines

    def _scalar_base_pow(self, base: float, e: str, label: str):
        if base == 1:
            return _const(1.0)
        if base <= 0:
            raise Untranslatable(f"{label} with base {base:g} (only a positive base)")
        self.transcendental = True
        return f"tl.exp2({e})" if base == 2 else f"tl.exp2({e} * {_literal(math.log2(base))})"

    def _op_elu(self, kw, values, label, kind):
        self.transcendental = True
        x = self._num(self._value(values, kw["input"]))
        alpha, scale, input_scale = (float(kw[k]) for k in ("alpha", "scale", "input_scale"))
        return (f"tl.where({x} <= 0.0, (tl.exp({x} * {_literal(input_scale)}) - 1.0) * {_literal(alpha * scale)}, "
                f"{x} * {_literal(scale)})")

    def _op_elu_backward(self, kw, values, label, kind):
        self.transcendental = True
        dy = self._num(self._value(values, kw["grad_output"]))
        x = self._num(self._value(values, kw["self_or_result"]))
        alpha, scale, input_scale = (float(kw[k]) for k in ("alpha", "scale", "input_scale"))
        if kw["is_result"]:
            negative = f"{dy} * {_literal(input_scale)} * ({x} + {_literal(alpha * scale)})"
        else:
            negative = f"{dy} * {_literal(input_scale * alpha * scale)} * tl.exp({x} * {_literal(input_scale)})"
        return f"tl.where({x} <= 0.0, {negative}, {dy} * {_literal(scale)})"

    def _op_gelu(self, kw, values, label, kind):
        self.transcendental = True
        helper = "_gelu_tanh" if kw.get("approximate") == "tanh" else "_gelu"
        self.helpers.update({helper, *_HELPER_CALLS.get(helper, ())})
        return f"{helper}({self._num(self._value(values, kw['input']))})"

    def _op_gelu_backward(self, kw, values, label, kind):
        self.transcendental = True
        helper = "_gelu_tanh_backward" if kw.get("approximate") == "tanh" else "_gelu_backward"
        self.helpers.update({helper, *_HELPER_CALLS.get(helper, ())})
        dy, x = (self._num(self._value(values, kw[k])) for k in ("grad_output", "input"))
        return f"{helper}({dy}, {x})"

    # -- the body, dead statements dropped
    def body(self, outputs: list[_Value]) -> list[str]:
        needed = {v.expr for v in outputs if v.kind != "const"}
        kept = []
        for name, lines in reversed(self.statements):
            if name not in needed:
                continue
            kept.append(lines)
            for line in lines:
                needed |= set(re.findall(r"(?<![.\w])[A-Za-z_]\w*", line.split("#")[0].split("=", 1)[1]))
        self.used = needed
        return [line for lines in reversed(kept) for line in lines]


@dataclass
class _Kernel:
    body: list[str]
    loads: list[str]  # placeholders the body reads
    stores: list[tuple[str, _Value]]  # (pointer name, value)
    helpers: set[str]
    transcendental: bool


def _trace(fn: Callable, args: list[torch.Tensor]) -> torch.fx.GraphModule:
    from torch.func import functionalize
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(functionalize(fn, remove="mutations_and_views"))(*args)
    gm.graph.eliminate_dead_code()
    return gm


def _translate(gm, placeholders: list[str], reserved: set[str], pointers: list[str]) -> _Kernel:
    translator = _Translator(gm, placeholders, reserved)
    outputs = translator.run()
    body = translator.body(outputs)
    loads = [p for p in placeholders if p in translator.used]
    return _Kernel(body, loads, list(zip(pointers, outputs)), translator.helpers, translator.transcendental)


@dataclass
class _Names:
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]  # the spec's output names (Y, or Y0, Y1, ...)

    @property
    def gradients(self) -> tuple[str, ...]:
        return tuple(f"d{n}" for n in self.inputs)

    @property
    def cotangents(self) -> tuple[str, ...]:
        return tuple(f"d{n}" for n in self.outputs)


def _output_names(inputs: tuple[str, ...], n_outputs: int) -> tuple[str, ...]:
    taken = {*inputs, *(f"d{n}" for n in inputs)}
    for base in ("Y", "out", "result"):
        names = (base,) if n_outputs == 1 else tuple(f"{base}{i}" for i in range(n_outputs))
        if not ({*names, *(f"d{n}" for n in names)} & taken):
            return names
    raise UserError("cannot name the outputs: the reference's parameters take Y, out and result: rename them")


def translate_reference(ref: Reference, probe: Probe, names: _Names) -> tuple[_Kernel, _Kernel]:
    """The forward and backward kernels' bodies, from the ATen graphs of the reference and its vector-Jacobian
    product; the same at two probe shapes, or the ops depend on the shape."""
    from torch.func import vjp

    def forward(*tensors):
        out = ref.fn(*tensors)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    def backward(*tensors):
        _, pull = vjp(forward, *tensors[: len(ref.inputs)])
        return pull(tuple(tensors[len(ref.inputs):]))

    n_in = len(ref.inputs)
    # The kernels' own names start with "_" (a parameter may not: _interface), so none is a parameter's.
    reserved = {"tl", "triton", "_offsets", "_mask", "_n_elements", "BLOCK_SIZE", "float", *HELPERS,
                *(_pointer(n) for n in (*names.inputs, *names.outputs, *names.gradients, *names.cotangents)),
                *names.outputs, *names.gradients}
    kernels = []
    for shape in (PROBE_SHAPE, SECOND_PROBE_SHAPE):
        xs = _draw(shape, n_in, probe.domain)
        cts = _draw(shape, probe.n_outputs, "real", seed=1)
        try:
            fwd_graph = _trace(forward, xs)
            bwd_graph = _trace(backward, [*xs, *cts])
        except Exception as e:
            raise UserError(f"--reference {ref.spec}: tracing it with make_fx failed ({type(e).__name__}: "
                            f"{_one_line(e, 160)}): write baseline.py by hand (--baseline FILE --entry FN)") from None
        try:
            fwd = _translate(fwd_graph, list(names.inputs), reserved, [_pointer(n) for n in names.outputs])
            bwd = _translate(bwd_graph, [*names.inputs, *names.cotangents], reserved,
                             [_pointer(n) for n in names.gradients])
        except Untranslatable as e:
            raise UserError(f"--reference {ref.spec} uses {e}, which liger-perf new cannot translate to Triton: "
                            "write the kernel by hand and pass it with --baseline FILE --entry FN") from None
        kernels.append((fwd, bwd))
    (fwd, bwd), (fwd2, bwd2) = kernels
    if fwd.body != fwd2.body or bwd.body != bwd2.body:
        raise UserError(f"--reference {ref.spec}: its ops depend on the input shape (the traced graphs differ "
                        "between shapes): write the kernel by hand and pass it with --baseline FILE --entry FN")
    return fwd, bwd


# -- the generated files ---------------------------------------------------------------------------------------------

def _prose(*paragraphs: str, width: int = 116) -> str:
    """Paragraphs filled to ``width``; a paragraph that starts with four spaces is code, kept as it is."""
    return "\n\n".join(p.rstrip() if p.startswith("    ") else textwrap.fill(" ".join(p.split()), width)
                       for p in paragraphs)


def _names_tuple(names) -> str:
    return "(" + ", ".join(f'"{n}"' for n in names) + ("," if len(names) == 1 else "") + ")"


def _outputs_text(outputs) -> str:
    return outputs[0] if len(outputs) == 1 else f"({', '.join(outputs)})"


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Kernel"


def _indented_source(ref: Reference, indent: str = "    ") -> str:
    """The reference's source as a docstring shows it: without its own docstring (its quotes would end the one
    around it), backslashes and triple quotes escaped."""
    lines = ref.source.rstrip().splitlines()
    func = ast.parse(ref.source).body[0]
    first = func.body[0] if func.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str) \
            and len(func.body) > 1:
        del lines[first.lineno - 1:first.end_lineno]
    text = "\n".join(lines).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return textwrap.indent(text, indent)


_KNOBS = '''KNOBS = {
    "BLOCK_SIZE": 1024,  # elements per program
    "num_warps": 4,
    "bwd_BLOCK_SIZE": "same",  # "same": the forward's BLOCK_SIZE
    "bwd_num_warps": "same",
}
KNOB_CHOICES = {
    "BLOCK_SIZE": [256, 512, 1024, 2048, 4096, 8192, 16384],
    "num_warps": [1, 2, 4, 8, 16, 32],
    "bwd_BLOCK_SIZE": ["same", 256, 512, 1024, 2048, 4096, 8192, 16384],
    "bwd_num_warps": ["same", 1, 2, 4, 8, 16, 32],
}'''

_LAUNCH_SETTINGS = '''def _launch_settings():
    block, warps = KNOBS["BLOCK_SIZE"], KNOBS["num_warps"]
    bwd_block = block if KNOBS["bwd_BLOCK_SIZE"] == "same" else KNOBS["bwd_BLOCK_SIZE"]
    bwd_warps = warps if KNOBS["bwd_num_warps"] == "same" else KNOBS["bwd_num_warps"]
    return {"BLOCK_SIZE": block, "num_warps": warps, "bwd_BLOCK_SIZE": bwd_block, "bwd_num_warps": bwd_warps}'''


def _pointer(name: str) -> str:
    """A tensor's pointer argument in a kernel: ``_<name>_ptr`` (never a parameter's name, nor a local's)."""
    return f"_{name}_ptr"


def _kernel_source(name: str, kernel: _Kernel, outputs: list[str], inputs: list[str]) -> tuple[str, list[str]]:
    """A flat elementwise kernel: (its source, the pointer arguments in order)."""
    pointers = [_pointer(o) for o in outputs] + [_pointer(i) for i in inputs if i in kernel.loads]
    lines = ["@triton.jit", f"def {name}({', '.join(pointers)}, _n_elements, BLOCK_SIZE: tl.constexpr):",
             "    _offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)",
             "    _mask = _offsets < _n_elements"]
    for i in inputs:
        if i in kernel.loads:
            lines.append(f"    {i} = tl.load({_pointer(i)} + _offsets, mask=_mask, other=0.0).to(tl.float32)")
    lines += [f"    {line}" for line in kernel.body]
    for pointer, value in kernel.stores:
        if value.kind == "const":
            expr = f"tl.full((BLOCK_SIZE,), {_literal(value.const)}, tl.float32)"
        elif value.kind == "bool":
            expr = f"{value.expr}.to(tl.float32)"
        else:
            expr = value.expr
        lines.append(f"    tl.store({pointer} + _offsets, {expr}.to({pointer}.dtype.element_ty), mask=_mask)")
    return "\n".join(lines), pointers


def _pointer_args(pointers: list[str], python_names: dict[str, str]) -> str:
    return ", ".join(python_names[p.removeprefix("_").removesuffix("_ptr")] for p in pointers)


def _option_check(ref: Reference, name: str) -> list[str]:
    lines = []
    for option, default in ref.options.items():
        test = f"{option} is not None" if default == "None" else f"{option} != {default}"
        lines += [f"    if {test}:",
                  f"        raise ValueError(f\"{name}: this kernel computes {option}={{{default}!r}} (the reference's "
                  f"default) only, not {{{option}!r}}\")"]
    return lines


def baseline_source(name: str, ref: Reference, probe: Probe, names: _Names, fwd: _Kernel, bwd: _Kernel,
                    command: str) -> str:
    """The generated Triton baseline of an elementwise reference."""
    inputs, outputs = list(names.inputs), list(names.outputs)
    fwd_src, fwd_ptrs = _kernel_source("_forward_kernel", fwd, outputs, inputs)
    bwd_src, bwd_ptrs = _kernel_source("_backward_kernel", bwd, list(names.gradients),
                                       [*inputs, *names.cotangents])
    helpers = set(fwd.helpers) | set(bwd.helpers)
    helper_src = "".join(HELPERS[h].strip() + "\n\n\n" for h in HELPERS if h in helpers)
    saved = [i for i in inputs if i in bwd.loads]
    camel = _camel(name)
    signature = ", ".join(inputs)
    first = inputs[0]
    gradient_list = ", ".join(names.gradients)
    doc = '"""' + _prose(
        f"{name}, variant zero (the baseline), scaffolded by ``{command}``.",
        f"Math, elementwise: {_outputs_text(outputs)} = {ref.name}({signature}), the PyTorch reference in spec.py:",
        _indented_source(ref),
        f"Backward: its vector-Jacobian product ({gradient_list} from {', '.join(names.cotangents)}). Both kernels "
        "are PyTorch's own ATen graphs of the function and of its backward (traced with make_fx), translated op by "
        "op into ``tl``; the comment on each line names its ATen op. Special values (NaN, infinities) come out "
        "where PyTorch's formulas put them.",
        "Casting: each element is computed in float32 and rounded once to the inputs' dtype. The forward saves its "
        "inputs (not its outputs) for the backward, which recomputes what it needs. Both passes are one flat "
        "elementwise kernel over the contiguous tensors, with 64-bit offsets.",
    ) + '\n"""'
    python = {n: n for n in (*inputs, *outputs, *names.gradients, *names.cotangents)}
    forward_body = [
        f"    def forward(ctx, {signature}):",
        f"        {signature} = " + ", ".join(f"{i}.contiguous()" for i in inputs),
    ]
    for o in outputs:
        forward_body.append(f"        {o} = torch.empty_like({first})")
    forward_body += [
        f"        _numel = {first}.numel()",
        "        settings = _launch_settings()",
        '        _forward_kernel[(triton.cdiv(_numel, settings["BLOCK_SIZE"]),)](',
        f"            {_pointer_args(fwd_ptrs, python)}, _numel, BLOCK_SIZE=settings[\"BLOCK_SIZE\"], "
        "num_warps=settings[\"num_warps\"])",
        f"        ctx.save_for_backward({', '.join(saved)})",
        "        ctx.settings = settings",
        f"        return {', '.join(outputs)}",
    ]
    backward_body = [f"    def backward(ctx, {', '.join(names.cotangents)}):"]
    if saved:
        unpacked = f"({saved[0]},)" if len(saved) == 1 else ", ".join(saved)
        backward_body.append(f"        {unpacked} = ctx.saved_tensors")
    used_cotangents = [c for c in names.cotangents if c in bwd.loads] or ([] if saved else [names.cotangents[0]])
    if used_cotangents:
        backward_body.append(f"        {', '.join(used_cotangents)} = "
                             + ", ".join(f"{c}.contiguous()" for c in used_cotangents))
    like = saved[0] if saved else used_cotangents[0]  # contiguous: the kernels write flat
    for g in names.gradients:
        backward_body.append(f"        {g} = torch.empty_like({like})")
    backward_body += [
        f"        _numel = {like}.numel()",
        "        settings = ctx.settings",
        '        _backward_kernel[(triton.cdiv(_numel, settings["bwd_BLOCK_SIZE"]),)](',
        f"            {_pointer_args(bwd_ptrs, python)}, _numel, BLOCK_SIZE=settings[\"bwd_BLOCK_SIZE\"], "
        "num_warps=settings[\"bwd_num_warps\"])",
        f"        return {gradient_list}",
    ]
    public = [f"def {name}({ref.arguments}):",
              f'    """``{ref.name}`` of spec.py, computed by the Triton kernels above (see the module docstring)."""']
    public += _option_check(ref, name)
    for other in inputs[1:]:
        public += [f"    if {other}.shape != {first}.shape or {other}.dtype != {first}.dtype:",
                   f"        raise ValueError(f\"{name}: {other} is {{tuple({other}.shape)}} {{{other}.dtype}}, \"",
                   f"                         f\"{first} {{tuple({first}.shape)}} {{{first}.dtype}}: the kernel takes "
                   "tensors of one shape and dtype\")"]
    public.append(f"    return {camel}Function.apply({signature})")
    parts = [
        doc, "", "import torch", "import triton", "import triton.language as tl", "", _KNOBS, "", "",
        helper_src + fwd_src, "", "", bwd_src, "", "", _LAUNCH_SETTINGS, "", "",
        f"class {camel}Function(torch.autograd.Function):", "    @staticmethod", *forward_body, "",
        "    @staticmethod", *backward_body, "", "", *public,
    ]
    return "\n".join(parts) + "\n"


_TOLERANCE_TIERS = {
    # (dtype, same-dtype atol/rtol/norm, float64 atol/rtol/norm, convergence), and a comment for the spec.
    "exact": ("As relu_squared's: the kernel computes the reference's float32 ops and rounds once, as it does.", [
        ("float32", "1e-6, 1e-6, 1e-6", "1e-5, 1e-5, 1e-6", "1e-4"),
        ("float16", "1e-3, 2e-3, 5e-4", "1e-2, 1e-2, 2e-3", "1e-2"),
        ("bfloat16", "1e-6, 8e-3, 2e-3", "1e-2, 1e-2, 5e-3", "3e-2")]),
    "transcendental": ("Looser than relu_squared's in float32: Triton's exp, log, erf (the GPU's approximate "
                       "exp2 and log2) differ from PyTorch's by a few ulps, and a one-ulp difference can round "
                       "a half-precision result the other way.", [
        ("float32", "1e-5, 1e-5, 1e-5", "1e-4, 1e-4, 1e-5", "1e-4"),
        ("float16", "1e-3, 2e-3, 5e-4", "1e-2, 1e-2, 2e-3", "1e-2"),
        ("bfloat16", "1e-5, 1.6e-2, 4e-3", "2e-2, 2e-2, 1e-2", "3e-2")]),
    "kernel": ("Loose: the kernel's own casting (an output saved in the input dtype for the backward, say) and "
               "order of summation differ from the reference's; tighten them once the kernel's are known.", [
        ("float32", "1e-5, 1e-5, 1e-5", "1e-4, 1e-4, 1e-5", "1e-4"),
        ("float16", "1e-3, 4e-3, 2e-3", "1e-2, 1e-2, 4e-3", "1e-2"),
        ("bfloat16", "1e-5, 1.6e-2, 8e-3", "2e-2, 2e-2, 1e-2", "3e-2")]),
}


def _tolerances_source(tier: str) -> str:
    comment, rows = _TOLERANCE_TIERS[tier]
    lines = [textwrap.fill(comment, 116, initial_indent="    # ", subsequent_indent="    # "), "    tolerances = {"]
    for dtype, same, wide, conv in rows:
        (sa, sr, sn), (wa, wr, wn) = same.split(", "), wide.split(", ")
        lines += [f"        torch.{dtype}: Tolerances(",
                  f"            same_dtype=Tolerance(atol={sa}, rtol={sr}, norm={sn}),",
                  f"            float64=Tolerance(atol={wa}, rtol={wr}, norm={wn}),",
                  f"            convergence={conv},",
                  "        ),"]
    lines.append("    }")
    return "\n".join(lines)


def _like_rank(template: tuple[int, int], rank: int) -> tuple[int, ...]:
    rows, cols = template
    if rank == 1:
        return (rows * cols,)
    # Rows first, as the gate plants its edge values in rows; inner dimensions of 2 (not 1: the gate indexes them).
    return (rows,) + (2,) * (rank - 2) + (cols,)


def _suites(shapes: list[tuple[int, ...]]) -> tuple[dict, dict]:
    rank = len(shapes[0])
    suites = {"gpu": shapes, "interpret": [_like_rank(s, rank) for s in ((8, 300), (64, 64))]}
    check = {"gpu": [_like_rank(s, rank) for s in ((1, 1), (1, 1000), (37, 4099), (4096, 8191))],
             "interpret": [_like_rank(s, rank) for s in ((1, 1), (1, 37), (13, 257))]}
    return suites, check


def spec_source(name: str, ref: Reference, probe: Probe, names: _Names, shapes, dtypes: list[str], tier: str,
                command: str) -> str:
    """The generated spec.py."""
    inputs, outputs = names.inputs, names.outputs
    camel = _camel(name)
    call_args = ", ".join(f'inputs["{i}"]' for i in inputs)
    if ref.options:
        call_args += ", **config"
    signature = ", ".join(inputs)
    suites, check = _suites(shapes)
    out_list = ", ".join(outputs)
    elementwise = probe.elementwise
    shape_word = "elementwise" if elementwise else "not elementwise"
    positive = probe.domain == "positive"
    domain_note = " (drawn in [0.1, 2.1): the function is not finite for all real inputs)" if positive else ""
    shape_note = ", of the inputs' shape" if probe.same_shape else ""
    option_note = (f" Options ({', '.join(ref.options)}): the gate checks the reference's defaults only."
                   if ref.options else "")
    edit_note = "" if elementwise else " Edit ``_reference_outputs`` if the kernel casts otherwise."
    doc = '"""' + _prose(
        f"Spec of ``{name}``: {_outputs_text(outputs)} = {ref.name}({signature}), {shape_word}, as the PyTorch "
        "function below computes it.",
        f"Scaffolded by ``{command}``. The math, copied from {ref.spec}:",
        _indented_source(ref),
        f"Inputs: {', '.join(inputs)}, floating-point tensors of one shape and dtype, all differentiable"
        f"{domain_note}. Outputs: {out_list}{shape_note}, in the inputs' dtype. Backward: the vector-Jacobian "
        f"product of the function ({', '.join(names.gradients)} from {', '.join(names.cotangents)}), as PyTorch's "
        f"autograd computes it.{option_note}",
        "Casting: each element is computed in float32 and rounded once to the inputs' dtype, in the forward and the "
        "backward. The reference follows it: it runs the function on float32 copies of half-precision inputs and "
        f"rounds each result once (in float64 it runs in float64).{edit_note}",
    ) + '\n"""'
    imports = ["from __future__ import annotations", "", "import math", "", "import torch"]
    if "F" in ref.uses:
        imports.append("import torch.nn.functional as F")
    imports += ["from torch import nn", "", "from liger_perf.spec import KernelSpec, Tolerance, Tolerances"]
    single = probe.n_outputs == 1
    call_ref = f"{ref.name}(*(inputs[name].to(wide) for name in INPUTS), **config)"
    reference_fn = [
        "def _reference_outputs(inputs, config):",
        '    """The function on float32 copies of the inputs (float64 stays float64), each output rounded once to',
        '    the inputs\' dtype: the kernel\'s casting."""',
        f'    dtype = inputs["{inputs[0]}"].dtype',
        "    wide = torch.float64 if dtype == torch.float64 else torch.float32",
    ]
    if single:
        reference_fn.append(f"    return ({call_ref}.to(dtype),)")
    else:
        reference_fn.append(f"    return tuple(output.to(dtype) for output in {call_ref})")
    output_shapes_fn = [
        "", "",
        "def _unit_rms(y):",
        '    """``y`` scaled to a root mean square of 1, the scale held constant: the convergence model trains stably',
        '    whatever the magnitude of the function\'s outputs."""',
        "    return y / y.detach().float().pow(2).mean().sqrt().clamp_min(1e-6).to(y.dtype)",
    ]
    if not probe.same_shape:
        output_shapes_fn += [
            "", "",
            "def _output_shapes(shape):",
            '    """The outputs\' shapes for inputs of ``shape`` (on the meta device: nothing is computed)."""',
            '    meta = {name: torch.empty(shape, device="meta") for name in INPUTS}',
            "    return [tuple(output.shape) for output in _reference_outputs(meta, {})]",
        ]
    math_lines = [f"{_outputs_text(outputs)} = {ref.name}({signature}), {shape_word}, where (from {ref.spec}):\n"]
    math_lines += [line + "\n" for line in ref.source.rstrip().splitlines()]
    math_lines += [f"Backward: its vector-Jacobian product ({', '.join(names.gradients)}). ",
                   "Computed in float32, each output and gradient rounded once to the inputs' dtype."]
    math_src = "\n".join(f"        {line!r}" for line in math_lines)
    draw = ("(torch.rand(*shape, generator=generator) * 2 + 0.1)" if positive
            else "torch.randn(*shape, generator=generator)")
    n_in, n_out = len(inputs), len(outputs)
    if probe.same_shape:
        min_bytes = [
            "    def min_bytes(self, pass_name, shape, dtype):",
            "        n = math.prod(shape)",
            "        size = torch.tensor([], dtype=dtype).element_size()",
            f"        forward = {n_in + n_out} * n * size  # read {', '.join(inputs)}; write {out_list}",
            f"        backward = {2 * n_in + n_out} * n * size  # read {', '.join(inputs)}, "
            f"{', '.join(names.cotangents)}; write {', '.join(names.gradients)}",
            '        return {"forward": forward, "backward": backward, "full": forward + backward}[pass_name]',
        ]
    else:
        min_bytes = [
            "    def min_bytes(self, pass_name, shape, dtype):",
            "        size = torch.tensor([], dtype=dtype).element_size()",
            "        inputs = len(INPUTS) * math.prod(shape)",
            "        outputs = sum(math.prod(s) for s in _output_shapes(shape))",
            "        forward = (inputs + outputs) * size  # read every input, write every output",
            "        backward = (2 * inputs + outputs) * size  # read the inputs and the outputs' gradients; write "
            "the inputs'",
            '        return {"forward": forward, "backward": backward, "full": forward + backward}[pass_name]',
        ]
    model_name = "_Mlp" if probe.same_shape else "_Model"
    target_shape = "4, batch, hidden" if probe.same_shape else "4, hidden"
    convergence = [
        "    def convergence_model(self, forward, config, generator, device, dtype):",
        "        hidden, batch = 48, 32",
        f"        model = {model_name}(forward, config, hidden, batch, generator).to(device=device, dtype=dtype)",
        "        inputs = torch.randn(4, batch, hidden, generator=generator).to(device=device, dtype=dtype)",
        f"        targets = torch.randn({target_shape}, generator=generator).to(device=device, dtype=dtype)",
        "        return model, inputs, targets",
    ]
    extra = inputs[1:]
    positive_in = ".abs() + 0.1" if positive else ""
    feed = [f'"{inputs[0]}": {"(x @ self.up)" + positive_in if positive else "x @ self.up"}']
    feed += [f'"{e}": self.extra[{k}]{positive_in}' for k, e in enumerate(extra)]
    if probe.same_shape:
        model_doc = ("Two linear layers with the kernel between them, as an activation in a feed-forward block"
                     + (f"; its other inputs ({', '.join(extra)}) are trained parameters." if extra else "."))
    else:
        model_doc = ("A linear layer into the kernel and one out of all its outputs, flattened"
                     + (f"; its other inputs ({', '.join(extra)}) are trained parameters." if extra else "."))
    model = [
        f"class {model_name}(nn.Module):",
        '    """' + textwrap.fill(model_doc, 112, subsequent_indent="    ") + '"""',
        "",
        "    def __init__(self, forward, config, hidden, batch, generator):",
        "        super().__init__()",
        "        self.forward_fn = forward",
        "        self.config = config",
        "        self.up = nn.Parameter(torch.randn(hidden, 4 * hidden, generator=generator) / hidden ** 0.5)",
    ]
    if extra:
        model += ["        self.extra = nn.ParameterList(",
                  f"            [nn.Parameter(torch.randn(batch, 4 * hidden, generator=generator)) for _ in "
                  f"range({len(extra)})])  # {', '.join(extra)}"]
    if probe.same_shape:
        model.append("        self.down = nn.Parameter(torch.randn(4 * hidden, hidden, generator=generator) / "
                     "(4 * hidden) ** 0.5)")
    else:
        model += ["        features = sum(math.prod(s) for s in _output_shapes((batch, 4 * hidden)))",
                  "        self.down = nn.Parameter(torch.randn(features, hidden, generator=generator) / features "
                  "** 0.5)"]
    model += ["", "    def forward(self, x):"]
    call = f"self.forward_fn({{{', '.join(feed)}}}, self.config)"
    if probe.same_shape and single:
        model += [f"        ({outputs[0]},) = {call}", f"        return _unit_rms({outputs[0]}) @ self.down"]
    elif probe.same_shape:
        model += [f"        outputs = {call}", "        return _unit_rms(sum(outputs)) @ self.down"]
    else:
        model += [f"        outputs = {call}",
                  "        return _unit_rms(torch.cat([output.reshape(-1) for output in outputs])) @ self.down"]
    variant_call = f"variant.{name}({call_args})"
    call_method = [
        "    def call(self, variant, inputs, config):",
        f"        return ({variant_call},)" if single else f"        return tuple({variant_call})",
    ]
    dtypes_src = ", ".join(f"torch.{d}" for d in dtypes)
    interpret_src = ", ".join(f"torch.{d}" for d in INTERPRET_DTYPES)
    body = [
        doc, "", *imports, "", f"INPUTS = {_names_tuple(inputs)}", "", "",
        f"# The reference, copied from {ref.spec}: a kernel folder holds everything a trial needs.",
        ref.source.rstrip(), "", "", *reference_fn, *output_shapes_fn, "", "",
        f"class {camel}Spec(KernelSpec):",
        f'    name = "{name}"',
        "    math = (",
        math_src,
        "    )",
        f'    interface = ("{name}", "KNOBS", "KNOB_CHOICES")',
        f"    differentiable = {_names_tuple(inputs)}",
        f"    outputs = {_names_tuple(outputs)}",
        f'    dtypes = {{"gpu": ({dtypes_src}{"," if len(dtypes) == 1 else ""}), "interpret": ({interpret_src})}}',
        "    suites = {",
        f'        "gpu": {[tuple(s) for s in suites["gpu"]]!r},',
        f'        "interpret": {suites["interpret"]!r},',
        "    }",
        "    # Odd sizes: one element, one row, widths and row counts that no block size divides.",
        "    check_shapes = {",
        f'        "gpu": {check["gpu"]!r},',
        f'        "interpret": {check["interpret"]!r},',
        "    }",
        "    check_configs = ({},)" + (f"  # the options at the reference's defaults: "
                                      f"{', '.join(f'{k}={v}' for k, v in ref.options.items())}"
                                      if ref.options else ""),
        "    # No kernel knowledge yet: the rules proposer explores the baseline's KNOB_CHOICES.",
        "    remedies = {}",
        _tolerances_source(tier),
        "",
        "    def make_inputs(self, shape, dtype, device, generator=None, config=None):",
        "        # Drawn in float32 on the CPU, so that a seed gives the same values on every device.",
        f"        return {{name: {draw}.to(device=device, dtype=dtype)",
        "                for name in INPUTS}",
        "",
        "    def reference(self, inputs, config):",
        "        return _reference_outputs(inputs, config)",
        "",
        *call_method,
        "",
        *min_bytes,
        "",
        *convergence,
        "", "",
        *model,
    ]
    return "\n".join(body) + "\n"


# -- --baseline FILE --entry FN ----------------------------------------------------------------------------------------

def _top_level_names(tree: ast.Module) -> dict[str, ast.AST]:
    names = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        names[n.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
    return names


def wrapped_baseline_source(name: str, ref: Reference, path: Path, entry: str, command: str) -> str:
    """The user's Triton module, with the interface the spec calls appended (and empty knobs where it has none)."""
    from liger_perf.variants import read_knobs

    path = Path(path)
    if not path.is_file():
        raise UserError(f"--baseline {path}: no such file: give the path of your Triton module (.py)")
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"--baseline {path} is not UTF-8 text: save it as UTF-8") from None
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as e:
        raise UserError(f"--baseline {path} has a syntax error at line {e.lineno}: {e.msg}") from None
    if not entry.isidentifier():
        raise UserError(f"--entry {entry}: give the name of the function in {path.name} that runs the kernel")
    top = _top_level_names(tree)
    if entry not in top:
        functions = sorted(n for n, node in top.items() if isinstance(node, ast.FunctionDef) and not n.startswith("_"))
        raise UserError(f"--entry {entry}: {path.name} defines no {entry} at its top level (its functions: "
                        f"{', '.join(functions) or 'none'})")
    if name in top and name != entry:
        raise UserError(f"--baseline {path} already defines {name}, which the kernel's interface needs for itself: "
                        f"rename it there, or pass --entry {name}")
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level:
            raise UserError(f"--baseline {path} has a relative import (line {node.lineno}): baseline.py is copied "
                            "alone into the kernel folder, so import only installed packages")
        modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                   else [node.module] if isinstance(node, ast.ImportFrom) else [])
        for module in modules:
            root = module.split(".")[0]
            if root != "__future__" and importlib.util.find_spec(root) is None:
                raise UserError(f"--baseline {path} imports {module}, which is not installed: baseline.py is copied "
                                "alone into the kernel folder, so inline that module into it")
    entry_node = top[entry]
    if isinstance(entry_node, ast.FunctionDef):
        a = entry_node.args
        if not a.vararg and len(a.posonlyargs) + len(a.args) < len(ref.inputs) + len(ref.options):
            raise UserError(f"--entry {entry} takes {len(a.posonlyargs) + len(a.args)} positional parameters where "
                            f"the reference takes {len(ref.inputs) + len(ref.options)} "
                            f"({', '.join([*ref.inputs, *ref.options])}): give it the reference's parameters")
    for knob in ("KNOBS", "KNOB_CHOICES"):
        if isinstance(top.get(knob), (ast.AnnAssign, ast.AugAssign)):
            raise UserError(f"--baseline {path}: write {knob} as a plain assignment of a literal ({knob} = {{...}})")
    missing = [knob for knob in ("KNOBS", "KNOB_CHOICES") if knob not in top]
    appended = [f"# {'-' * 112}", textwrap.fill(f"Appended by ``{command}``: the interface that kernels/{name}/spec.py "
                                                "calls.", 116, initial_indent="# ", subsequent_indent="# ")]
    if missing:
        appended += ["", "# No knobs yet: list the kernel's launch settings here (KNOBS) and the values each may take "
                     "(KNOB_CHOICES),", "# and the optimization loop can tune them."]
        appended += [f"{knob} = {{}}" for knob in missing]
    if name != entry:
        arguments = ", ".join([*ref.inputs, *ref.options])
        appended += ["", "",
                     f"def {name}({ref.arguments}):",
                     f'    """``{ref.name}`` of spec.py, computed by ``{entry}`` above."""',
                     f"    return {entry}({arguments})"]
    result = (f"# Copied from {path.name} by ``{command}``.\n" + source.rstrip() + "\n\n\n" + "\n".join(appended)
              + "\n")
    read_knobs(result, path)  # the knobs must be literals the loop can read and rewrite
    return result


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
    if not name.isidentifier() or keyword.iskeyword(name):
        raise UserError(f"kernel name {name!r} is not a Python identifier: use letters, digits and underscores, "
                        "e.g. silu_squared")
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
    folder.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(spec_text, encoding="utf-8")
    baseline_path.write_text(baseline_text, encoding="utf-8")
    return [spec_path, baseline_path]
