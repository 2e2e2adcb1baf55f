"""``liger-perf new``: a kernel folder scaffolded from a PyTorch function, whose baseline passes the gate."""

import importlib.util
import inspect
import io
import math
import re
import sys
import textwrap
from pathlib import Path

import numpy
import pytest
import torch

from liger_perf.gate.correctness import check_variant
from liger_perf.core.errors import UserError
from liger_perf.scaffold import parse_dtypes, parse_shapes, scaffold_kernel
from liger_perf.kernel.spec import KernelSpec
from liger_perf.kernel.variants import load_variant, read_knobs, with_knobs
from liger_perf.propose.safety import check_generated_source

REFERENCES = '''
import math

import torch
import torch.nn.functional as F

SCALE = 2.0


def silu_sq(x):
    return torch.nn.functional.silu(x) ** 2


def gated(x, g):
    return x * torch.sigmoid(g)


def leaky(x, slope=0.2):
    return F.leaky_relu(x, slope)


def log_sqrt(x):
    return torch.log(x) * torch.sqrt(x)


def softmax(x):
    return torch.softmax(x, dim=-1)


def row_sum(x, scale=2.0):
    return x.sum(-1) * scale


def arctan(x):
    return torch.atan(x) * 2


def masked_scale(x, mask, offsets):
    return x * mask * 2.0 + offsets


def hidden(_x):
    return _x * 2


def scaled(x):
    return x * SCALE


def helper(x):
    return x


def calls_helper(x):
    return helper(x) + math.pi


def times_width(x):
    return x * x.shape[-1]


def jittered(x):
    return torch.relu(x) * (1 + 0.1 * torch.rand(()))


def jittered_rows(x):
    return torch.relu(x)[: 2 + int(torch.randint(0, 2, ()))]
'''

SOFTMAX_KERNEL = '''
"""Row softmax: one program per row, the whole row in one block."""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_forward(Y, X, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * n_cols + cols, (e / tl.sum(e, axis=0)).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_backward(DX, DY, Y, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    y = tl.load(Y + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(DY + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    dx = y * (dy - tl.sum(y * dy, axis=0))
    tl.store(DX + row * n_cols + cols, dx.to(DX.dtype.element_ty), mask=mask)


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        y = torch.empty_like(rows)
        _softmax_forward[(rows.shape[0],)](y, rows, rows.shape[1], BLOCK=triton.next_power_of_2(rows.shape[1]))
        ctx.save_for_backward(y)
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        rows = dy.reshape(-1, y.shape[1]).contiguous()
        dx = torch.empty_like(y)
        _softmax_backward[(y.shape[0],)](dx, rows, y, y.shape[1], BLOCK=triton.next_power_of_2(y.shape[1]))
        return dx.view(dy.shape)


def my_softmax(x):
    return _Softmax.apply(x)
'''


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """The current directory holds the reference module (named after the test, as modules are cached by name);
    kernels are scaffolded into ``kernels/``."""
    module = "scaffold_refs_" + "".join(c if c.isalnum() else "_" for c in tmp_path.name)
    (tmp_path / f"{module}.py").write_text(REFERENCES)
    (tmp_path / "my_softmax.py").write_text(SOFTMAX_KERNEL)
    monkeypatch.chdir(tmp_path)
    yield tmp_path / "kernels", module
    sys.modules.pop(module, None)


def load_spec(folder: Path) -> KernelSpec:
    """The folder's KernelSpec, imported by path as the registry imports it."""
    module_name = f"scaffold_test_spec_{folder.name}_{id(folder)}"
    loader = importlib.util.spec_from_file_location(module_name, folder / "spec.py")
    module = importlib.util.module_from_spec(loader)
    sys.modules[module_name] = module
    loader.loader.exec_module(module)
    (cls,) = [c for _, c in inspect.getmembers(module, inspect.isclass)
              if issubclass(c, KernelSpec) and c is not KernelSpec and c.__module__ == module_name]
    return cls()


