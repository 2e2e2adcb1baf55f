"""Static checks on a generated variant before it may run: it parses, offers the interface, and reaches nothing
outside its own tensors (no file, process, network or environment access; imports from an allow-list).

This is a gate on what the code says, not a sandbox: the variant then still runs only in the trial's own
process, under a time limit, from a file outside the project's sources.
"""

from __future__ import annotations

import ast

from liger_perf.errors import UserError
from liger_perf.spec import KernelSpec
from liger_perf.variants import read_knobs

ALLOWED_IMPORTS = {"torch", "triton", "math", "functools", "itertools", "operator", "typing", "dataclasses",
                   "__future__", "numbers", "enum"}
FORBIDDEN_NAMES = {"open", "exec", "eval", "compile", "__import__", "breakpoint", "input", "globals", "locals",
                   "vars", "memoryview", "setattr", "delattr"}
#: Attribute calls that touch files, processes, the network or the environment, whatever the object.
FORBIDDEN_ATTRIBUTES = {"system", "popen", "environ", "getenv", "putenv", "remove", "unlink",
                        "rmdir", "rename", "write_text", "write_bytes", "read_text", "read_bytes", "mkdir",
                        "makedirs", "chmod", "chown", "symlink", "fork", "spawn", "kill", "urlopen", "socket",
                        "connect", "from_file", "tofile", "fromfile", "cpp_extension", "hub"}
#: Module functions that read or write files (``tl.load`` and ``ctx.save_for_backward`` are fine).
FORBIDDEN_DOTTED = {"torch.load", "torch.save", "torch.from_file", "torch.package", "torch.distributed"}


def _dotted(node: ast.Attribute) -> str:
    parts = [node.attr]
    while isinstance(node.value, ast.Attribute):
        node = node.value
        parts.append(node.attr)
    if isinstance(node.value, ast.Name):
        parts.append(node.value.id)
    return ".".join(reversed(parts))


def check_generated_source(source: str, spec: KernelSpec) -> str:
    """'' when ``source`` may run as a variant of ``spec``; otherwise the reason, in one line."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return f"syntax error at line {e.lineno}: {e.msg}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in ALLOWED_IMPORTS:
                    return f"line {node.lineno} imports {alias.name}: only {', '.join(sorted(ALLOWED_IMPORTS))}"
        elif isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".")[0]
            if node.level or module not in ALLOWED_IMPORTS:
                return (f"line {node.lineno} imports from {node.module or '.'}: only "
                        f"{', '.join(sorted(ALLOWED_IMPORTS))}")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            return f"line {node.lineno} uses {node.id}(): no file, process or dynamic-code access in a variant"
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if any(dotted == f or dotted.startswith(f + ".") for f in FORBIDDEN_DOTTED):
                return f"line {node.lineno} uses {dotted}: no file access in a variant"
            if node.attr in FORBIDDEN_ATTRIBUTES:
                return f"line {node.lineno} uses .{node.attr}: no file, process, network or environment access"
            if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in ("__name__", "__doc__"):
                return f"line {node.lineno} reaches {node.attr}: no introspection of the interpreter"
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
        read_knobs(source)
    except UserError as e:
        return str(e)
    return ""
