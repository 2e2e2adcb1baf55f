"""The static check on a generated variant before it may run: an allow-list, a first filter before the sandbox.

A variant module may
- import only ``ALLOWED_IMPORTS`` (``torch``, ``triton``, ``triton.language``, ``math``, ``functools``,
  ``typing``, ``__future__``);
- reach into those modules only within their allowed surface (``surface``): tensor creation, dtypes and math of
  ``torch``; ``torch.autograd.Function``; the device queries of ``torch.cuda``; ``triton.jit`` and its helpers;
  the public language of ``triton.language``; all of ``math``. A module is never a value (``m = torch``);
- use no dunder attribute, no frame or code object, no name that reaches the interpreter (``getattr``,
  ``globals``, ``__builtins__``, ``open``, ``eval`` …), so no name can be built from a string; define no dunder
  (a module-level ``__getattr__`` runs whenever a missing name is looked up);
- name no builtin outside ``ALLOWED_BUILTINS``: a name the module does not bind is looked up in the builtins of
  the process it runs in, which hold more than Python's own (a trial's notebook kernel adds ``get_ipython``, whose
  ``.ex`` runs any code; ``site`` adds ``help``, which imports any module, and ``license``, whose private fields
  name the files it reads), so the names are resolved as Python resolves them (``symtable``) and any that
  reaches the builtins must be on the list;
- reach no private attribute (``_name``) of any object but the attributes it sets on its own ``ctx``, and call
  no ``forward``/``backward`` of an autograd.Function directly: only ``.apply`` gives them their context, and
  called directly any object is their ``ctx`` (``Fn.forward(torch.Tensor, f)`` would set ``torch.Tensor``'s
  attributes); nor the context's setters (``save_for_backward``, ``set_materialize_grads`` ...) of anything but its
  own ``ctx``; and bind ``ctx`` by nothing but its parameter (no ``def ctx``, ``except ... as ctx``, ``lambda
  ctx: ...``), and bind no ``setup_context`` in a class (with one, ``forward``'s first parameter is
  ``.apply``'s first argument, any object: ``_Knob.apply(torch.Tensor, f)`` set ``torch.Tensor``'s attributes);
- reach no container that torch or triton keep for the whole process (``SURFACE_CONTAINERS`` and every public
  list, dict or set of a surface member: ``tl.float32.FP_TYPES`` reached through an alias made fp32 not floating
  for every later kernel), and use triton's own JIT functions (``tl.sum``, ``triton.cdiv`` ...) only by calling
  them, like the module's own kernels;
- enter in a ``with`` block only ``torch.no_grad()``, ``torch.enable_grad()`` or ``torch.device(...)`` made there
  (``functools.reduce`` hands back any object: a no_grad made elsewhere, entered twice, stays on);
- reach no tensor's legacy storage class (``storage_type``: its ``.type("builtins.eval")`` imports any name) and
  no ``AttributeError.obj`` (the object a failed lookup was made on: that imported module);
- neither yield nor await: a suspended generator or coroutine keeps its ``with`` blocks open after the call
  returns (``torch.no_grad()`` or ``torch.device("meta")`` held for the whole process);
- define classes at module level only (a class body in a function runs any statement and reads the builtins
  before it binds a name), and annotate module- and class-level names and definitions with names and subscripts
  only (an annotation there runs at import);
- use no ``functools.wraps``: it sets and reads attributes named by its string arguments;
- touch no file by any route (``.numpy().dump``, ``.tofile``, ``torch.save`` …), and reach no internals of a JIT
  function (``get_capture_scope``, ``.fn``, ``.src`` …: once compiled, its capture scope holds the builtins):
  a kernel is only called or launched (``kernel[grid](...)``);
- set attributes only on the ``ctx`` parameter of an ``autograd.Function``'s ``forward``/``backward``, and only
  new ones (never one the context already has), and never rebind ``ctx``: an alias of a torch class named
  ``ctx`` would otherwise patch torch for the whole process, the current best included;
- use no inline assembly, under any name of ``triton.language``;
- run nothing at import but definitions: at module level and in class bodies only imports, ``def``/``class``
  with allowed decorators (``triton.jit`` …) and literal default arguments, literal assignments (and
  ``tl.constexpr(<literal>)``), and docstrings.

What the code then does when it is called is the sandbox's to contain; what it does at import is refused here.
Each reason is one line, fed back to the language model for its repair.
"""

from __future__ import annotations

import ast
import functools
import importlib

