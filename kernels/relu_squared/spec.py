"""Spec of ``relu_squared``: Y = relu(X)^2, elementwise; dX = 2 * relu(X) * dY."""

from __future__ import annotations

import math

import torch
from torch import nn

from liger_perf.spec import KernelSpec, Remedy, Tolerance, Tolerances


class ReluSquaredSpec(KernelSpec):
    name = "relu_squared"
    math = "Y = relu(X)^2 elementwise; dX = 2 * relu(X) * dY. Computed in float32, rounded once to X's dtype."
    interface = ("relu_squared", "KNOBS", "KNOB_CHOICES")
    differentiable = ("X",)
    outputs = ("Y",)
    rows_independent = True  # elementwise
    #: An MLP activation spans the model's intermediate width (``--suite models``).
    model_widths = "intermediate"
    suites = {
        # Up to 256 Mi elements: (rows, hidden) of an MLP activation.
        "gpu": [(4096, 4096), (8192, 8192), (16384, 16384)],
        "interpret": [(8, 300), (64, 64)],
    }
    check_shapes = {
        "gpu": [(1, 1), (1, 1000), (37, 4099), (4096, 8191)],
        "interpret": [(1, 1), (1, 37), (13, 257)],
    }
    remedies = {
        "forward": {
            "memory_latency": [Remedy({"BLOCK_SIZE": 4096}, "more elements per program keep more loads in flight",
                                      "forward faster where DRAM is under-used")],
            "low_achieved_occupancy": [Remedy({"BLOCK_SIZE": 4096, "num_warps": 8}, "bigger programs, fewer of "
                                              "them: less scheduling overhead per byte", "forward a few % faster")],
            "explore": [Remedy({"BLOCK_SIZE": 4096}, "more work per program", "forward a few % faster"),
                        Remedy({"num_warps": 8}, "more warps per program", "forward a few % faster")],
        },
        "backward": {
            "memory_latency": [Remedy({"bwd_BLOCK_SIZE": 4096}, "more elements per program keep more loads in "
                                      "flight", "backward faster where DRAM is under-used")],
            "low_achieved_occupancy": [Remedy({"bwd_BLOCK_SIZE": 4096, "bwd_num_warps": 8}, "bigger programs, "
                                              "fewer of them", "backward a few % faster")],
            "explore": [Remedy({"bwd_BLOCK_SIZE": 4096}, "more work per program", "backward a few % faster"),
                        Remedy({"bwd_num_warps": 8}, "more warps per program", "backward a few % faster")],
        },
    }
    tolerances = {
        torch.float32: Tolerances(
            same_dtype=Tolerance(atol=1e-6, rtol=1e-6, norm=1e-6),
            float64=Tolerance(atol=1e-5, rtol=1e-5, norm=1e-6),
            convergence=1e-4,
        ),
        torch.float16: Tolerances(
            same_dtype=Tolerance(atol=1e-3, rtol=2e-3, norm=5e-4),
            float64=Tolerance(atol=1e-2, rtol=1e-2, norm=2e-3),
            convergence=1e-2,
        ),
        torch.bfloat16: Tolerances(
            same_dtype=Tolerance(atol=1e-6, rtol=8e-3, norm=2e-3),
            float64=Tolerance(atol=1e-2, rtol=1e-2, norm=5e-3),
            convergence=3e-2,
        ),
    }

    def width_sweep(self, suite):
        # The blocks run over the flattened elements, not along a row: the knobs' own block sizes (their edges
        # in boundary_shapes) are where they end.
        return []

    def make_inputs(self, shape, dtype, device, generator=None, config=None):
        # Seeded (the gate): on the CPU, the same values on every device; unseeded (timing): on the device.
        x = torch.randn(*shape, generator=generator, dtype=torch.float32,
                        device="cpu" if generator is not None else device)
        return {"X": x.to(device=device, dtype=dtype)}

    def reference(self, inputs, config):
        return (torch.relu(inputs["X"]).pow(2),)

    def call(self, variant, inputs, config):
        return (variant.relu_squared(inputs["X"]),)

    def upstream_forward(self):
        try:
            from liger_kernel.ops.relu_squared import LigerReLUSquaredFunction
        except ImportError:
            return None
        return lambda inputs, config: (LigerReLUSquaredFunction.apply(inputs["X"]),)

    def min_bytes(self, pass_name, shape, dtype):
        n = math.prod(shape)
        size = torch.tensor([], dtype=dtype).element_size()
        forward = 2 * n * size  # read X, write Y
        backward = 3 * n * size  # read X, dY; write dX
        return {"forward": forward, "backward": backward, "full": forward + backward}[pass_name]

    def convergence_model(self, forward, config, generator, device, dtype):
        hidden, batch = 48, 32
        model = _Mlp(forward, hidden, generator).to(device=device, dtype=dtype)
        inputs = torch.randn(4, batch, hidden, generator=generator).to(device=device, dtype=dtype)
        targets = torch.randn(4, batch, hidden, generator=generator).to(device=device, dtype=dtype)
        return model, inputs, targets


class _Mlp(nn.Module):
    """Two linear layers with a ReLU^2 between them, as in Primer-style feed-forward blocks."""

    def __init__(self, forward, hidden, generator):
        super().__init__()
        self.forward_fn = forward
        self.up = nn.Parameter(torch.randn(hidden, 4 * hidden, generator=generator) / hidden ** 0.5)
        self.down = nn.Parameter(torch.randn(4 * hidden, hidden, generator=generator) / (4 * hidden) ** 0.5)

    def forward(self, x):
        (y,) = self.forward_fn({"X": x @ self.up}, {})
        return y @ self.down
