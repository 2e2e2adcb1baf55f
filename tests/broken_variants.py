"""Deliberately broken variants: each is the kernel's baseline with one real mistake, which the gate must catch.

A broken variant is stored as the edit that breaks the baseline, not as a copy of it, so it always differs from
the current baseline by exactly that mistake; an edit that no longer applies fails loudly.

    python3 tests/broken_variants.py OUT_DIR   # writes OUT_DIR/<kernel>/<name>.py for `liger-perf check --variant`
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class BrokenVariant:
    kernel: str
    name: str
    mistake: str
    #: The output (or gradient) whose comparison must fail; several, separated by "|", where the mistake reaches
    #: more than one and random inputs decide which one the gate meets first.
    exposed_in: str
    edits: tuple[tuple[str, str], ...]  # (text of the baseline, its replacement); each text occurs exactly once


BROKEN = (
    BrokenVariant(
        "fused_add_rms_norm", "llama_mean_square_in_input_dtype",
        "under llama the mean of squares is computed in the input dtype instead of float32", "Y",
        (("    if CASTING == _NONE:\n"
          "        # PyTorch's S.pow(2) rounds each square to the input dtype before the mean accumulates them.\n"
          "        return",
          "    if CASTING != _GEMMA:\n        return"),
         ("    if CASTING == _NONE:\n        mean_sq = mean_sq.to(dtype).to(tl.float32)",
          "    if CASTING != _GEMMA:\n        mean_sq = mean_sq.to(dtype).to(tl.float32)\n    if CASTING == _NONE:"))),
    BrokenVariant(
        "fused_add_rms_norm", "gemma_in_input_dtype",
        "under gemma the weight and the normalised row are rounded to the input dtype, not kept in float32",
        "Y|dX|dR",  # the backward's dY * (W + offset) shares the rounded weight factor
        (("    if CASTING != _GEMMA:\n        wo = wo.to(w.dtype).to(tl.float32)",
          "    wo = wo.to(w.dtype).to(tl.float32)"),
         ("    if CASTING == _GEMMA:\n        return (s32 * rstd * wo).to(s.dtype)\n", ""))),
    BrokenVariant(
        "fused_add_rms_norm", "residual_uses_x_stride", "the forward reads R with X's row stride", "Y",
        (("Y.stride(0), S.stride(0), X2.stride(0), R2.stride(0),",
          "Y.stride(0), S.stride(0), X2.stride(0), X2.stride(0),"),)),
    BrokenVariant(
        "fused_add_rms_norm", "residual_load_without_mask",
        "the forward loads R without its column mask, reading past the end of each row", "Y",
        (("                r = tl.load(R + row64 * stride_r + cols, mask=mask, other=0.0)",
          "                r = tl.load(R + row64 * stride_r + cols)"),)),
    BrokenVariant(
        "fused_add_rms_norm", "last_column_unwritten", "the forward never writes the last column of Y", "Y",
        (("                tl.store(Y + row64 * stride_y + cols, _normalize(s, wo, rstd, CASTING), mask=mask)",
          "                tl.store(Y + row64 * stride_y + cols, _normalize(s, wo, rstd, CASTING), "
          "mask=cols < n_cols - 1)"),)),
    BrokenVariant(
        "fused_add_rms_norm", "dw_accumulated_in_input_dtype",
        "the backward accumulates the partial dW in the input dtype instead of float32", "dW",
        (("        dw_acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)\n        for row in tl.range",
          "        dw_acc = tl.zeros((BLOCK_SIZE,), dtype=DY.dtype.element_ty)\n        for row in tl.range"),
         ("            dw_acc += dw\n        tl.store(DW_PARTIAL + pid * stride_dw + cols, dw_acc, mask=mask)",
          "            dw_acc = (dw_acc.to(tl.float32) + dw).to(DY.dtype.element_ty)\n"
          "        tl.store(DW_PARTIAL + pid * stride_dw + cols, dw_acc.to(tl.float32), mask=mask)"))),
    BrokenVariant(
        "relu_squared", "backward_without_relu_mask", "the backward forgets the relu mask (dX = 2 * X * dY)", "dX",
        (("    dx = 2.0 * tl.maximum(x, 0.0) * dy", "    dx = 2.0 * x * dy"),)),
    BrokenVariant(
        "relu_squared", "square_before_relu", "the forward squares before the relu, so negatives survive", "Y",
        (("    r = tl.maximum(x, 0.0)\n    tl.store(Y + offsets, (r * r).to(Y.dtype.element_ty), mask=mask)",
          "    r = tl.maximum(x * x, 0.0)\n    tl.store(Y + offsets, r.to(Y.dtype.element_ty), mask=mask)"),)),
)


def broken_source(broken: BrokenVariant) -> str:
    source = (ROOT / "kernels" / broken.kernel / "baseline.py").read_text()
    for old, new in broken.edits:
        count = source.count(old)
        if count != 1:
            raise AssertionError(f"{broken.name}: the edited text occurs {count} times in the "
                                 f"{broken.kernel} baseline (expected once); update the edit: {old!r}")
        source = source.replace(old, new)
    return f'"""BROKEN ON PURPOSE (a correctness-gate fixture): {broken.mistake}."""\n\n{source}'


def write_broken_variant(broken: BrokenVariant, directory: Path) -> Path:
    path = Path(directory) / broken.kernel / f"{broken.name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(broken_source(broken))
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 tests/broken_variants.py OUT_DIR")
    for broken in BROKEN:
        print(write_broken_variant(broken, Path(sys.argv[1])))


def broken_dependency(directory: Path) -> str:
    """A PYTHONPATH on which the harness's ``pandas`` fails to import, as in an installation that lacks it.

    Only processes started with it see the breakage (a trial's notebook kernel); this one has pandas already."""
    site = directory / "broken-site"
    (site / "pandas").mkdir(parents=True, exist_ok=True)
    (site / "pandas" / "__init__.py").write_text('raise ImportError("injected: pandas is not installed")\n')
    return f"{site}{os.pathsep}{ROOT}"