def pyflakes_messages(path: Path) -> str:
    api = pytest.importorskip("pyflakes.api")
    from pyflakes.reporter import Reporter

    out = io.StringIO()
    api.check(path.read_text(), str(path), Reporter(out, out))
    return out.getvalue()


def assert_one_line_error(call, *fragments):
    with pytest.raises(UserError) as raised:
        call()
    message = str(raised.value)
    assert "\n" not in message and message
    for fragment in fragments:
        assert fragment in message, message
    return message


# -- the parsers the command line uses -----------------------------------------------------------------------------

def test_parsers_read_shapes_and_dtypes_and_refuse_in_one_line():
    assert parse_shapes("4096x4096,8192x8192") == [(4096, 4096), (8192, 8192)]
    assert parse_shapes(" 8x128x64 ") == [(8, 128, 64)]
    assert parse_dtypes("float32,bf16,fp16,float32") == ["float32", "bfloat16", "float16"]
    for bad in ("4096x", "axb", "", "4096x0", "-1x4"):
        assert_one_line_error(lambda: parse_shapes(bad), "--shapes")
    assert_one_line_error(lambda: parse_shapes("4096x4096,4096"), "mixes ranks")
    # a size no GPU could hold is refused here, not as an out-of-memory error in the first check on the GPU
    assert_one_line_error(lambda: parse_shapes("1000000000x1000000000"), "more than any GPU holds")
    assert parse_shapes("65536x1048576") == [(65536, 1048576)]  # 2**36 elements: the largest allowed
    assert_one_line_error(lambda: parse_dtypes("float32,float64"), "float64", "choose among")


# -- elementwise references: a generated Triton baseline ------------------------------------------------------------

@pytest.mark.parametrize("function, inputs", [("silu_sq", ("x",)), ("gated", ("x", "g"))])
def test_elementwise_reference_gets_a_triton_baseline_that_passes_the_gate(workspace, interpret_device, function,
                                                                           inputs):
    kernels, module = workspace
    paths = scaffold_kernel(kernels, function, f"{module}:{function}")
    folder = kernels / function
    assert paths == [folder / "spec.py", folder / "baseline.py"]
    for path in paths:
        assert pyflakes_messages(path) == ""
    spec = load_spec(folder)
    assert spec.name == function and spec.interface == (function, "KNOBS", "KNOB_CHOICES")
    assert spec.differentiable == inputs and spec.outputs == ("Y",)
    assert spec.check_configs == ({},) and spec.remedies == {}
    assert spec.rows_independent  # elementwise: the large case may take its reference by pieces of rows
    assert spec.min_bytes("forward", (4, 8), torch.float32) == 4 * 32 * (len(inputs) + 1)
    assert spec.min_bytes("backward", (4, 8), torch.bfloat16) == 2 * 32 * (2 * len(inputs) + 1)
    assert f"def {function}(" in spec.math  # the math is the reference's source
    source = (folder / "baseline.py").read_text()
    knobs, choices = read_knobs(source)
    assert set(knobs) == {"BLOCK_SIZE", "num_warps", "bwd_BLOCK_SIZE", "bwd_num_warps"}
    assert all(knobs[k] in choices[k] for k in knobs)
    assert "tl.program_id(0).to(tl.int64)" in source  # 64-bit offsets
    # The LLM proposer's variants start from it: the static check they meet takes the scaffold's own code.
    assert check_generated_source(source, spec) == ""
    variant = load_variant(folder / "baseline.py", spec)
    result = check_variant(spec, variant, interpret_device, convergence=True)
    assert result.passed, result.failures()[["case", "output", "against", "reason"]].head().to_string()
    assert not result.convergence.empty
    # The loop's knob moves give variants that still work.
    moved = folder / "moved.py"
    moved.write_text(with_knobs(source, {"BLOCK_SIZE": 256, "bwd_num_warps": 8}))
    quick = check_variant(spec, load_variant(moved, spec), interpret_device, stage="quick")
    assert quick.passed


