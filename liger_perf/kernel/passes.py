"""How one pass (forward, backward, full) of a kernel is run, the same way for timing and for NCU.

A pass is prepared once per contender and case; ``PreparedPass.arm()`` does the untimed per-repetition setup
(gradients reset to None, fresh cotangents) and returns the thunk whose execution is what gets measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from liger_perf.kernel.spec import ForwardFn, Inputs, KernelSpec


@dataclass
class PreparedPass:
    name: str
    arm: Callable[[], Callable[[], Any]]


def case_inputs(spec: KernelSpec, case, device) -> tuple[Inputs, tuple[torch.Tensor, ...]]:
    """Fresh inputs for a case and random cotangents shaped like the reference's outputs."""
    inputs = spec.make_inputs(case.shape, case.dtype, device.torch_device, config=case.config)
    with torch.no_grad():
        outputs = spec.reference(inputs, case.config)
    return inputs, spec.grad_outputs(tuple(o.detach() for o in outputs))


def training_leaves(spec: KernelSpec, inputs: Inputs) -> Inputs:
    """A contender's own copies of the inputs, the differentiable ones requiring grad, as in training."""
    return {k: v.detach().clone().requires_grad_(k in spec.differentiable) for k, v in inputs.items()}


def prepare_pass(spec: KernelSpec, forward: ForwardFn, inputs: Inputs, config: Mapping[str, Any], pass_name: str,
                 cotangents: tuple[torch.Tensor, ...]) -> PreparedPass:
    """``forward``: the training forward (graph recorded, outputs dropped). ``backward``: the gradients of a
    forward run once beforehand, its graph kept. ``full``: both.

    Gradients are taken with ``torch.autograd.grad``, as they reach activations in training, not accumulated
    into leaves' ``.grad``: a kernel that returns one tensor as the gradient of two inputs (``dX = dR``) would
    otherwise pay for a full copy that AccumulateGrad makes when one tensor feeds two leaves, a cost of the
    benchmark's leaves that no training step has. Nothing accumulates, so no repetition adds into another's."""
    leaves = training_leaves(spec, inputs)
    grad_leaves = [leaves[n] for n in spec.differentiable]

    def fresh_cotangents():
        # Clones: an in-place variant may overwrite the cotangent it is given.
        return [c.clone() for c in cotangents]

    if pass_name == "forward":
        def arm():
            return lambda: forward(leaves, config)
    elif pass_name == "backward":
        outputs = as_tuple(forward(leaves, config))

        def arm():
            cots = fresh_cotangents()
            return lambda: torch.autograd.grad(outputs, grad_leaves, cots, retain_graph=True)
    elif pass_name == "full":
        def arm():
            cots = fresh_cotangents()
            return lambda: torch.autograd.grad(as_tuple(forward(leaves, config)), grad_leaves, cots)
    else:
        raise ValueError(f"unknown pass {pass_name!r}")
    return PreparedPass(pass_name, arm)


def as_tuple(outputs):
    return tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)
