"""The convergence check: code that passes unit checks can still train wrongly.

A small model that uses the kernel is trained twice from the same initialisation on the same data, once
through the variant and once through the PyTorch reference, for every option set the gate checks (each casting
mode) in every dtype of the suite (under the interpreter: each option set and each dtype at least once); the loss at every step and the final weights must agree within the dtype's
tolerance. A run that raises is a FAIL row at the step where it raised, never a traceback.
"""

from __future__ import annotations

import math

import pandas as pd
import torch

from liger_perf.kernel.device import Device
from liger_perf.kernel.spec import KernelSpec, dtype_name
from liger_perf.kernel.variants import Variant

COLUMNS = ["dtype", "config", "step", "loss_variant", "loss_reference", "rel_diff", "verdict", "reason"]


class _Raised(Exception):
    def __init__(self, step: int, error: Exception):
        super().__init__(f"raised {type(error).__name__}: {error}"[:500])
        self.step = step


def _train(spec: KernelSpec, forward, config, device: Device, dtype: torch.dtype, steps: int, lr: float,
           seed: int):
    generator = torch.Generator().manual_seed(seed)
    step = "setup"
    try:
        model, inputs, targets = spec.convergence_model(forward, config, generator, device.torch_device, dtype)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        losses = []
        for step in range(steps):
            batch = step % inputs.shape[0]
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(inputs[batch]).float(), targets[batch].float())
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    except Exception as e:  # a variant that crashes in training fails there
        raise _Raised(step, e) from e
    return losses, [p.detach().double().cpu() for p in model.parameters()]


INTERPRETED_STEPS = 15


def runs(spec: KernelSpec, device: Device) -> list[tuple[dict, torch.dtype]]:
    """(options, dtype) of each training run: every option set in every dtype on the GPU; under the interpreter
    (a hundred times slower, and never enough to accept) every option set and every dtype at least once, paired
    in turn."""
    configs = list({repr(dict(c)): dict(c) for c in spec.check_configs}.values())
    dtypes = list(spec.dtypes[device.suite])
    if device.interpreted:
        return [(configs[i % len(configs)], dtypes[i % len(dtypes)]) for i in range(max(len(configs), len(dtypes)))]
    return [(config, dtype) for config in configs for dtype in dtypes]


def check_convergence(spec: KernelSpec, variant: Variant, device: Device, steps: int | None = None,
                      lr: float = 0.1, seed: int = 0) -> pd.DataFrame:
    """One row per run (``runs``) and step, plus a ``final weights`` row for each; ``steps``: 30 on the GPU,
    ``INTERPRETED_STEPS`` under the interpreter."""
    steps = steps or (INTERPRETED_STEPS if device.interpreted else 30)
    rows = []
    for config, dtype in runs(spec, device):
        label = ",".join(f"{k}={v}" for k, v in config.items())
        tol = spec.tolerance(dtype, config).convergence
        base = {"dtype": dtype_name(dtype), "config": label}
        try:
            got, got_w = _train(spec, spec.variant_forward(variant.module), config, device, dtype, steps, lr,
                                seed)
        except _Raised as e:
            rows.append({**base, "step": e.step, "loss_variant": math.nan, "loss_reference": math.nan,
                         "rel_diff": math.nan, "verdict": "FAIL", "reason": str(e)})
            continue
        ref, ref_w = _train(spec, spec.reference_forward(), config, device, dtype, steps, lr, seed)
        for step, (a, b) in enumerate(zip(got, ref)):
            rel = abs(a - b) / max(abs(b), 1e-12)
            ok = math.isfinite(a) and rel <= tol
            rows.append({**base, "step": step, "loss_variant": a, "loss_reference": b, "rel_diff": rel,
                         "verdict": "pass" if ok else "FAIL",
                         "reason": "" if ok else f"loss differs by {rel:.3g} (at most {tol:g})"})
        num = sum(float((a - b).norm() ** 2) for a, b in zip(got_w, ref_w)) ** 0.5
        den = sum(float(b.norm() ** 2) for b in ref_w) ** 0.5
        rel = num / max(den, 1e-30)
        ok = math.isfinite(rel) and rel <= tol
        rows.append({**base, "step": "final weights", "loss_variant": math.nan, "loss_reference": math.nan,
                     "rel_diff": rel, "verdict": "pass" if ok else "FAIL",
                     "reason": "" if ok else f"trained weights differ by {rel:.3g} (at most {tol:g})"})
    return pd.DataFrame(rows, columns=COLUMNS)
