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
    #: What the gate needs to see the mistake, when the interpreter cannot: "race" (programs running at once),
    #: "bfloat16" (a GPU's bfloat16), "large" (more than 2**31 elements). Empty: caught on the CPU too.
    gpu_only: str = ""


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
        "fused_add_rms_norm", "block_from_one_width_too_few",
        "the block is the next power of two of H - 1: at H = 2**k + 1 the last column is never loaded or written (at H = 1 the block is empty: it raises)",
        "*|Y|S|dX|dR|dW",
        (("    row_block = triton.next_power_of_2(n_cols)\n",
          "    row_block = triton.next_power_of_2(n_cols - 1)\n"),)),
    BrokenVariant(
        "fused_add_rms_norm", "backward_offsets_in_32_bits",
        "the backward computes row offsets in 32 bits: past 2**31 elements its addresses leave the tensors (on a "
        "GPU an illegal memory access, a device fault)", "*|dX|dR|dW",
        # the one-row loop's offsets (the knob bwd_weight_reload put its "if RELOAD_W:" under them)
        (("            row64 = tl.cast(row, tl.int64)\n            if RELOAD_W:\n",
          "            row64 = row\n            if RELOAD_W:\n"),), gpu_only="large"),
    BrokenVariant(
        "fused_add_rms_norm", "dw_accumulated_in_input_dtype",
        "the backward accumulates the partial dW in the input dtype instead of float32", "dW",
        (("        dw_acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)\n        for row in tl.range",
          "        dw_acc = tl.zeros((BLOCK_SIZE,), dtype=DY.dtype.element_ty)\n        for row in tl.range"),
         ("            dw_acc += dw\n        tl.store(DW_PARTIAL + tl.cast(pid, tl.int64) * stride_dw + cols, dw_acc, "
          "mask=mask)",
          "            dw_acc = (dw_acc.to(tl.float32) + dw).to(DY.dtype.element_ty)\n"
          "        tl.store(DW_PARTIAL + tl.cast(pid, tl.int64) * stride_dw + cols, dw_acc.to(tl.float32), mask=mask)"))),
    # -- incoming gradients: their layout, and who may write into them ---------------------------------------
    BrokenVariant(
        "fused_add_rms_norm", "dy_read_with_the_stride_of_s",
        "the backward reads dY with S's row stride, as if every gradient were contiguous like S", "dX|dR|dW",
        (("dX.stride(0), dY2.stride(0), dS2.stride(0), S.stride(0), dW_partial.stride(0),",
          "dX.stride(0), S.stride(0), dS2.stride(0), S.stride(0), dW_partial.stride(0),"),)),
    BrokenVariant(
        "fused_add_rms_norm", "dx_into_dy_without_in_place",
        "the backward writes dX into the incoming dY whenever it is contiguous, in_place or not", "dY (given)",
        (("dX = dY2 if ctx.in_place and dY2.is_contiguous() else torch.empty_like(S)",
          "dX = dY2 if dY2.is_contiguous() else torch.empty_like(S)"),)),
    BrokenVariant(
        "fused_add_rms_norm", "dx_into_saved_s",
        "the backward writes dX into the saved S to save memory (S is an output, and a second backward reads it)",
        "S|dX|dR|dW",
        (("dX = dY2 if ctx.in_place and dY2.is_contiguous() else torch.empty_like(S)",
          "dX = dY2 if ctx.in_place and dY2.is_contiguous() else S"),)),
    BrokenVariant(
        "relu_squared", "dy_assumed_contiguous", "the backward reads dY as a flat contiguous buffer", "dX",
        (("        dY = dY.contiguous()\n", ""),)),
    # -- the dtype and shape contract --------------------------------------------------------------------------
    BrokenVariant(
        "fused_add_rms_norm", "gemma_y_in_float32", "under gemma, Y comes back in float32 instead of X's dtype",
        "Y|*",
        (("Y_out = torch.empty(shape, dtype=X.dtype, device=X.device)",
          "Y_out = torch.empty(shape, dtype=torch.float32 if casting_mode == 'gemma' else X.dtype, "
          "device=X.device)"),)),
    BrokenVariant(
        "fused_add_rms_norm", "outputs_left_2d", "Y and S come back as (rows, hidden) for N-D inputs", "Y|S|*",
        (("return Y_out, S_out", "return Y, S"),)),
    BrokenVariant(
        "relu_squared", "output_in_float32", "Y is allocated in float32 whatever X's dtype", "Y|*",
        (("        Y = torch.empty_like(X)\n", "        Y = torch.empty_like(X, dtype=torch.float32)\n"),)),
    # -- edge values and sizes -------------------------------------------------------------------------------
    BrokenVariant(
        "fused_add_rms_norm", "eps_outside_the_sqrt", "rstd = 1 / (sqrt(mean(S^2)) + eps) instead of "
        "1 / sqrt(mean(S^2) + eps): the same on unit rows, wrong where the mean square is small or zero",
        "Y|dX|dR|dW",
        (("    return 1.0 / tl.sqrt(mean_sq + eps)", "    return 1.0 / (tl.sqrt(mean_sq) + eps)"),)),
    BrokenVariant(
        "fused_add_rms_norm", "mean_square_clamped", "a defensive clamp max(mean(S^2), 0) turns a NaN row's "
        "statistics into a number, so the row comes out finite where PyTorch propagates NaN", "Y|dX|dR|dW",
        (("    return 1.0 / tl.sqrt(mean_sq + eps)", "    return 1.0 / tl.sqrt(tl.maximum(mean_sq, 0.0) + eps)"),)),
    BrokenVariant(
        "fused_add_rms_norm", "chunked_forward_drops_the_tail",
        "with 8192-column chunks in the forward, the loop that writes Y stops before a last partial chunk", "Y",
        (('    "BLOCK_SIZE": "auto",', '    "BLOCK_SIZE": 8192,'),
         ('    "fwd_column_chunked": False,', '    "fwd_column_chunked": True,'),
         ("                tl.store(RSTD + row64, rstd)\n                for start in range(0, n_cols, BLOCK_SIZE):",
          "                tl.store(RSTD + row64, rstd)\n"
          "                for start in range(0, n_cols - BLOCK_SIZE + 1, BLOCK_SIZE):"))),
    BrokenVariant(
        "fused_add_rms_norm", "fused_dw_counters_never_reset",
        "the in-launch dW reduction leaves its ticket counters where the launch left them, so the next backward "
        "never sees a last ticket and returns dW unwritten", "dW",
        (('    "bwd_fused_dw_max_cols": 0,', '    "bwd_fused_dw_max_cols": 32768,'),
         ("        tl.atomic_xchg(COUNTERS + 1 + group, 0)\n", ""),
         ("            tl.atomic_xchg(COUNTERS, 0)\n", ""))),
    # -- what only a GPU shows --------------------------------------------------------------------------------
    BrokenVariant(
        "fused_add_rms_norm", "forward_offsets_in_32_bits",
        "the forward computes row offsets in 32 bits (row * stride overflows past 2**31 elements)", "Y|S|*",
        (("            row64 = tl.cast(row, tl.int64)\n            if CHUNKED:",
          "            row64 = row\n            if CHUNKED:"),), gpu_only="large"),
    BrokenVariant(
        "fused_add_rms_norm", "dw_row_shared_without_atomics",
        "every backward program adds its dW into one shared row with a plain load and store: right when programs "
        "run one after another (the interpreter), lost updates when they run at once", "dW",
        (("        tl.store(DW_PARTIAL + tl.cast(pid, tl.int64) * stride_dw + cols, dw_acc, mask=mask)\n    else:",
          "        prev = tl.load(DW_PARTIAL + cols, mask=mask & (pid > 0), other=0.0)\n"
          "        tl.store(DW_PARTIAL + cols, prev + dw_acc, mask=mask)\n    else:"),
         # torch's sum, whose edit below reads the shared row alone (the Triton one would sum unwritten rows too)
         ('    "dw_reduction": "triton",', '    "dw_reduction": "torch",'),
         ("            dW = dW_partial.sum(dim=0).to(W.dtype)", "            dW = dW_partial[0].to(W.dtype)")),
        gpu_only="race"),
    BrokenVariant(
        "fused_add_rms_norm", "bfloat16_residual_through_float16",
        "for bfloat16 inputs the residual add goes through float16, which overflows at 65504 where bfloat16 "
        "reaches 3e38", "S|Y|dX|dR|dW",
        (("                s = x + r\n                tl.store(S + row64 * stride_s + cols, s, mask=mask)",
          "                s = x + r\n"
          "                if S.dtype.element_ty == tl.bfloat16:\n"
          "                    s = (x.to(tl.float16) + r.to(tl.float16)).to(tl.bfloat16)\n"
          "                tl.store(S + row64 * stride_s + cols, s, mask=mask)"),), gpu_only="bfloat16"),
    # -- relu_squared ----------------------------------------------------------------------------------------
    BrokenVariant(
        "relu_squared", "backward_without_relu_mask", "the backward forgets the relu mask (dX = 2 * X * dY)", "dX",
        (("    dx = tl.where(x <= 0.0, 0.0, 2.0 * x * dy)", "    dx = 2.0 * x * dy"),)),
    BrokenVariant(
        "relu_squared", "square_before_relu", "the forward squares before the relu, so negatives survive", "Y",
        (("    r = _relu(x)\n    tl.store(Y + offsets, (r * r).to(Y.dtype.element_ty), mask=mask)",
          "    r = _relu(x * x)\n    tl.store(Y + offsets, r.to(Y.dtype.element_ty), mask=mask)"),)),
    BrokenVariant(
        "relu_squared", "relu_drops_nan", "the relu is tl.maximum(x, 0), which turns NaN into 0 where torch.relu "
        "keeps it (random inputs never show it: only the gate's non-finite values do)", "Y|dX",
        (("    return tl.where(x < 0.0, 0.0, x)", "    return tl.maximum(x, 0.0)"),)),
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