def test_parameters_named_like_the_kernel_s_own_variables_still_work(workspace, interpret_device):
    """``mask`` and ``offsets`` are realistic input names; the generated kernels' own names start with "_"."""
    kernels, module = workspace
    scaffold_kernel(kernels, "masked_scale", f"{module}:masked_scale")
    spec = load_spec(kernels / "masked_scale")
    result = check_variant(spec, load_variant(kernels / "masked_scale" / "baseline.py", spec), interpret_device,
                           stage="quick")
    assert result.passed, result.failures()[["case", "output", "against", "reason"]].head().to_string()
    assert_one_line_error(lambda: scaffold_kernel(kernels, "hidden", f"{module}:hidden"), "_x", "rename it")


def test_options_stay_at_their_defaults(workspace):
    kernels, module = workspace
    scaffold_kernel(kernels, "leaky", f"{module}:leaky")
    spec = load_spec(kernels / "leaky")
    variant = load_variant(kernels / "leaky" / "baseline.py", spec).module
    x = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(variant.leaky(x), torch.nn.functional.leaky_relu(x, 0.2), rtol=0, atol=0)
    torch.testing.assert_close(variant.leaky(x, slope=0.2), variant.leaky(x), rtol=0, atol=0)
    with pytest.raises(ValueError, match="slope"):
        variant.leaky(x, slope=0.1)
    assert spec.check_configs == ({},)


def test_a_function_undefined_for_negative_inputs_draws_positive_ones(workspace):
    kernels, module = workspace
    scaffold_kernel(kernels, "log_sqrt", f"{module}:log_sqrt")
    spec = load_spec(kernels / "log_sqrt")
    inputs = spec.make_inputs((64, 64), torch.float16, torch.device("cpu"), torch.Generator().manual_seed(0))
    assert bool((inputs["x"] > 0).all())
    model, data, _ = spec.convergence_model(spec.reference_forward(), {}, torch.Generator().manual_seed(0),
                                            torch.device("cpu"), torch.float32)
    assert bool(torch.isfinite(model(data[0])).all())


def test_a_scaffolded_spec_draws_unseeded_inputs_on_the_device_and_seeded_ones_on_the_cpu(workspace, monkeypatch):
    from test_spec import _draws_where

    kernels, module = workspace
    target = torch.device("meta")  # stands for the GPU
    for name in ("leaky", "log_sqrt"):  # drawn by randn, and by rand (a function of positive inputs)
        scaffold_kernel(kernels, name, f"{module}:{name}")
        spec = load_spec(kernels / name)
        asked = _draws_where(monkeypatch)
        assert all(t.device == target for t in spec.make_inputs((4, 8), torch.float32, target).values())
        assert asked and set(asked) == {target}, name
        asked.clear()
        spec.make_inputs((4, 8), torch.float32, target, torch.Generator().manual_seed(0))
        assert asked and set(asked) == {torch.device("cpu")}, name
        monkeypatch.undo()