from liger_perf.core.errors import UserError, syntax_error
from liger_perf.kernel.spec import KernelSpec
from liger_perf.kernel.variants import read_dispatch

ALLOWED_IMPORTS = {"__future__", "math", "functools", "typing", "torch", "triton", "triton.language"}
_TORCH_DTYPES = {"float16", "bfloat16", "float32", "float64", "half", "float", "double", "int8", "int16", "int32",
                 "int64", "uint8", "bool", "long", "int", "float8_e4m3fn", "float8_e5m2"}
_TORCH_FUNCTIONS = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "arange", "tensor", "as_tensor", "Tensor", "Size", "device", "dtype", "finfo", "iinfo", "promote_types",
    "result_type", "is_grad_enabled", "no_grad", "enable_grad", "is_tensor", "is_floating_point",
    "broadcast_shapes", "sum", "mean", "amax", "amin", "max", "min", "maximum", "minimum", "sqrt", "rsqrt", "exp",
    "log", "tanh", "sigmoid", "relu", "where", "clamp", "abs", "square", "pow", "mul", "add", "sub", "div",
    "matmul", "cat", "stack", "reshape", "addcmul", "erf", "cos", "sin", "softmax", "log_softmax",
}
_TORCH_MEMBERS = {"autograd.Function", "cuda.get_device_properties",
                  "cuda.current_device", "cuda.current_stream", "cuda.is_available", "cuda.device_count",
                  "nn.functional.relu",
                  "nn.functional.silu", "nn.functional.gelu"}
_TRITON_MEMBERS = {"jit", "cdiv", "next_power_of_2", "autotune", "heuristics", "Config", "constexpr"}
#: Not ``wraps``: it is ``update_wrapper``, which reads and sets attributes named by its string arguments (a
#: review merged torch's module globals into a function of its own with ``updated=("__globals__",)``).
_FUNCTOOLS_MEMBERS = {"partial", "lru_cache", "cache", "reduce"}
#: Types only: typing's functions evaluate strings (``get_type_hints`` runs annotations through eval).
_TYPING_MEMBERS = {"Any", "Optional", "Union", "Tuple", "List", "Dict", "Callable", "Sequence"}
#: Used only as decorators of module- and class-level definitions, never called or bound in a function.
JIT_MAKERS = {"triton.jit", "triton.autotune", "triton.heuristics"}
#: Decorators allowed on module-level and class-level definitions (they run at import).
ALLOWED_DECORATORS = JIT_MAKERS | {"staticmethod", "classmethod", "functools.lru_cache", "functools.cache"}
FORBIDDEN_NAMES = {"open", "exec", "eval", "compile", "__import__", "breakpoint", "input", "globals", "locals",
                   "vars", "memoryview", "setattr", "delattr", "getattr", "hasattr", "dir", "type", "object",
                   "super", "property", "__builtins__", "__loader__", "__spec__", "__file__",
                   "__dict__"}
