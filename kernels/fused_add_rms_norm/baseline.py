"""Fused residual add + RMSNorm, variant zero (the baseline).

Math, per row of H columns:

    S = X + R
    rstd = 1 / sqrt(mean(S^2) + eps)
    Y = S * rstd * (W + offset)

    dS_total = dY_norm + dS_out, where dY_norm = rstd * m - rstd^3 / H * sum(m * S) * S and m = dY * (W + offset)
    dX = dR = dS_total
    dW = sum over rows of dY * (S * rstd)

Casting modes (which parts run in float32, and where the cast back to the input dtype happens), matching
Hugging Face Transformers' models and Liger-Kernel:

* ``llama``: only the normalisation runs in float32; ``S * rstd`` is cast back to the input dtype before the
  product with ``W + offset``, which runs in the input dtype.
* ``gemma``: everything runs in float32 (``W`` included); only ``Y`` is cast back.
* ``none``: every operation runs in the input dtype, rounding after each step as PyTorch would.

Algorithm: the forward runs ``fwd_rows_per_program`` rows per program; the backward runs on a grid of about
one program per SM, each looping over its share of rows and accumulating a float32 partial ``dW`` that a
final reduction sums. Launch settings are chosen once in the forward and reach the backward through the
autograd context. With ``column_chunked`` a row is walked in ``BLOCK_SIZE`` chunks instead of held whole in
registers (two passes over the row; for very wide rows).
"""

import math

import torch
import triton
import triton.language as tl

# Tunable knobs: the optimizer writes new variants by changing these values (allowed values in KNOB_CHOICES).
KNOBS = {
    "BLOCK_SIZE": "auto",  # columns a program holds at once; "auto": next power of two of H (whole row)
    "num_warps": "auto",  # "auto": 4, 8, 16 or 32 by BLOCK_SIZE
    "num_stages": "auto",  # software pipelining of the backward's row loop; "auto": Triton's default
    "bwd_num_warps": "same",  # "same": the forward's num_warps
    "fwd_rows_per_program": 1,
    "bwd_rows_per_program": "auto",  # "auto": ceil(rows / SM count), i.e. one program per SM
    "column_chunked": False,  # walk each row in BLOCK_SIZE chunks (needs BLOCK_SIZE < H to matter)
    "dw_reduction": "torch",  # how the per-program float32 dW partials are summed: "torch" or "triton"
}
KNOB_CHOICES = {
    "BLOCK_SIZE": ["auto", 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536],
    "num_warps": ["auto", 1, 2, 4, 8, 16, 32],
    "num_stages": ["auto", 1, 2, 3, 4],
    "bwd_num_warps": ["same", 1, 2, 4, 8, 16, 32],
    "fwd_rows_per_program": [1, 2, 4, 8],
    "bwd_rows_per_program": ["auto", 1, 2, 4, 8, 16, 32, 64, 128],
    "column_chunked": [False, True],
    "dw_reduction": ["torch", "triton"],
}

CASTING_MODES = {"llama": 0, "gemma": 1, "none": 2}
_LLAMA: tl.constexpr = tl.constexpr(0)
_GEMMA: tl.constexpr = tl.constexpr(1)
_NONE: tl.constexpr = tl.constexpr(2)


@triton.jit
def _weight_factor(w, offset, CASTING: tl.constexpr):
    # (W + offset): float32 under gemma, rounded to W's dtype otherwise (as PyTorch computes `offset + W`).
    wo = w.to(tl.float32) + offset
    if CASTING != _GEMMA:
        wo = wo.to(w.dtype).to(tl.float32)
    return wo


@triton.jit
def _sum_of_squares(s, CASTING: tl.constexpr):
    s32 = s.to(tl.float32)
    if CASTING == _NONE:
        # PyTorch's S.pow(2) rounds each square to the input dtype before the mean accumulates them.
        return tl.sum((s32 * s32).to(s.dtype).to(tl.float32), axis=0)
    return tl.sum(s32 * s32, axis=0)


@triton.jit
def _rstd(sum_sq, n_cols, eps, dtype: tl.constexpr, CASTING: tl.constexpr):
    mean_sq = sum_sq / n_cols
    if CASTING == _NONE:
        mean_sq = mean_sq.to(dtype).to(tl.float32)
        var_eps = (mean_sq + eps).to(dtype).to(tl.float32)
        return (1.0 / tl.sqrt(var_eps)).to(dtype).to(tl.float32)
    return 1.0 / tl.sqrt(mean_sq + eps)