#: One op per entry, each on inputs of its own (``a``, and ``b`` for a second operand), so that every output and
#: every gradient belongs to one op. ``exempt``: input values of ``a`` where PyTorch's CPU kernels, which the
#: interpreter is compared with, give NaN or a zero gradient where PyTorch's CUDA kernels and its own decompositions
#: do not (their vectorised paths): gelu's forward at +inf, and the gradients of elu, hardtanh and hardswish at NaN.
#: On an H200 the generated kernels agree with PyTorch's CUDA results at every one of these values.
TABLE = [
    ("torch.exp(a)", {}), ("torch.log(a)", {}), ("torch.sigmoid(a)", {}), ("torch.tanh(a)", {}),
    ("torch.relu(a)", {}), ("torch.where(a > 0.5, a, 2.0 * a)", {}), ("a ** 3", {}), ("a ** 2.5", {}),
    ("a ** 11", {}), ("torch.sqrt(a)", {}), ("torch.rsqrt(a)", {}), ("torch.abs(a)", {}),
    ("torch.maximum(a, b)", {}), ("torch.minimum(a, b)", {}), ("torch.clamp(a, -1.0, 2.0)", {}),
    ("torch.sign(a) * a", {}), ("torch.erf(a)", {}), ("F.silu(a)", {}), ("F.gelu(a)", {"forward": [math.inf]}),
    ("F.gelu(a, approximate='tanh')", {}), ("F.softplus(a)", {}), ("F.elu(a)", {"backward": [math.nan]}),
    ("F.leaky_relu(a, 0.1)", {}), ("F.hardtanh(a)", {"backward": [math.nan]}), ("F.hardsigmoid(a)", {}),
    ("F.hardswish(a)", {"backward": [math.nan]}), ("F.relu6(a)", {"backward": [math.nan]}),
    ("a / (1.0 + b * b)", {}), ("-a + 3.0 - b", {}), ("torch.log1p(a * a)", {}), ("torch.expm1(a)", {}),
    ("torch.clamp_min(a, 0.25)", {}), ("(a > 0).float() * a + torch.zeros_like(a) + torch.full_like(a, 2.0)", {}),
    ("a.masked_fill(a < -1, 0.5)", {}), ("a ** -1 + a ** 0.5 + a ** -2 + a ** 0", {}),
    ("torch.reciprocal(a) + math.pi", {}), ("torch.sin(a) * torch.cos(a)", {}),
    ("torch.log2(a * a + 1) + torch.exp2(a)", {}), ("F.threshold(a, 0.1, 20.0)", {}),
    ("torch.where(torch.isnan(a) | torch.isinf(b), 1.0, a * b)", {}), ("a.half().float() * 3", {}),
    ("torch.addcmul(a, a, b, value=0.5)", {}), ("2.0 ** a + torch.square(b)", {}),
]
SPECIAL = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-30, -1e-30, 1e-3, -1e-3, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0,
           3.0, -3.0, 6.0, -6.0, 20.0, -20.0, 25.0, -25.0, 88.0, -88.0, 100.0, -100.0, 1e30, -1e30, 0.1, 0.25, -1.5,
           7.3, -0.7, 6e4, -7e4]


def _rename(expr: str, k: int) -> str:
    """``a`` and ``b`` as variables (not inside names like ``abs``) renamed ``a<k>``, ``b<k>``."""
    return re.sub(r"(?<![\w.])([ab])(?!\w)", rf"\g<1>{k}", expr)


def _operands(expr: str) -> list[str]:
    return sorted(set(re.findall(r"(?<![\w.])([ab])(?!\w)", expr)))


def write_table_reference(folder: Path, module: str) -> None:
    """``module.py`` in ``folder`` with ``table``: every op of ``TABLE`` on inputs of its own, one output each."""
    params, results = [], []
    for k, (expr, _) in enumerate(TABLE):
        params += [f"{n}{k}" for n in _operands(expr)]
        results.append(_rename(expr, k))
    (folder / f"{module}.py").write_text(
        "import math\n\nimport torch\nimport torch.nn.functional as F\n\n\n"
        f"def table({', '.join(params)}):\n    return (\n        " + ",\n        ".join(results) + ",\n    )\n")


