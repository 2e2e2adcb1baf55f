"""The translation of an elementwise function's ATen graphs (forward and vector-Jacobian product, traced with
``make_fx``) into ``tl`` expressions computed in float32."""


import keyword
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

import torch

from liger_perf.core.errors import UserError
from liger_perf.scaffold.reference import (PROBE_SHAPE, SECOND_PROBE_SHAPE, Probe, Reference, _draw, _one_line,
                                         _same)


def _pointer(name: str) -> str:
    """A tensor's pointer argument in a kernel: ``_<name>_ptr`` (never a parameter's name, nor a local's)."""
    return f"_{name}_ptr"



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