@triton.jit
def _normalize(s, wo, rstd, CASTING: tl.constexpr):
    s32 = s.to(tl.float32)
    if CASTING == _GEMMA:
        return (s32 * rstd * wo).to(s.dtype)
    # llama and none: S * rstd is rounded to the input dtype, then multiplied by (W + offset) in that dtype.
    normed = (s32 * rstd).to(s.dtype).to(tl.float32)
    return (normed * wo).to(s.dtype)


@triton.jit
def _forward_kernel(
    Y, S, X, R, W, RSTD,
    stride_y, stride_s, stride_x, stride_r,
    n_rows, n_cols, eps, offset,
    CASTING: tl.constexpr, BLOCK_SIZE: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr, CHUNKED: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    for i in tl.static_range(ROWS_PER_PROGRAM):
        row = pid * ROWS_PER_PROGRAM + i
        if row < n_rows:
            row64 = tl.cast(row, tl.int64)
            if CHUNKED:
                sum_sq = tl.zeros((), dtype=tl.float32)
                for start in range(0, n_cols, BLOCK_SIZE):
                    c = start + cols
                    mask = c < n_cols
                    x = tl.load(X + row64 * stride_x + c, mask=mask, other=0.0)
                    r = tl.load(R + row64 * stride_r + c, mask=mask, other=0.0)
                    s = x + r
                    tl.store(S + row64 * stride_s + c, s, mask=mask)
                    sum_sq += _sum_of_squares(s, CASTING)
                rstd = _rstd(sum_sq, n_cols, eps, S.dtype.element_ty, CASTING)
                tl.store(RSTD + row64, rstd)
                for start in range(0, n_cols, BLOCK_SIZE):
                    c = start + cols
                    mask = c < n_cols
                    s = tl.load(S + row64 * stride_s + c, mask=mask, other=0.0)
                    wo = _weight_factor(tl.load(W + c, mask=mask, other=0.0), offset, CASTING)
                    tl.store(Y + row64 * stride_y + c, _normalize(s, wo, rstd, CASTING), mask=mask)
            else:
                mask = cols < n_cols
                x = tl.load(X + row64 * stride_x + cols, mask=mask, other=0.0)
                r = tl.load(R + row64 * stride_r + cols, mask=mask, other=0.0)
                s = x + r
                tl.store(S + row64 * stride_s + cols, s, mask=mask)
                rstd = _rstd(_sum_of_squares(s, CASTING), n_cols, eps, S.dtype.element_ty, CASTING)
                tl.store(RSTD + row64, rstd)
                wo = _weight_factor(tl.load(W + cols, mask=mask, other=0.0), offset, CASTING)
                tl.store(Y + row64 * stride_y + cols, _normalize(s, wo, rstd, CASTING), mask=mask)


@triton.jit
def _row_grads(dy, s, wo, rstd, n_cols, CASTING: tl.constexpr):
    """dS (from Y alone) and this row's dW contribution, in float32, following the casting mode's graph."""
    s32 = s.to(tl.float32)
    dy32 = dy.to(tl.float32)
    if CASTING == _GEMMA:
        m = dy32 * wo
        dw = dy32 * (s32 * rstd)
    else:
        # llama and none: autograd sees dY * (W + offset) in the input dtype, and dW = dY * (S * rstd) rounded.
        m = (dy32 * wo).to(dy.dtype).to(tl.float32)
        dw = (dy32 * (s32 * rstd).to(dy.dtype).to(tl.float32)).to(dy.dtype).to(tl.float32)
    return m, dw


@triton.jit
def _add_residual_grad(dnorm, ds, CASTING: tl.constexpr):
    """dS_total = dS(through Y) + dS_out, rounded as autograd rounds it: the gradient reaching S through the
    norm is cast to the input dtype first (at the float32 cast in llama and gemma), then the sum in that dtype."""
    dnorm = dnorm.to(ds.dtype).to(tl.float32)
    return (dnorm + ds.to(tl.float32)).to(ds.dtype)


@triton.jit
def _backward_kernel(
    DX, DY, DS, S, W, RSTD, DW_PARTIAL, DOT,
    stride_dx, stride_dy, stride_ds, stride_s, stride_dw,
    n_rows, n_cols, offset, rows_per_program,
    CASTING: tl.constexpr, BLOCK_SIZE: tl.constexpr, CHUNKED: tl.constexpr, NUM_STAGES: tl.constexpr,
):
    pid = tl.program_id(0)
    row_start = pid * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, n_rows)
    cols = tl.arange(0, BLOCK_SIZE)
    if CHUNKED:
        # Pass 1: each row's sum(m * S), kept in DOT, so that pass 2 can walk columns outermost and keep one
        # chunk of dW in registers across all of this program's rows.
        for row in range(row_start, row_end):
            row64 = tl.cast(row, tl.int64)
            rstd = tl.load(RSTD + row64)
            dot = tl.zeros((), dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_SIZE):
                c = start + cols
                mask = c < n_cols
                dy = tl.load(DY + row64 * stride_dy + c, mask=mask, other=0.0)
                s = tl.load(S + row64 * stride_s + c, mask=mask, other=0.0)
                wo = _weight_factor(tl.load(W + c, mask=mask, other=0.0), offset, CASTING)
                m, _ = _row_grads(dy, s, wo, rstd, n_cols, CASTING)
                dot += tl.sum(m * s.to(tl.float32), axis=0)
            tl.store(DOT + row64, dot)
        for start in range(0, n_cols, BLOCK_SIZE):
            c = start + cols
            mask = c < n_cols
            wo = _weight_factor(tl.load(W + c, mask=mask, other=0.0), offset, CASTING)
            dw_acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
            for row in range(row_start, row_end):
                row64 = tl.cast(row, tl.int64)
                rstd = tl.load(RSTD + row64)
                dy = tl.load(DY + row64 * stride_dy + c, mask=mask, other=0.0)
                s = tl.load(S + row64 * stride_s + c, mask=mask, other=0.0)
                m, dw = _row_grads(dy, s, wo, rstd, n_cols, CASTING)
                dot = tl.load(DOT + row64)
                dx = _add_residual_grad(rstd * m - (rstd * rstd * rstd / n_cols) * dot * s.to(tl.float32),
                                        tl.load(DS + row64 * stride_ds + c, mask=mask, other=0.0), CASTING)
                tl.store(DX + row64 * stride_dx + c, dx, mask=mask)
                dw_acc += dw
            tl.store(DW_PARTIAL + pid * stride_dw + c, dw_acc, mask=mask)
    else:
        mask = cols < n_cols
        wo = _weight_factor(tl.load(W + cols, mask=mask, other=0.0), offset, CASTING)
        dw_acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
        for row in tl.range(row_start, row_end, num_stages=NUM_STAGES):
            row64 = tl.cast(row, tl.int64)
            rstd = tl.load(RSTD + row64)
            dy = tl.load(DY + row64 * stride_dy + cols, mask=mask, other=0.0)
            s = tl.load(S + row64 * stride_s + cols, mask=mask, other=0.0)
            m, dw = _row_grads(dy, s, wo, rstd, n_cols, CASTING)
            dot = tl.sum(m * s.to(tl.float32), axis=0)
            dx = _add_residual_grad(rstd * m - (rstd * rstd * rstd / n_cols) * dot * s.to(tl.float32),
                                    tl.load(DS + row64 * stride_ds + cols, mask=mask, other=0.0), CASTING)
            tl.store(DX + row64 * stride_dx + cols, dx, mask=mask)
            dw_acc += dw
        tl.store(DW_PARTIAL + pid * stride_dw + cols, dw_acc, mask=mask)


