"""The convergence check: code that passes unit checks can still train wrongly.

A small model that uses the kernel is trained twice from the same initialisation on the same data, once
through the variant and once through the PyTorch reference; the loss at every step and the final weights
must agree within the dtype's tolerance.
"""

from __future__ import annotations

import math

import pandas as pd
import torch

from liger_perf.device import Device
from liger_perf.spec import KernelSpec, dtype_name
from liger_perf.variants import Variant

COLUMNS = ["dtype", "step", "loss_variant", "loss_reference", "rel_diff", "verdict"]


def _train(spec: KernelSpec, forward, device: Device, dtype: torch.dtype, steps: int, lr: float, seed: int):
    generator = torch.Generator().manual_seed(seed)
    model, inputs, targets = spec.convergence_model(forward, spec.bench_config, generator, device.torch_device,
                                                    dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        batch = step % inputs.shape[0]
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(inputs[batch]).float(), targets[batch].float())
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses, [p.detach().double().cpu() for p in model.parameters()]


def check_convergence(spec: KernelSpec, variant: Variant, device: Device, steps: int = 30, lr: float = 0.1,
                      seed: int = 0) -> pd.DataFrame:
    """One row per dtype and step, plus a ``final weights`` row per dtype."""
    rows = []
    for dtype in spec.dtypes[device.suite]:
        tol = spec.tolerances[dtype].convergence
        got, got_w = _train(spec, spec.variant_forward(variant.module), device, dtype, steps, lr, seed)
        ref, ref_w = _train(spec, spec.reference_forward(), device, dtype, steps, lr, seed)
        for step, (a, b) in enumerate(zip(got, ref)):
            rel = abs(a - b) / max(abs(b), 1e-12)
            ok = math.isfinite(a) and rel <= tol
            rows.append({"dtype": dtype_name(dtype), "step": step, "loss_variant": a, "loss_reference": b,
                         "rel_diff": rel, "verdict": "pass" if ok else "FAIL"})
        num = sum(float((a - b).norm() ** 2) for a, b in zip(got_w, ref_w)) ** 0.5
        den = sum(float(b.norm() ** 2) for b in ref_w) ** 0.5
        rel = num / max(den, 1e-30)
        rows.append({"dtype": dtype_name(dtype), "step": "final weights", "loss_variant": float("nan"),
                     "loss_reference": float("nan"), "rel_diff": rel,
                     "verdict": "pass" if rel <= tol else "FAIL"})
    return pd.DataFrame(rows, columns=COLUMNS)