#: The builtins a variant may name: values, containers, iteration and the exceptions it may raise. Nothing that
#: reads or writes files, imports, evaluates, introspects or prints (the last a channel into the records).
ALLOWED_BUILTINS = {
    "abs", "all", "any", "bool", "callable", "classmethod", "dict", "divmod", "enumerate", "filter", "float",
    "frozenset", "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min", "next", "pow",
    "range", "repr", "reversed", "round", "set", "slice", "sorted", "staticmethod", "str", "sum", "tuple", "zip",
    "NotImplemented", "Ellipsis", "ArithmeticError", "AssertionError", "Exception", "IndexError", "KeyError",
    "LookupError", "NotImplementedError", "OverflowError", "RuntimeError", "TypeError", "ValueError",
    "ZeroDivisionError",
}
#: Objects whose attributes a variant may set (an autograd context keeps what the backward needs).
ASSIGNABLE = {"ctx"}
#: Attributes that reach the interpreter's internals from any object (frames, code, globals), or touch files,
#: processes, the network or the environment whatever the object is.
FORBIDDEN_ATTRIBUTES = {"gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "f_globals", "f_locals",
                        "f_builtins", "f_back", "f_code", "tb_frame", "tb_next", "co_code", "func_globals",
                        "system", "popen", "environ", "getenv", "putenv", "remove", "unlink", "rmdir", "rename",
                        "write_text", "write_bytes", "read_text", "read_bytes", "mkdir", "makedirs", "chmod",
                        "chown", "symlink", "fork", "spawn", "kill", "urlopen", "socket", "connect", "from_file",
                        "tofile", "fromfile", "cpp_extension", "hub", "load_library", "load_inline",
                        # files through numpy and torch's serialisation and storages
                        "numpy", "dump", "dumps", "save", "load", "savetxt", "loadtxt", "storage",
                        "untyped_storage", "share_memory_", "_share_filename_cpu_", "_share_fd_cpu_",
                        # a JIT function's internals: its source, its Python function, its capture scope
                        "fn", "fns", "src", "get_capture_scope", "cache", "device_caches", "used_global_vals",
                        "kernel_decorators", "run", "warmup", "preload", "_unsafe_update_src", "hash",
                        "cache_key", "module", "params", "arg_names",
                        # a JIT callable's inspect.Signature: from_callable(f, eval_str=True) evaluates f's string
                        # annotations with f's globals and builtins (a fourth review reached os through
                        # ``c = triton.cdiv; c.signature.from_callable``); an Autotuner's JIT function and disk cache
                        "signature", "from_callable", "base_fn", "check_disk_cache", "parse", "create_binder",
                        # a fifth review: a tensor's legacy storage class, whose .type("builtins.eval") imports any
                        # dotted name; and AttributeError.obj, the object a failed lookup was made on (that module)
                        "storage_type", "obj",
                        # a sixth review: ABCMeta.register, reached through typing's forwarding of an alias's
                        # attributes to its origin (``typing.Sequence[int].register(dict)`` made every dict a
                        # collections.abc.Sequence for the whole process, unseen by the harness's watch); a class's
                        # ``mro()`` (classes off the surface: ``object``, ``torch._C.TensorBase``); and the in-place
                        # samplers that draw from torch's global generator (a model's dropout stream under ``e2e``)
                        "register", "mro", "normal_", "uniform_", "random_", "bernoulli", "bernoulli_",
                        "exponential_", "geometric_", "log_normal_", "cauchy_", "multinomial"}
#: Class-level containers of surface objects, shared by the whole process: mutated in place through any route that
#: reaches them (``d = tl.float32; d.FP_TYPES[7] = ...`` made every later kernel's fp32 not floating). With those
#: ``surface_containers`` finds in the triton and torch loaded.
SURFACE_CONTAINERS = {"FP_TYPES", "SINT_TYPES", "UINT_TYPES", "STANDARD_FP_TYPES", "OTHER_TYPES",
                      "pre_run_hooks", "add_pre_run_hook", "constexprs", "do_not_specialize",
                      "do_not_specialize_on_alignment", "raw_src", "kwargs", "rewritten_fn", "rewriter"}
#: Never on the surface, whatever a module's public names hold: inline assembly runs whatever it says.
UNSAFE_SURFACE = {"triton.language.inline_asm_elementwise",
                  # functools.wraps re-exported (``updated=("__globals__",)`` merged torch's globals into the module's)
                  "triton.language.math.wraps",
                  # its ``tensordesc<...>,layout`` names are run through eval, whose builtins are the process's
                  "triton.language.str_to_ty",
                  # print, as the builtin does: a channel into the records (a review printed instructions with them)
                  "triton.language.static_print", "triton.language.device_print"}
#: What a with-block may enter: a manager made there by one of these (a fifth review entered a no_grad made
#: elsewhere twice through ``with functools.reduce(lambda a, b: a, [ng]):``, and grad mode stayed off).
WITH_MAKERS = {"torch.no_grad", "torch.enable_grad", "torch.device"}
#: Never bound in a class body: a Function with its own ``setup_context`` gets no context in ``forward``, whose
#: first parameter is then .apply's first argument (a fifth review's ``_Knob.apply(torch.Tensor, f)`` set
#: ``torch.Tensor``'s attributes as "its own ctx", and a tensor's ``numel`` made a wrong kernel pass the gate).
UNBOUND_IN_CLASSES = {"setup_context"}
#: The autograd methods whose first parameter is the context, the one object a variant may set attributes on.
CONTEXT_METHODS = {"forward", "backward", "setup_context", "jvp", "vjp"}
#: The context's own methods that set attributes on the object they are given: reached only as ``ctx.<name>`` of
#: the method's own context (``Fn.save_for_backward(torch.Tensor, X)`` set ``torch.Tensor.to_save``).
CONTEXT_SETTERS = {"save_for_backward", "save_for_forward", "mark_dirty", "mark_shared_storage",
                   "mark_non_differentiable", "set_materialize_grads"}