@triton.jit
def _sum_rows_kernel(OUT, PARTIAL, n_partials, n_cols, stride_p, BLOCK_COLS: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    mask = cols < n_cols
    acc = tl.zeros((BLOCK_COLS,), dtype=tl.float32)
    for p in range(0, n_partials):
        acc += tl.load(PARTIAL + p * stride_p + cols, mask=mask, other=0.0)
    tl.store(OUT + cols, acc.to(OUT.dtype.element_ty), mask=mask)


def _multiprocessor_count(device):
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # the interpreter: a few programs, so that rows are still split unevenly between them


def _launch_settings(n_cols, device):
    """Block size, warps and stages, chosen once in the forward and reused by the backward."""
    block = KNOBS["BLOCK_SIZE"]
    if block == "auto":
        block = triton.next_power_of_2(n_cols)
    if not KNOBS["column_chunked"] and block < n_cols:
        block = triton.next_power_of_2(n_cols)  # an unchunked row must fit in one block
    warps = KNOBS["num_warps"]
    if warps == "auto":
        warps = 32 if block >= 32768 else 16 if block >= 8192 else 8 if block >= 2048 else 4
    bwd_warps = warps if KNOBS["bwd_num_warps"] == "same" else KNOBS["bwd_num_warps"]
    stages = KNOBS["num_stages"]
    return {
        "BLOCK_SIZE": block,
        "num_warps": warps,
        "bwd_num_warps": bwd_warps,
        "num_stages": None if stages == "auto" else stages,
        "chunked": bool(KNOBS["column_chunked"]),
        "sm_count": _multiprocessor_count(device),
    }


def _rows(t):
    t = t.reshape(-1, t.shape[-1])
    return t if t.stride(-1) == 1 else t.contiguous()


class FusedAddRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, R, W, eps, offset, casting_mode, in_place):
        if casting_mode not in CASTING_MODES:
            raise ValueError(f"casting_mode must be one of {sorted(CASTING_MODES)}, got {casting_mode!r}")
        shape = X.shape
        X2, R2 = _rows(X), _rows(R)
        n_rows, n_cols = X2.shape
        settings = _launch_settings(n_cols, X.device)
        mode = CASTING_MODES[casting_mode]
        Y = torch.empty((n_rows, n_cols), dtype=X.dtype, device=X.device)
        S = torch.empty((n_rows, n_cols), dtype=X.dtype, device=X.device)
        RSTD = torch.empty(n_rows, dtype=torch.float32, device=X.device)
        rows_per_program = KNOBS["fwd_rows_per_program"]
        _forward_kernel[(triton.cdiv(n_rows, rows_per_program),)](
            Y, S, X2, R2, W, RSTD,
            Y.stride(0), S.stride(0), X2.stride(0), R2.stride(0),
            n_rows, n_cols, eps, offset,
            CASTING=mode, BLOCK_SIZE=settings["BLOCK_SIZE"], ROWS_PER_PROGRAM=rows_per_program,
            CHUNKED=settings["chunked"], num_warps=settings["num_warps"],
        )
        ctx.save_for_backward(S, W, RSTD)
        ctx.settings, ctx.mode, ctx.offset, ctx.in_place = settings, mode, offset, in_place
        return Y.view(shape), S.view(shape)

    @staticmethod
    def backward(ctx, dY, dS):
        S, W, RSTD = ctx.saved_tensors
        settings = ctx.settings
        shape = dY.shape
        dY2, dS2 = _rows(dY), _rows(dS)
        n_rows, n_cols = S.shape
        rows_per_program = KNOBS["bwd_rows_per_program"]
        if rows_per_program == "auto":
            rows_per_program = math.ceil(n_rows / settings["sm_count"])
        n_programs = triton.cdiv(n_rows, rows_per_program)
        dX = dY2 if ctx.in_place and dY2.is_contiguous() else torch.empty_like(S)
        dW_partial = torch.empty((n_programs, n_cols), dtype=torch.float32, device=S.device)
        dot = torch.empty(n_rows if settings["chunked"] else 1, dtype=torch.float32, device=S.device)
        _backward_kernel[(n_programs,)](
            dX, dY2, dS2, S, W, RSTD, dW_partial, dot,
            dX.stride(0), dY2.stride(0), dS2.stride(0), S.stride(0), dW_partial.stride(0),
            n_rows, n_cols, ctx.offset, rows_per_program,
            CASTING=ctx.mode, BLOCK_SIZE=settings["BLOCK_SIZE"], CHUNKED=settings["chunked"],
            NUM_STAGES=settings["num_stages"], num_warps=settings["bwd_num_warps"],
        )
        if KNOBS["dw_reduction"] == "triton":
            dW = torch.empty_like(W)
            block_cols = 256
            _sum_rows_kernel[(triton.cdiv(n_cols, block_cols),)](
                dW, dW_partial, n_programs, n_cols, dW_partial.stride(0), BLOCK_COLS=block_cols)
        else:
            dW = dW_partial.sum(dim=0).to(W.dtype)
        dX = dX.view(shape)
        return dX, dX, dW, None, None, None, None


def fused_add_rms_norm(X, R, W, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False):
    """Returns ``(Y, S)`` with ``S = X + R`` and ``Y = RMSNorm(S) * (W + offset)`` (see the module docstring)."""
    return FusedAddRMSNormFunction.apply(X, R, W, eps, offset, casting_mode, in_place)
