import types

import torch

from liger_perf.gate.convergence import check_convergence
from liger_perf.kernel.registry import baseline_path, get_spec
from liger_perf.kernel.variants import Variant, load_variant


class _SlightlyWrongGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.relu(x).pow(2)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return 2.2 * torch.relu(x) * dy  # 10% too large: trains differently


def test_convergence_agrees_for_baseline(interpret_device):
    spec = get_spec("relu_squared")
    conv = check_convergence(spec, load_variant(baseline_path("relu_squared"), spec), interpret_device, steps=10)
    assert (conv["verdict"] == "pass").all()
    assert set(conv["dtype"]) == {"float32", "float16"}


def test_convergence_catches_wrong_gradient(interpret_device):
    spec = get_spec("relu_squared")
    module = types.SimpleNamespace(relu_squared=_SlightlyWrongGrad.apply)
    conv = check_convergence(spec, Variant(path=None, source="", module=module), interpret_device, steps=10)
    assert (conv["verdict"] == "FAIL").any()
    assert (conv[conv["step"] == 0]["verdict"] == "pass").all()  # the first loss is computed before any update