def table_mismatches(spec: KernelSpec, variant, device: torch.device, exemptions: bool = True) -> list[str]:
    """Where the generated kernels' outputs or gradients differ from PyTorch's (on ``device``): beyond 1e-6 +
    1e-5 * |expected|, or a NaN or an infinity where PyTorch has none (or the reverse)."""
    values = torch.tensor(SPECIAL, device=device)
    # Each op's ``a`` meets every special value; its ``b`` meets them in another order.
    inputs = {name: (values if name.startswith("a") else values.roll(7)) for name in spec.differentiable}
    cotangents = [torch.linspace(-2.0, 2.0, len(SPECIAL), device=device) for _ in TABLE]

    def run(forward):
        leaves = {k: v.clone().requires_grad_() for k, v in inputs.items()}
        with numpy.errstate(all="ignore"):
            outputs = forward(leaves, {})
            grads = torch.autograd.grad(outputs, list(leaves.values()), cotangents)
        return outputs, dict(zip(spec.differentiable, grads))

    got, got_grads = run(spec.variant_forward(variant))
    want, want_grads = run(spec.reference)
    problems = []
    for k, (expr, exempt) in enumerate(TABLE):
        checks = [("forward", got[k], want[k])]
        checks += [("backward", got_grads[f"{n}{k}"], want_grads[f"{n}{k}"]) for n in _operands(expr)]
        for what, a, b in checks:
            a, b = a.detach().double().cpu(), b.detach().double().cpu()
            same = (torch.isnan(a) & torch.isnan(b)) | (a == b) | (
                torch.isfinite(a) & torch.isfinite(b) & ((a - b).abs() <= 1e-6 + 1e-5 * b.abs()))
            skipped = torch.tensor([exemptions and any(v == x or (math.isnan(v) and math.isnan(x))
                                                       for x in exempt.get(what, ())) for v in SPECIAL])
            for i in (~same & ~skipped).nonzero().flatten().tolist():
                problems.append(f"{expr} {what} at a={SPECIAL[i]}: {float(a[i])} vs PyTorch {float(b[i])}")
    return problems


def test_translated_ops_agree_with_pytorch_on_special_values(tmp_path, monkeypatch):
    write_table_reference(tmp_path, "scaffold_table_refs")
    monkeypatch.chdir(tmp_path)
    try:
        scaffold_kernel(tmp_path / "kernels", "table", "scaffold_table_refs:table")
    finally:
        sys.modules.pop("scaffold_table_refs", None)
    folder = tmp_path / "kernels" / "table"
    assert pyflakes_messages(folder / "baseline.py") == ""
    spec = load_spec(folder)
    variant = load_variant(folder / "baseline.py", spec).module
    problems = table_mismatches(spec, variant, torch.device("cpu"))
    assert not problems, "\n".join(problems)


# -- references that are not elementwise, and --baseline ------------------------------------------------------------

def test_a_reference_that_is_not_elementwise_needs_a_baseline(workspace):
    kernels, module = workspace
    assert_one_line_error(lambda: scaffold_kernel(kernels, "softmax", f"{module}:softmax"),
                          "not elementwise", "--baseline")
    assert not (kernels / "softmax").exists()


def test_a_user_kernel_is_wrapped_and_passes_the_gate(workspace, interpret_device):
    kernels, module = workspace
    scaffold_kernel(kernels, "softmax", f"{module}:softmax", baseline=Path("my_softmax.py"), entry="my_softmax")
    folder = kernels / "softmax"
    assert pyflakes_messages(folder / "spec.py") == ""
    source = (folder / "baseline.py").read_text()
    assert SOFTMAX_KERNEL.strip() in source
    assert read_knobs(source) == ({}, {})
    spec = load_spec(folder)
    # Not elementwise: the spec leaves rows_independent to the user, and says what it buys.
    assert not spec.rows_independent and "# rows_independent = True" in (folder / "spec.py").read_text()
    variant = load_variant(folder / "baseline.py", spec)
    result = check_variant(spec, variant, interpret_device, convergence=True)
    assert result.passed, result.failures()[["case", "output", "against", "reason"]].head().to_string()


def test_outputs_of_another_shape_are_sized_on_the_meta_device(workspace, interpret_device):
    kernels, module = workspace
    (kernels.parent / "my_sum.py").write_text(
        "def my_sum(x, scale):\n    return (x.float().sum(-1) * scale).to(x.dtype)\n")
    scaffold_kernel(kernels, "row_sum", f"{module}:row_sum", baseline=Path("my_sum.py"), entry="my_sum")
    folder = kernels / "row_sum"
    assert pyflakes_messages(folder / "spec.py") == ""
    spec = load_spec(folder)
    # forward: read 4x8, write 4; backward: read 4x8 and 4, write 4x8 (float32)
    assert spec.min_bytes("forward", (4, 8), torch.float32) == 4 * (32 + 4)
    assert spec.min_bytes("backward", (4, 8), torch.float32) == 4 * (64 + 4)
    # Every check shape, the one-row ones included (their gradient of one element, padded, has stride 2).
    result = check_variant(spec, load_variant(folder / "baseline.py", spec), interpret_device)
    assert result.passed, result.failures()[["case", "output", "against", "reason"]].head().to_string()


