"""ReLU squared, variant zero (the baseline).

Math, elementwise:

    Y  = relu(X)^2
    dX = 2 * relu(X) * dY

Special values as PyTorch: NaN propagates (relu(NaN) = NaN), relu(+inf)^2 = +inf, and dX is 0 wherever X <= 0,
whatever dY holds (inf included).

Casting: each element is computed in float32 and rounded once to X's dtype, which is what PyTorch's
``torch.relu(x).pow(2)`` and its autograd do in bfloat16 and float16 too. The forward saves X (not Y)
for the backward. Both passes are one flat elementwise kernel over the contiguous tensor.
"""

import torch
import triton
import triton.language as tl

KNOBS = {
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
}


@triton.jit
def _relu(x):
    # As torch.relu: NaN stays NaN (tl.maximum(x, 0.0) would return 0 for it, on the GPU and the interpreter).
    return tl.where(x < 0.0, 0.0, x)


@triton.jit
def _forward_kernel(Y, X, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
    r = _relu(x)
    tl.store(Y + offsets, (r * r).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _backward_kernel(DX, DY, X, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(DY + offsets, mask=mask, other=0.0).to(tl.float32)
    # Zero wherever x <= 0, as PyTorch's relu backward masks it: 2 * 0 * dy would be NaN for an infinite dy.
    dx = tl.where(x <= 0.0, 0.0, 2.0 * x * dy)
    tl.store(DX + offsets, dx.to(DX.dtype.element_ty), mask=mask)


def _launch_settings():
    block, warps = KNOBS["BLOCK_SIZE"], KNOBS["num_warps"]
    bwd_block = block if KNOBS["bwd_BLOCK_SIZE"] == "same" else KNOBS["bwd_BLOCK_SIZE"]
    bwd_warps = warps if KNOBS["bwd_num_warps"] == "same" else KNOBS["bwd_num_warps"]
    return {"BLOCK_SIZE": block, "num_warps": warps, "bwd_BLOCK_SIZE": bwd_block, "bwd_num_warps": bwd_warps}


def _refuse_double_backward():
    # Autograd enables grad mode in a backward only under create_graph=True. These kernels are no autograd graph,
    # so a second derivative through them would be silently zero: refuse it.
    if torch.is_grad_enabled():
        raise RuntimeError("relu_squared is differentiable once: its backward cannot run with create_graph=True")


class ReluSquaredFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X):
        if not isinstance(X, torch.Tensor):
            raise TypeError(f"relu_squared takes a tensor, got {X!r:.60}")
        if X.device.type == "meta":
            raise ValueError("relu_squared runs its kernels on data: X is on the meta device (move it to the GPU)")
        if X.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            # float64 would be rounded through float32 and integers truncated: refuse them rather than answer wrongly
            raise TypeError(f"relu_squared takes float32, bfloat16 or float16, got {X.dtype}")
        X = X.contiguous()
        Y = torch.empty_like(X)
        n = X.numel()
        settings = _launch_settings()
        _forward_kernel[(triton.cdiv(n, settings["BLOCK_SIZE"]),)](
            Y, X, n, BLOCK_SIZE=settings["BLOCK_SIZE"], num_warps=settings["num_warps"])
        ctx.save_for_backward(X)
        ctx.settings = settings
        return Y

    @staticmethod
    def backward(ctx, dY):
        _refuse_double_backward()
        (X,) = ctx.saved_tensors
        dY = dY.contiguous()
        dX = torch.empty_like(X)
        n = X.numel()
        settings = ctx.settings
        _backward_kernel[(triton.cdiv(n, settings["bwd_BLOCK_SIZE"]),)](
            dX, dY, X, n, BLOCK_SIZE=settings["bwd_BLOCK_SIZE"], num_warps=settings["bwd_num_warps"])
        return dX


def relu_squared(X):
    """Returns ``relu(X) ** 2`` (see the module docstring)."""
    return ReluSquaredFunction.apply(X)