def rules_in_words() -> str:
    """What the check asks of a module, in the words a language model is given before it writes one: read from
    the lists the check itself uses, so the two cannot disagree."""
    imports = sorted(ALLOWED_IMPORTS - {"__future__"})
    builtins = sorted(n for n in ALLOWED_BUILTINS if n[0].islower())
    return (f"Import only {', '.join(imports)} (and __future__), at the top of the module, and use only their public "
            f"members (no inline assembly). Of Python's builtins use only {', '.join(builtins)} and the exceptions "
            "you raise (no print, open, getattr, type, globals ...). At module and class level write only imports, "
            "definitions (decorated with triton.jit, triton.autotune, triton.heuristics, staticmethod, classmethod "
            "or functools caches, with literal defaults) and literal assignments. Reach no dunder or private "
            "(_name) attribute; set attributes only on the ctx parameter of an autograd.Function's forward or "
            "backward, and only new ones; call the Function through .apply, never its forward or backward "
            "directly; a @triton.jit function (yours or triton's, such as tl.sum) is only called or launched "
            "(kernel[grid](...)). No generators or coroutines (yield, await, async); no setup_context (forward "
            f"takes ctx); a with-block enters only {', '.join(f'{m}(...)' for m in sorted(WITH_MAKERS))} made there. "
            "Touch no file, process, network or environment.")


@functools.cache
def surface() -> frozenset[str]:
    """Every dotted name a variant may reach in the allowed modules (by their full names)."""
    import math

    import triton.language as tl

    names = {f"torch.{n}" for n in _TORCH_DTYPES | _TORCH_FUNCTIONS} | {f"torch.{m}" for m in _TORCH_MEMBERS}
    names |= {f"triton.{n}" for n in _TRITON_MEMBERS} | {f"functools.{n}" for n in _FUNCTOOLS_MEMBERS}
    names |= {f"math.{n}" for n in dir(math) if not n.startswith("_")}
    # The language's own names and its math functions; never one of its modules (tl.math.core reaches knobs, os,
    # builtins: a surface of whole modules is no surface).
    names |= {f"triton.language.{n}" for n in _public_members(tl) if _kernel_language(getattr(tl, n))}
    names |= {f"triton.language.math.{n}" for n in _public_members(tl.math) if _kernel_language(getattr(tl.math, n))}
    names |= {f"typing.{n}" for n in _TYPING_MEMBERS}
    return frozenset(names - UNSAFE_SURFACE)


def _kernel_language(member: object) -> bool:
    """A member of ``triton.language`` that kernels are written in: a builtin of the language, a function of its
    standard library (JIT), a class or dtype of triton's own, or a plain value. Not a host-side helper that
    happens to be public (``tl.str_to_ty`` runs its argument through ``eval``), nor another module's function
    re-exported (``tl.math.wraps`` is ``functools.wraps``, ``tl.math.List`` typing's)."""
    if not callable(member) or getattr(member, "__triton_builtin__", False) or _is_jit_function(member):
        return True
    defined_in = getattr(member, "__module__", None)
    return isinstance(defined_in, str) and defined_in.split(".")[0] == "triton" and isinstance(member, type)


def _is_jit_function(member: object) -> bool:
    """A function triton compiles into kernels (``tl.sum``, a ``@triton.jit`` one, ``triton.cdiv``): a
    ``KernelInterface`` or, since triton 3.5, a ``JITCallable`` (``triton.cdiv`` is a ``ConstexprFunction``, one of
    those and no ``KernelInterface``). The one test both the surface and ``surface_kernels`` use."""
    from triton.runtime import jit

    return isinstance(member, (jit.KernelInterface, getattr(jit, "JITCallable", jit.KernelInterface)))


@functools.cache
def surface_containers() -> frozenset[str]:
    """``SURFACE_CONTAINERS`` and the name of every mutable container (list, dict, set) that is a public attribute
    of a surface member or of its class: state of the whole process, never a variant's to reach."""
    names = set(SURFACE_CONTAINERS)
    for dotted in surface():
        member = _member(dotted)
        for owner in (member, type(member)):
            names |= {attr for attr in dir(owner) if not attr.startswith("_")
                      and isinstance(getattr(owner, attr, None), (list, dict, set, bytearray))}
    return frozenset(names)


@functools.cache
def surface_kernels() -> frozenset[str]:
    """The surface members that are JIT functions (``tl.sum``, ``triton.cdiv`` ...): only called, never values
    (their hooks and lists are triton's, for every kernel of the process)."""
    return frozenset(d for d in surface() if _is_jit_function(_member(d)))


