"""The generated files: ``spec.py`` and ``baseline.py`` (a translated kernel, or the user's own wrapped with the
interface the spec calls)."""


import ast
import importlib
import importlib.util
import textwrap
from pathlib import Path


from liger_perf.core.errors import UserError, syntax_error
from liger_perf.scaffold.reference import INTERPRET_DTYPES, Probe, Reference
from liger_perf.scaffold.translate import HELPERS, _Kernel, _literal, _Names, _pointer


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
    draw = ("(torch.rand(*shape, generator=generator, device=where) * 2 + 0.1)" if positive
            else "torch.randn(*shape, generator=generator, device=where)")
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
        # The large case takes a reference by pieces of rows only where the spec says its rows are independent
        # (its whole reference needs about 24 inputs' GPU memory, more than an 80 GB GPU has at 4 GiB an input).
        ("    rows_independent = True  # elementwise, probed at scaffolding (the gate checks it again)" if elementwise
         else "    # rows_independent = True  # if each output row depends on its own rows alone (the gate checks "
              "it): the large case then needs about 14 inputs' GPU memory, not 24"),
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
        "        # Seeded (the gate, accuracy): drawn in float32 on the CPU, so that a seed gives the same values on",
        "        # every device. Unseeded (timing, profiles): drawn on the device, not in the CPU's one thread.",
        '        where = "cpu" if generator is not None else device',
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
    from liger_perf.kernel.variants import read_knobs

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
        raise UserError(f"--baseline {path} has {syntax_error(e)}") from None
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