# -- what is refused, in one line ---------------------------------------------------------------------------------

def test_an_op_without_a_translation_is_refused(workspace):
    kernels, module = workspace
    assert_one_line_error(lambda: scaffold_kernel(kernels, "arctan", f"{module}:arctan"),
                          "aten.atan", "--baseline")
    assert not (kernels / "arctan").exists()


def test_module_globals_other_than_torch_math_and_f_are_refused(workspace):
    kernels, module = workspace
    assert_one_line_error(lambda: scaffold_kernel(kernels, "scaled", f"{module}:scaled"), "SCALE", "inline")
    assert_one_line_error(lambda: scaffold_kernel(kernels, "calls_helper", f"{module}:calls_helper"), "helper")


def test_an_existing_folder_is_refused_without_force(workspace):
    kernels, module = workspace
    (kernels / "gated").mkdir(parents=True)
    (kernels / "gated" / "spec.py").write_text("# someone's work\n")
    assert_one_line_error(lambda: scaffold_kernel(kernels, "gated", f"{module}:gated"), "exists", "--force")
    assert (kernels / "gated" / "spec.py").read_text() == "# someone's work\n"
    scaffold_kernel(kernels, "gated", f"{module}:gated", force=True)
    assert "class GatedSpec" in (kernels / "gated" / "spec.py").read_text()


def test_bad_inputs_are_one_line_errors(workspace):
    kernels, module = workspace

    def new(name="k", reference=f"{module}:gated", **kw):
        return lambda: scaffold_kernel(kernels, name, reference, **kw)

    assert_one_line_error(new(name="9lives"), "identifier")
    assert_one_line_error(new(name="my-kernel"), "identifier")
    assert_one_line_error(new(reference="no_such_module_here:f"), "no module")
    assert_one_line_error(new(reference=f"{module}:nope"), "no function nope")
    assert_one_line_error(new(reference=module), "module:function")
    assert_one_line_error(new(reference=f"../{module}:gated"), "is no module name", "without .py or a path")
    assert_one_line_error(new(reference=f"{module}.py:gated"), "without .py", f"{module}:gated")
    assert_one_line_error(new(reference=f"{module}:times_width"), "depend on the input shape")
    # It was refused as "not elementwise", which it is; what the gate cannot use is an answer that changes.
    assert_one_line_error(new(reference=f"{module}:jittered"), "other outputs for the same inputs", "deterministic")
    torch.manual_seed(1)  # its first two calls differ in their rows (the comparison raised where shapes differ)
    assert_one_line_error(new(reference=f"{module}:jittered_rows"), "other outputs for the same inputs")
    assert_one_line_error(new(dtypes=["float64"]), "float64")
    assert_one_line_error(new(shapes=[(4096, 0)]), "positive")
    assert_one_line_error(new(baseline=Path("my_softmax.py")), "--entry")
    assert_one_line_error(new(reference=f"{module}:softmax", baseline=Path("my_softmax.py"), entry="nope"),
                          "defines no nope")
    assert_one_line_error(new(reference=f"{module}:softmax", baseline=Path("missing.py"), entry="f"),
                          "no such file")
    (kernels.parent / "imports_local.py").write_text(textwrap.dedent("""
        import my_local_helpers_that_do_not_exist


        def f(x):
            return x
    """))
    assert_one_line_error(new(reference=f"{module}:softmax", baseline=Path("imports_local.py"), entry="f"),
                          "not installed")
    assert not kernels.exists()