def _member(dotted: str) -> object:
    """The object a surface name (``triton.language.float32``) stands for: its longest importable module, then
    attributes."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            member = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            member = getattr(member, part, None)
        return member
    return None


@functools.cache
def context_attributes() -> frozenset[str]:
    """What an autograd context already has (``save_for_backward``, ``needs_input_grad`` …): never set by a
    variant, which may only add attributes of its own."""
    from torch.autograd.function import BackwardCFunction, FunctionCtx

    return frozenset(dir(FunctionCtx)) | frozenset(dir(BackwardCFunction))


def _public_members(module) -> set[str]:
    import types

    return {n for n in dir(module) if not n.startswith("_") and not isinstance(getattr(module, n), types.ModuleType)}


def _allowed_chain(dotted: str) -> bool:
    """``dotted`` (a full module path and its attributes) is exactly a name on the surface: nothing reached
    through one (an attribute of a surface member may be a module, and that module's attributes anything)."""
    return dotted in surface()


class _Checker(ast.NodeVisitor):
    def __init__(self) -> None:
        self.modules: dict[str, str] = {}  # local name -> the module it is bound to ("tl" -> "triton.language")
        self.problem = ""
        self.kernels: set[str] = set()  # module-level JIT functions: only called or launched
        self.launches: set[int] = set()  # ids of the Name nodes that call or launch one
        self.decorators: set[int] = set()  # ids of the decorators (their names) of module- and class-level defs
        self.context = ""  # the ctx parameter of the autograd method being visited ("" elsewhere)
        self.in_function_class = False  # visiting the body of a class derived from torch.autograd.Function
        self.depth = 0  # functions the visit is inside (a class there is refused)

    def fail(self, node: ast.AST, reason: str) -> None:
        if not self.problem:
            self.problem = f"line {getattr(node, 'lineno', '?')} {reason}"

    # -- imports ------------------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._no_ctx_binding(node, alias.asname or alias.name.split(".")[0])
            if alias.name not in ALLOWED_IMPORTS:
                self.fail(node, f"imports {alias.name}: only {', '.join(sorted(ALLOWED_IMPORTS))}")
            elif alias.asname:
                self.modules[alias.asname] = alias.name
            else:
                self.modules[alias.name.split(".")[0]] = alias.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or module not in ALLOWED_IMPORTS:
            self.fail(node, f"imports from {module or '.'}: only {', '.join(sorted(ALLOWED_IMPORTS))}")
            return
        for alias in node.names:
            self._no_ctx_binding(node, alias.asname or alias.name)
            full = f"{module}.{alias.name}"
            if full in ALLOWED_IMPORTS:
                self.modules[alias.asname or alias.name] = full
            elif module != "__future__" and full not in surface():
                self.fail(node, f"imports {full}: not on the surface a variant may use")
            elif full in JIT_MAKERS:
                self.fail(node, f"imports {full} by name: write @{full} on a module-level definition")

    def visit_Global(self, node: ast.Global | ast.Nonlocal) -> None:
        self.fail(node, f"declares {', '.join(node.names)} {type(node).__name__.lower()}: a variant's functions "
                        "bind only their own names")

    visit_Nonlocal = visit_Global

    def visit_Yield(self, node: ast.AST) -> None:
        self.fail(node, "yields or awaits: a generator or coroutine keeps its with-blocks open after the call "
                        "returns (torch.no_grad(), torch.device(...) held for the whole process)")

    visit_YieldFrom = visit_Await = visit_AsyncWith = visit_AsyncFor = visit_Yield

    def visit_Lambda(self, node: ast.Lambda) -> None:
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, *filter(None, [args.vararg, args.kwarg])]:
            self._no_ctx_binding(node, arg.arg)
        self.generic_visit(node)

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            call = item.context_expr
            if not (isinstance(call, ast.Call) and self._dotted(call.func) in WITH_MAKERS):
                self.fail(node, f"enters {ast.unparse(call)}: a with-block enters only a context manager it makes "
                                "there (with torch.no_grad():); one entered twice keeps its mode after both exit")
        self.generic_visit(node)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg in ("eval_str", "globals", "locals"):
            self.fail(node, f"passes {node.arg}=: it evaluates strings or names a namespace")
        self.generic_visit(node)

    def visit_Match(self, node: ast.AST) -> None:
        self.fail(node, "uses a match statement: its class patterns read attributes by name")

    # -- definitions: where ctx may be written ------------------------------------------------------------
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if self.depth:
            # A class body runs its statements when the function does, and looks names up in the globals and
            # builtins until it binds them (symtable calls them its own): refused outright inside a function.
            return self.fail(node, f"defines class {node.name} inside a function: classes belong at module level")
        self._no_ctx_binding(node, node.name)
        for stmt in node.body:
            bound = ([stmt.name] if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else
                     [t.id for t in stmt.targets if isinstance(t, ast.Name)] if isinstance(stmt, ast.Assign) else
                     [stmt.target.id] if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                     else [])
            for name in set(bound) & UNBOUND_IN_CLASSES:
                return self.fail(stmt, f"binds {name} in class {node.name}: with it, forward's first parameter is "
                                       ".apply's first argument, any object, not the context")
        outer = self.in_function_class
        self.in_function_class = any(self._dotted(b) == "torch.autograd.Function" for b in node.bases)
        self.generic_visit(node)
        self.in_function_class = outer

    def _no_ctx_binding(self, node: ast.AST, name: str | None) -> None:
        if name in ASSIGNABLE:
            self.fail(node, f"binds {name} by a definition, a lambda, an except clause or an import: ctx is the "
                            "autograd context its method is given, nothing else")

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        self._no_ctx_binding(node, node.name)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if node.name.startswith("__") and node.name.endswith("__"):
            self.fail(node, f"defines {node.name}: no dunder methods or module hooks in a variant")
        self._no_ctx_binding(node, node.name)
        outer_context, outer_class = self.context, self.in_function_class
        params = [*node.args.posonlyargs, *node.args.args]
        self.context = (params[0].arg if self.in_function_class and node.name in CONTEXT_METHODS and params
                        and params[0].arg == "ctx" else "")
        self.in_function_class = False  # a class or function nested in it is not the autograd method
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1
        self.context, self.in_function_class = outer_context, outer_class

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.visit_Yield(node)

    # -- names and attributes -----------------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_NAMES or (node.id.startswith("__") and node.id.endswith("__")):
            self.fail(node, f"uses {node.id}(): no file, process or dynamic-code access in a variant")
        elif node.id in self.modules:
            self.fail(node, f"uses the module {node.id} as a value: only its allowed members")
        elif node.id in ASSIGNABLE and not isinstance(node.ctx, ast.Load):
            self.fail(node, f"rebinds {node.id}: ctx is the autograd context its method is given, nothing else")
        elif node.id in self.kernels and id(node) not in self.launches:
            self.fail(node, f"uses the JIT function {node.id} as a value: a kernel is only called or launched "
                            f"({node.id}[grid](...))")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain, root = [node.attr], node.value
        while isinstance(root, ast.Attribute):
            chain.append(root.attr)
            root = root.value
        chain.reverse()
        own_context = isinstance(root, ast.Name) and root.id == self.context and self.context and len(chain) == 1
        if chain[-1] in CONTEXT_SETTERS and not own_context:
            return self.fail(node, f"uses .{chain[-1]} of something other than its own ctx: it sets attributes on the "
                                   "object it is given")
        if isinstance(node.ctx, ast.Load) and chain[-1] in CONTEXT_METHODS:
            return self.fail(node, f"uses .{chain[-1]}: an autograd.Function runs only through .apply, which gives "
                                   "its methods their context (called directly, any object would be their ctx)")
        if not isinstance(node.ctx, ast.Load):
            if not own_context:
                return self.fail(node, f"changes .{'.'.join(chain)}: a variant sets attributes only of the ctx "
                                       "parameter of its autograd.Function's forward or backward")
            if chain[0] in context_attributes():
                return self.fail(node, f"replaces ctx.{chain[0]}: a variant adds attributes of its own to ctx, "
                                       "never changes those it has")
        if chain[-1] in ("format", "format_map"):
            return self.fail(node, "formats with .format: its fields reach attributes by name; use an f-string")
        module_chain = isinstance(root, ast.Name) and root.id in self.modules  # checked whole, on the surface
        for attr in chain:
            if attr.startswith("__") and attr.endswith("__"):
                return self.fail(node, f"reaches {attr}: no introspection of the interpreter")
            if attr in surface_containers() and not own_context:
                return self.fail(node, f"reaches .{attr}: a container of torch or triton, shared by every kernel "
                                       "of the process")
            if attr in FORBIDDEN_ATTRIBUTES and not module_chain:
                return self.fail(node, f"uses .{attr}: no file, process, network, environment, frame or JIT "
                                       "internals access")
            if attr.startswith("_") and not module_chain and not own_context:
                return self.fail(node, f"reaches the private attribute .{attr}: only the attributes a variant "
                                       "sets on its own ctx may begin with an underscore")
        if isinstance(root, ast.Name) and root.id in self.kernels:
            return self.fail(node, f"reaches {root.id}.{chain[0]}: a JIT function's internals are off limits")
        if isinstance(root, ast.Name) and root.id in self.modules:
            dotted = ".".join([self.modules[root.id], *chain])
            if not isinstance(node.ctx, ast.Load):
                return self.fail(node, f"changes {dotted}: a variant may not change torch, triton or math")
            if not _allowed_chain(dotted):
                return self.fail(node, f"uses {dotted}: not on the surface a variant may use")
            if dotted in JIT_MAKERS and id(node) not in self.decorators:
                return self.fail(node, f"uses {dotted} other than as the decorator of a module-level definition: a "
                                       "JIT function made at run time is a value whose internals (signature, "
                                       "base_fn, check_disk_cache ...) reach inspect, files and eval")
            if dotted in surface_kernels() and id(node) not in self.launches:
                return self.fail(node, f"uses the JIT function {dotted} as a value: it is only called")
            return None  # the chain is checked whole: its inner Attribute nodes need no visit
        self.visit(root)  # an object's attribute (a tensor's, ctx's): what it is built from is checked

    # -- what runs at import --------------------------------------------------------------------------------
    def check_module_level(self, body: list[ast.stmt], where: str) -> None:
        for i, stmt in enumerate(body):
            if isinstance(stmt, (ast.Import, ast.ImportFrom)) and where == "module":
                continue
            value = stmt.value if isinstance(stmt, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                continue  # a docstring
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self._definition(stmt)
                continue
            if isinstance(stmt, ast.AnnAssign):
                self._annotation(stmt.annotation)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if all(isinstance(t, ast.Name) for t in targets) and self._literal(stmt.value):
                    continue
                self.fail(stmt, f"assigns something other than a literal in the {where} body: code there runs at "
                                "import; compute it inside a function")
                continue
            if isinstance(stmt, ast.Pass):
                continue
            self.fail(stmt, f"runs a statement ({type(stmt).__name__}) in the {where} body: only definitions and "
                            "literal assignments there (it would run at import)")

    def _definition(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            name = self._dotted(target)
            if name not in ALLOWED_DECORATORS:
                self.fail(decorator, f"decorates {node.name} with {ast.unparse(target)}: only "
                                     f"{', '.join(sorted(ALLOWED_DECORATORS))}")
            elif isinstance(decorator, ast.Call) and not all(
                    isinstance(a, ast.Constant) for a in [*decorator.args, *(k.value for k in decorator.keywords)]):
                self.fail(decorator, f"passes a non-constant argument to the decorator of {node.name}")
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                if self._dotted(base) not in {"torch.autograd.Function", "object"}:
                    self.fail(base, f"class {node.name} derives from {ast.unparse(base)}: only "
                                    "torch.autograd.Function")
            if node.keywords:
                self.fail(node, f"class {node.name} passes keywords to its metaclass")
            self.check_module_level(node.body, "class")
        else:
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, *filter(None, [args.vararg, args.kwarg])]:
                if arg.annotation is not None:
                    self._annotation(arg.annotation)
            if node.returns is not None:
                self._annotation(node.returns)
            defaults = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
            for default in defaults:
                if not self._literal(default):
                    self.fail(default, f"gives {node.name} a default argument that is not a literal (it runs at "
                                       "import)")

    _ANNOTATION_NODES = (ast.Constant, ast.Name, ast.Attribute, ast.Subscript, ast.Tuple, ast.List, ast.BinOp,
                         ast.BitOr, ast.Load, ast.Slice)

    def _annotation(self, node: ast.AST) -> None:
        """An annotation of a module- or class-level name or definition: evaluated at import, so only names,
        members and their subscripts (``tl.constexpr``, ``Optional[int]``, ``int | None``), never a call."""
        for part in ast.walk(node):
            if not isinstance(part, self._ANNOTATION_NODES) or (isinstance(part, ast.BinOp)
                                                                 and not isinstance(part.op, ast.BitOr)):
                return self.fail(node, f"annotates with {ast.unparse(node)}: an annotation at module or class "
                                       "level runs at import; name a type there, never compute one")

    def _dotted(self, node: ast.AST) -> str:
        """The full dotted name of a module member, or of a builtin name; '' for anything else."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return ""
        root = self.modules.get(node.id, node.id)
        return ".".join([root, *reversed(parts)])

    def _literal(self, node: ast.AST) -> bool:
        """A constant, a container of literals, a signed number, an allowed module member (``torch.float32``),
        or ``tl.constexpr(<literal>)``."""
        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return all(self._literal(e) for e in node.elts)
        if isinstance(node, ast.Dict):
            return all(k is None or self._literal(k) for k in node.keys) and all(self._literal(v) for v in node.values)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return self._literal(node.operand)
        if isinstance(node, ast.Attribute):
            return _allowed_chain(self._dotted(node)) and self._dotted(node).split(".")[0] in self.modules.values()
        if isinstance(node, ast.Call):
            return (self._dotted(node.func) in {"triton.language.constexpr", "triton.constexpr"}
                    and not node.keywords and all(self._literal(a) for a in node.args))
        return False


def _builtins_named(source: str, tree: ast.AST) -> str:
    """The first name that Python would look up in the builtins (bound nowhere on its way: not in its own scope,
    an enclosing function's or the module's) and that ``ALLOWED_BUILTINS`` does not hold, as a reason; ''."""
    import symtable

    module = symtable.symtable(source, "<variant>", "exec")
    # Bound at module level (the checks above allow only imports, definitions and literal assignments there, and
    # no `global` statement, so nothing else binds or unbinds a module name).
    bound = {s.get_name() for s in module.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    tables = [module]
    for table in tables:  # every scope, nested ones too (the list grows as it is read)
        tables.extend(table.get_children())
        for symbol in table.get_symbols():
            name = symbol.get_name()
            if not symbol.is_referenced() or name in bound or name in ALLOWED_BUILTINS:
                continue
            if table is not module and (symbol.is_local() or symbol.is_free()):
                continue  # its own scope's, or an enclosing function's: no builtin
            line = next((n.lineno for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name
                         and isinstance(n.ctx, ast.Load) and n.lineno >= table.get_lineno()), "?")
            return (f"line {line} uses {name}, which the module does not define: of the builtins a variant may "
                    f"name only {', '.join(sorted(n for n in ALLOWED_BUILTINS if n[0].islower()))} and the "
                    "exceptions it raises")
    return ""


def check_generated_source(source: str, spec: KernelSpec) -> str:
    """'' when ``source`` may run as a variant of ``spec``; otherwise the reason, in one line."""
    try:
        return _check(source, spec)
    except (RecursionError, MemoryError):
        # Python's parser, symtable and these checks all recurse on the tree: a sum of a few hundred terms or a
        # run of thousands of unary minus signs spends their stack (the parser says so with MemoryError).
        return "the module nests expressions too deeply to check: write long sums and chains in steps"


def _check(source: str, spec: KernelSpec) -> str:
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return syntax_error(e)
    except ValueError:  # a lone surrogate (a JSON "\ud800" escape): no file could hold the module as UTF-8
        return "the module is not UTF-8 text (it holds a lone surrogate character)"
    checker = _Checker()
    for node in tree.body:  # the imports first: they bind the module names the rest is checked against
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            checker.visit(node)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and node not in tree.body:
            checker.fail(node, "imports inside a function or class: imports belong at the top of the module")
    if checker.problem:
        return checker.problem
    for node in tree.body:  # the JIT functions, and the places that call or launch them
        if isinstance(node, ast.FunctionDef) and any(
                checker._dotted(d.func if isinstance(d, ast.Call) else d) in JIT_MAKERS
                for d in node.decorator_list):
            checker.kernels.add(node.name)
    for node in [*tree.body, *(n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body)]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            checker.decorators |= {id(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list}
    for node in ast.walk(tree):
        for used in ([node.func] if isinstance(node, ast.Call) else [node.value] if isinstance(node, ast.Subscript)
                     else []):
            if isinstance(used, (ast.Name, ast.Attribute)):
                checker.launches.add(id(used))
    for node in tree.body:  # what the code reaches, then what of it runs at import
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            checker.visit(node)
    checker.check_module_level(tree.body, "module")
    if checker.problem:
        return checker.problem
    problem = _builtins_named(source, tree)
    if problem:
        return problem
    defined = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.add(node.target.id)
    missing = [name for name in spec.interface if name not in defined]
    if missing:
        return (f"the module does not define {', '.join(missing)} "
                f"(the {spec.name} interface: {', '.join(spec.interface)})")
    try:
        # The table too: one the loop cannot read (a bucket "../x", a value off KNOB_CHOICES) was recorded as no
        # change, and once such a module was the best, the rules proposer's read of it stopped every later step.
        read_dispatch(source)
    except UserError as e:
        return str(e)
    return ""
