"""The baselines' answer to input their kernels would read wrongly: one clear line, never a wrong result.

Under the interpreter: the checks run on the host before any launch, so they are the same on the GPU."""

import pytest
import torch

from liger_perf.kernel.registry import baseline_path, get_spec
from liger_perf.kernel.variants import load_variant


def _baseline(kernel):
    return getattr(load_variant(baseline_path(kernel), get_spec(kernel)).module, kernel)


def _inputs(rows=3, cols=8, dtype=torch.float32):
    generator = torch.Generator().manual_seed(0)
    X = torch.randn(rows, cols, generator=generator, dtype=dtype)
    R = torch.randn(rows, cols, generator=generator, dtype=dtype)
    W = torch.randn(cols, generator=generator, dtype=dtype)
    return X, R, W


@pytest.mark.parametrize("change, error, words", [
    (lambda X, R, W: (X, R, W[:-1]), ValueError, "W must have shape (8,)"),
    (lambda X, R, W: (X, R, torch.randn(2, 8)), ValueError, "W must have shape (8,)"),
    (lambda X, R, W: (X, R[:, :-1], W), ValueError, "R must have X's shape (3, 8)"),
    (lambda X, R, W: (X, R[:1], W), ValueError, "R must have X's shape (3, 8)"),
    (lambda X, R, W: (X, R.half(), W), TypeError, "R must have X's dtype"),
    (lambda X, R, W: (X.double(), R.double(), W), TypeError, "float32, bfloat16 or float16, got torch.float64"),
    (lambda X, R, W: (X.int(), R.int(), W), TypeError, "float32, bfloat16 or float16, got torch.int32"),
    (lambda X, R, W: (X, R, W.int()), TypeError, "W must be a floating-point tensor"),
    (lambda X, R, W: (X, R, W.tolist()), TypeError, "W must be a tensor"),
    (lambda X, R, W: (X[:, :0], R[:, :0], W[:0]), ValueError, "needs one of size >= 1"),
    (lambda X, R, W: (X, R, W.to("meta")), ValueError, "must be on one device"),
])
def test_fused_refuses_input_its_kernels_would_read_wrongly(change, error, words, interpret_device):
    with pytest.raises(error) as raised:
        _baseline("fused_add_rms_norm")(*change(*_inputs()))
    assert words in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("name, value", [("eps", torch.tensor(1e-6)), ("offset", "1"), ("eps", True)])
def test_fused_takes_eps_and_offset_as_python_numbers(name, value, interpret_device):
    with pytest.raises(TypeError, match=f"{name} must be a Python number"):
        _baseline("fused_add_rms_norm")(*_inputs(), **{name: value})


def test_fused_takes_what_models_pass(interpret_device):
    # A weight in another float dtype (float32 master weights), batch dimensions, an integer eps.
    X, R, W = _inputs(dtype=torch.float16)  # float16: this kernel's bfloat16 under Triton 3.9's interpreter is NaN
    Y, S = _baseline("fused_add_rms_norm")(X.view(1, 3, 8), R.view(1, 3, 8), W.float(), eps=1, offset=0)
    torch.testing.assert_close(S, (X + R).view(1, 3, 8))
    assert Y.shape == (1, 3, 8) and Y.dtype == torch.float16


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.bool])
def test_relu_squared_refuses_what_float32_arithmetic_would_round(dtype, interpret_device):
    with pytest.raises(TypeError, match=f"float32, bfloat16 or float16, got {dtype}"):
        _baseline("relu_squared")(torch.ones(4, dtype=dtype))


@pytest.mark.parametrize("kernel", ["fused_add_rms_norm", "relu_squared"])
def test_a_second_derivative_raises_instead_of_reading_zero(kernel, interpret_device):
    X, R, W = (t.requires_grad_() for t in _inputs())
    out = _baseline(kernel)(X, R, W)[0] if kernel == "fused_add_rms_norm" else _baseline(kernel)(X)
    (dX,) = torch.autograd.grad(out.sum(), X, retain_graph=True)  # once is fine
    assert dX.shape == X.shape
    with pytest.raises(RuntimeError, match=f"{kernel} is differentiable once"):
        torch.autograd.grad((out * out).sum(), X, create_graph=True)


def test_the_outputs_take_an_in_place_update_as_pytorch_s_do(interpret_device):
    # Y and S were views of tensors made in the forward, and autograd refused `Y.mul_(2)` on them.
    X, R, W = (t.requires_grad_() for t in _inputs())
    Y, S = _baseline("fused_add_rms_norm")(X.view(1, 3, 8), R.view(1, 3, 8), W)
    Y.mul_(2)
    (Y.sum() + S.sum()).backward()
    S64 = (X + R).double().detach()
    reference = 2 * S64 * torch.rsqrt(S64.pow(2).mean(-1, keepdim=True) + 1e-6)  # d(sum Y)/dW, doubled
    torch.testing.assert_close(W.grad.double(), reference.sum(0), rtol=1e-4, atol=1e-4)


def test_a_changed_s_meets_autograd_s_own_error(interpret_device):
    # The backward reads S: changed in place before it, autograd must say so in its own words (the forward saved
    # a view made with grad off, and autograd blamed that view instead).
    X, R, W = (t.requires_grad_() for t in _inputs())
    Y, S = _baseline("fused_add_rms_norm")(X, R, W)
    S.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        Y.sum().backward()


@pytest.mark.parametrize("kernel", ["fused_add_rms_norm", "relu_squared"])
def test_meta_tensors_get_one_line(kernel, interpret_device):
    X, R, W = (t.to("meta") for t in _inputs())
    with pytest.raises(ValueError, match="X is on the meta device"):
        _baseline(kernel)(X, R, W) if kernel == "fused_add_rms_norm" else _baseline(kernel)(X)


def test_relu_squared_gradient_is_zero_where_x_is_not_positive_whatever_dy_holds(interpret_device):
    X = torch.tensor([-3.0, -0.0, 0.0, 2.0, float("nan")], requires_grad=True)
    dY = torch.tensor([float("inf"), float("nan"), float("-inf"), 1.0, 1.0])
    _baseline("relu_squared")(X).backward(dY)
    X_ref = X.detach().clone().requires_grad_()
    torch.relu(X_ref).pow(2).backward(dY)
    torch.testing.assert_close(X.grad, X_ref.grad, equal_nan=True)
    assert X.grad[:3].eq(0).all() and not X.grad[:3].signbit().any()
