"""What a launch needs (threads, shared memory, registers) against what the GPU has: the rules proposer asks
before it spends a trial on a configuration.

A kernel's spec declares its launches' footprints for given knobs (``KernelSpec.launch_footprints``), because
only the kernel author knows what a knob does to a launch; this module holds the device limits and the two
questions asked of a footprint:

* ``cannot_launch``: more threads than a block may have, more shared memory than a block may use (Triton
  raises ``OutOfResources`` at compile time), or a tile over Triton's element limit. Such a configuration
  never runs: trial 0008 of the H200 history spent a trial finding out (shared memory 393288 > 232448).
* ``spills``: the footprint's estimated registers per thread over what the block's size leaves each thread
  (65536 registers per SM shared by the block's threads, at most 255 each). An estimate, used only to skip a
  remedy for spills that would still spill.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from liger_perf.kernel.spec import Footprint, KernelSpec, Shape, dtype_name
from liger_perf.kernel.variants import dispatch_bucket, knobs_in

#: Triton's largest tensor (elements in one block-level tensor).
TRITON_MAX_ELEMENTS = 1 << 20


@dataclass(frozen=True)
class DeviceLimits:
    """Per-block limits of a GPU generation (CUDA's occupancy tables; shared memory: the opt-in maximum)."""

    name: str
    shared_bytes_per_block: int
    registers_per_sm: int = 65536
    registers_per_thread: int = 255
    threads_per_block: int = 1024


# By compute capability major.minor; unknown devices are judged as Hopper (the largest limits: nothing that
# fits elsewhere is ruled out by a wrong guess).
_LIMITS = {
    "9.0": DeviceLimits("sm_90 (H100/H200)", 232448),
    "8.0": DeviceLimits("sm_80 (A100)", 166912),
    "8.6": DeviceLimits("sm_86", 101376),
    "8.9": DeviceLimits("sm_89", 101376),
    "10.0": DeviceLimits("sm_100 (B200)", 232448),
}
DEFAULT_LIMITS = _LIMITS["9.0"]


def limits_for(compute_capability: str | None) -> DeviceLimits:
    return _LIMITS.get(compute_capability or "", DEFAULT_LIMITS)


def register_cap(footprint: Footprint, limits: DeviceLimits) -> int:
    """Registers a thread of this block may hold: the SM's file shared by the block's threads, allocated in
    units of 8, at most 255."""
    share = limits.registers_per_sm // max(footprint.threads, 1)
    return min(limits.registers_per_thread, share - share % 8)


def cannot_launch(footprint: Footprint, limits: DeviceLimits) -> str | None:
    """Why this launch cannot run on such a device, or None."""
    if footprint.threads > limits.threads_per_block:
        return f"{footprint.kernel}: {footprint.threads} threads per block > {limits.threads_per_block}"
    if footprint.shared_bytes > limits.shared_bytes_per_block:
        return (f"{footprint.kernel}: about {footprint.shared_bytes} bytes of shared memory > "
                f"{limits.shared_bytes_per_block} on {limits.name}")
    if footprint.elements > TRITON_MAX_ELEMENTS:
        return f"{footprint.kernel}: a {footprint.elements}-element tile > Triton's {TRITON_MAX_ELEMENTS}"
    return None


def spills(footprint: Footprint, limits: DeviceLimits) -> bool:
    return footprint.registers is not None and footprint.registers > register_cap(footprint, limits)


def footprints(spec: KernelSpec, knobs: Mapping[str, Any], pass_name: str, shape: Shape, dtype: Any,
               dispatch: Mapping[str, Mapping[str, Any]] | None = None) -> list[Footprint]:
    """The spec's footprints, or none where its model cannot read these knobs (a variant a model wrote may set
    values the spec's author never listed): a model that cannot answer rules nothing out. With a ``dispatch``
    table, the knobs of the shape's bucket."""
    try:
        if dispatch:
            knobs = knobs_in(dict(knobs), dict(dispatch), dispatch_bucket(tuple(shape), dtype))
        return list(spec.launch_footprints(knobs, pass_name, tuple(shape), dtype))
    except Exception:  # noqa: BLE001 - the spec is kernel code; its failure must not stop the proposer
        return []


def launch_problem(spec: KernelSpec, knobs: Mapping[str, Any], passes: Iterable[str], shapes: Iterable[Shape],
                   dtypes: Iterable[Any], limits: DeviceLimits,
                   dispatch: Mapping[str, Mapping[str, Any]] | None = None) -> str | None:
    """The first reason a launch of ``passes`` at one of ``shapes`` x ``dtypes`` cannot run with ``knobs``, or
    None (also None where the spec declares no footprints: no model, no veto)."""
    for pass_name in passes:
        for shape in shapes:
            for dtype in dtypes:
                for footprint in footprints(spec, knobs, pass_name, shape, dtype, dispatch):
                    reason = cannot_launch(footprint, limits)
                    if reason:
                        return f"{pass_name} {'x'.join(map(str, shape))} {dtype_name(dtype)}: {reason}"
    return None


def spilling_shapes(spec: KernelSpec, knobs: Mapping[str, Any], pass_name: str, shapes: Iterable[Shape],
                    dtypes: Iterable[Any], limits: DeviceLimits,
                    dispatch: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """The shapes (and dtypes) at which the model expects ``pass_name`` to spill with ``knobs``."""
    found = []
    for shape in shapes:
        for dtype in dtypes:
            if any(spills(f, limits) for f in footprints(spec, knobs, pass_name, shape, dtype, dispatch)):
                found.append(f"{'x'.join(map(str, shape))} {dtype_name(dtype)}")
    return found


__all__ = ["DEFAULT_LIMITS", "DeviceLimits", "TRITON_MAX_ELEMENTS", "cannot_launch", "footprints", "launch_problem",
           "limits_for", "register_cap", "spilling_shapes", "spills"]
