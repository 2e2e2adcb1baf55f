"""The reference a kernel is scaffolded from: loaded, its interface read, and probed (its outputs, its domain,
whether it is elementwise)."""


import ast
import builtins
import copy
import importlib
import importlib.util
import inspect
import math
import os
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from liger_perf.core.errors import UserError


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
    if not all(part.isidentifier() for part in module_name.split(".")):  # a path (../ops.py), not a module's name
        raise UserError(f"--reference {reference}: {module_name!r} is no module name: run from the folder that "
                        "holds the file and name it without .py or a path, e.g. my_ops:silu_squared")
    cwd = os.getcwd()
    sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if module_name.endswith(".py"):
            raise UserError(f"--reference {reference}: name the module without .py, e.g. "
                            f"{module_name.removesuffix('.py')}:{func_name}") from None
        if e.name and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise UserError(f"--reference {reference}: no module {module_name!r} in the current directory or the "
                            f"environment: run from the folder that holds {module_name.split('.')[0]}.py") from None
        raise UserError(f"--reference {reference}: importing {module_name} failed: {_one_line(e)}: install it, "
                        "or remove the import") from None
    except Exception as e:  # the module's own code failed
        raise UserError(f"--reference {reference}: importing {module_name} raised {type(e).__name__}: "
                        f"{_one_line(e, 200)}: fix the module") from None
    except SystemExit as e:  # a script: its command line is parsed (and it exits) when it is imported
        raise UserError(f"--reference {reference}: importing {module_name} exited (code {e.code!r}): it runs as a "
                        "script when imported; put that code under `if __name__ == \"__main__\":`") from None
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
        outputs, again = _call(ref, inputs), _call(ref, inputs)
    if len(outputs) != len(again) or not all(a.shape == b.shape and bool(_same(a, b).all())
                                             for a, b in zip(outputs, again)):
        raise UserError(f"--reference {ref.spec} gives other outputs for the same inputs when called again (it draws "
                        "random numbers, or keeps state): the gate compares a kernel with it, so it must be "
                        "deterministic")
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


