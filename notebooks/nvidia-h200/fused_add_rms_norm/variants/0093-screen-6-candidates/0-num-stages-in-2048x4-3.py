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
one program per SM (``bwd_programs_per_sm`` of them), each looping over its share of rows and accumulating a
float32 partial ``dW`` that a final reduction sums. Launch settings are chosen once in the forward and reach the
backward through the autograd context. The knobs reach the algorithms a kernel engineer would try next:

* ``bwd_tile_elements``: the backward walks its rows ``max(1, tile // row block)`` at a time as one 2-D tile,
  so a narrow row no longer leaves a program with a single row's loads in flight;
* ``bwd_column_chunked``: a wide row is walked in ``BLOCK_SIZE``-column chunks instead of held whole in
  registers. ``"per_row"``: two passes over each row (the second re-reads the row while it is still in L2),
  the program's float32 ``dW`` partial updated in place per row; ``"rows_outer"``: first every row's
  ``sum(m * S)``, then columns outermost with a chunk of ``dW`` in registers (re-reads whole rows from DRAM);
* ``fwd_column_chunked``: the forward's two passes over a chunked row (the second re-reads ``S`` from L2);
* ``dw_reduction``: the partials summed by ``torch.sum`` plus a cast, or by one Triton kernel whose programs each
  hold up to 512 partials of their columns in one tile (every partial of one or two programs per SM; the many
  programs of ``bwd_max_rows_per_program`` take several such tiles);
* ``bwd_fused_dw_max_cols``: up to this H the reduction costs no launch of its own. Each program takes a ticket
  from a counter in its group of about sqrt(programs) after storing its partial; the group's last program sums
  the group's partials into a group partial, and the last group to finish sums the group partials into ``dW``
  (cast to W's dtype). The sums run in program order whichever program comes last, so ``dW`` is bitwise the
  same from run to run. One program does the final sum, so it pays off only where rows are narrow;
* ``bwd_elements_per_thread``: how many of a backward step's elements each thread holds when the warps are
  "auto" (fewer: more warps, fewer registers per thread, less spilling on wide float32 rows);
* ``bwd_dw_order``: where a row's ``dW`` term joins the program's accumulator in the one-row and tile loops:
  ``"after_dx"`` (once ``dX`` is stored) or ``"before_dx"`` (right after it is computed, so its registers are
  free while ``dX`` is computed; Liger-Kernel's order). At wide rows the fewer live vectors stop the spills;
  elsewhere the compiler's schedule decides, so it is a per-bucket choice;
* ``bwd_dw_accumulator``: the float32 ``dW`` accumulator of the tile loop (two or more rows per step). ``"row"``:
  one row of H, to which each step adds its tile's column sums; where a tile's rows are spread over several
  warps (16-bit rows up to 2048 columns: a thread loads 8 elements, so fewer threads span a row) that sum
  crosses warps through shared memory and a barrier at every step. ``"tile"``: as many rows as the tile, added
  to element by element, summed over its rows once after the loop: no shared memory in the loop, at the cost of
  a tile's worth of float32 registers. The one-row and chunked walks have no tile and ignore it;
* ``bwd_weight_reload``: hold ``W + offset`` in registers across a program's rows (False), or load it again
  for every row or tile from L2 (True: a row's worth of registers freed for wide rows, one L2 read per row);
* ``bwd_grad_rounding``: ``"autograd"`` rounds the gradients to the input dtype where PyTorch's autograd does
  (``dY * (W + offset)``, the gradient reaching ``S`` through the norm, each row's ``dW`` term); ``"once"``
  keeps them in float32 and rounds ``dX`` and ``dW`` once at the end: closer to the exact (float64) gradient
  than autograd's own, in every casting mode. The forward is the same in both;
* ``bwd_programs_per_sm``: with "auto" rows per program, the rows of one program per SM split between this many
  programs, each walking tiles of ``bwd_tile_elements // bwd_programs_per_sm`` elements (at least one row; a
  number of rows per program leaves grid and tile alone). The warps per SM stay as they were; what may change is
  that an SM's loads, row sums and barriers come from independent programs that need not wait for each other,
  where one program per SM waits on each in turn (H200, trial 0061's NCU profile at 43690x1536 bfloat16: one
  16-warp program per SM, DRAM at 59 % of its peak). Only where the smaller programs fit on an SM together
  (registers per thread times their threads, at most 64 K): else the extra programs run as a second wave, slower.
  More programs with the tile unchanged were slower (2026-12-02, ``reports/evidence/2026-12-02-programs-per-sm/``).
* ``bwd_max_rows_per_program``: with "auto" rows per program, at most this many rows a program (0: no cap), so
  that a large row count runs many short programs while a small one keeps about one program per SM. Where the cap
  binds, a program walks its rows one at a time with warps sized for one row, whatever ``bwd_tile_elements`` says:
  a program then holds one row's registers, and several share an SM. ``torch.compile``'s backward is that design
  (Inductor's mixed-order reduction: 16 rows a program, one row a step, 8 warps, a float32 partial of dW per
  program summed by a second kernel; H200, ``reports/evidence/2026-12-04-inductor-probe/``): at 16384x2304 float32
  it runs 1024 programs of 72 registers, three to an SM, at 80 % of DRAM's peak, where one program per SM with a
  two-row tile (102 registers, one to an SM) reaches 69 %. Where the cap does not bind (fewer rows than cap times
  the programs "auto" makes) nothing changes: the multi-row tiles that fill one program per SM stay. The cost: a
  partial of H floats per program, ``rows / cap`` of them (a sixteenth of a float32 tensor at a cap of 16), and a
  longer reduction.
* ``bwd_row_cap_max_fill``: the row cap binds only where H fills at most this fraction of its row block (1.0: at
  every width). The partials cost the same share of the traffic at every width (at a cap of 16, written once and
  read once beside dY, dS and S read and dX written: about 3 % in float32, 6 % in 16-bit types); what the short
  programs buy is bytes in flight, which the one-program tile lacks where much of its block is masked. H200,
  trials 0081 and 0082 (a cap of 16 with dW before dX, bucket 4096x4 float32): 0.90 of the best's time at
  16384x2304 (the row fills 56 % of its block), 0.95 at 26214x2560 (63 %), 0.99 at 12289x3584 (88 %) and 1.03 at
  16384x3840 (94 %), where the tile was already at 92 % of the copy floor
  (``reports/evidence/2026-12-04-bench-models-best-0073/``).
* ``bwd_ds_load``: when the unchunked loops load a row's ``dS_out``: ``"after_sum"``, once its ``sum(m * S)`` is
  known, or ``"with_row"``, beside its ``dY`` and ``S``. A row's sum crosses warps through shared memory behind
  barriers, and no load is issued across a barrier: after the sum, the load's whole DRAM latency stands between
  the sum and ``dX``, every row; beside the others it is in flight during the sum, as in ``torch.compile``'s
  backward, at the cost of the row's ``dS_out`` held in registers across the sum (the compiled code for the H200,
  Triton 3.6, at 32768x1152 float32 with 16 rows a program: ``reports/evidence/2026-12-05-ds-load-order/``). A row
  loop Triton pipelines (``num_stages`` 3 in trial 0085's bucket 4096x2) loads later rows ahead through shared memory
  already.
* ``fwd_w_load``: the same choice for the forward's ``W`` in a row held whole: ``"after_sum"``, once the row's
  ``rstd`` is known (an L2 round trip after the row's sum, every row), or ``"with_row"``, beside ``X`` and ``R``
  (``W + offset`` held in registers across the sum). A row walked in chunks reads ``W`` in its second pass alone.

Per-shape specialisation: ``DISPATCH`` maps a shape bucket to the knobs that differ from ``KNOBS`` there. The
bucket is ``"<row block>x<element bytes>"``: the row's width rounded up to a power of two (the block a program
holds a row in, so every width of a bucket runs the same compiled kernels) and the dtype's size, e.g.
``"8192x2"`` for 4097 to 8192 columns of bfloat16 or float16 (``liger_perf.kernel.variants.dispatch_bucket``
computes the same key). The forward picks the knobs once; the backward reuses them.
"""

import math

import torch
import triton
import triton.language as tl

# Tunable knobs: the optimizer writes new variants by changing these values (allowed values in KNOB_CHOICES).
KNOBS = {
    "BLOCK_SIZE": 16384,  # columns a chunked pass holds at once; "auto": next power of two of H (whole row)
    "num_warps": "auto",  # "auto": 4, 8, 16 or 32 by the elements a program holds at once
    "num_stages": "auto",  # software pipelining of the backward's row loop; "auto": Triton's default
    "bwd_num_warps": "same",  # "same": as num_warps says (a number, or "auto" on the backward's own tile)
    "fwd_rows_per_program": 1,
    "bwd_rows_per_program": "auto",  # "auto": ceil(rows / SM count), i.e. one program per SM
    "bwd_tile_elements": 8192,  # elements per backward step: "row" (one row), or rows = max(1, this // row)
    "fwd_column_chunked": False,  # walk each row in BLOCK_SIZE chunks in the forward (if BLOCK_SIZE < H)
    "bwd_column_chunked": "per_row",  # False, "per_row" or "rows_outer" (if BLOCK_SIZE < H; see the docstring)
    "dw_reduction": "triton",  # how the per-program float32 dW partials are summed: "torch" or "triton"
    "bwd_fused_dw_max_cols": 0,  # up to this H the backward sums the dW partials itself (no extra launch)
    "bwd_elements_per_thread": "auto",  # elements a thread holds when warps are "auto"; "auto": by tile size
    "bwd_grad_rounding": "once",  # "once": gradients rounded once, at the end; "autograd": where autograd rounds
    "bwd_dw_order": "after_dx",  # when a row's dW term is added up: "after_dx" or "before_dx" (fewer live registers)
    "bwd_weight_reload": False,  # True: W + offset loaded per row (or tile) from L2 instead of held in registers
    "bwd_dw_accumulator": "row",  # the tile loop's dW accumulator: "row" (summed over the tile every step) or "tile"
    "bwd_programs_per_sm": 1,  # programs an SM's rows are split between, each walking tiles this many times smaller
    "bwd_max_rows_per_program": 0,  # with "auto" rows per program: at most this many (0: no cap), more programs
    "bwd_row_cap_max_fill": 1.0,  # the row cap binds only where H is at most this fraction of its row block
    "bwd_ds_load": "after_sum",  # when a row's dS_out is loaded: "after_sum" (of m * S) or "with_row" (with dY, S)
    "fwd_w_load": "after_sum",  # when the forward loads W: "after_sum" (of S^2) or "with_row" (with X and R)
}
KNOB_CHOICES = {
    "BLOCK_SIZE": ["auto", 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536],
    "num_warps": ["auto", 1, 2, 4, 8, 16, 32],
    "num_stages": ["auto", 1, 2, 3, 4],
    "bwd_num_warps": ["same", "auto", 1, 2, 4, 8, 16, 32],
    "fwd_rows_per_program": [1, 2, 4, 8],
    "bwd_rows_per_program": ["auto", 1, 2, 4, 8, 16, 32, 64, 128],
    "bwd_tile_elements": ["row", 256, 512, 1024, 2048, 4096, 8192, 16384, 32768],
    "fwd_column_chunked": [False, True],
    "bwd_column_chunked": [False, "per_row", "rows_outer"],
    "dw_reduction": ["torch", "triton"],
    "bwd_fused_dw_max_cols": [0, 1024, 2048, 4096, 8192, 16384, 32768],
    "bwd_elements_per_thread": ["auto", 4, 8, 16, 32, 64],
    "bwd_grad_rounding": ["autograd", "once"],
    "bwd_dw_order": ["after_dx", "before_dx"],
    "bwd_weight_reload": [False, True],
    "bwd_dw_accumulator": ["row", "tile"],
    "bwd_programs_per_sm": [1, 2, 4],
    "bwd_max_rows_per_program": [0, 8, 16, 32, 64],
    "bwd_row_cap_max_fill": [1.0, 0.875, 0.75, 0.625],
    "bwd_ds_load": ["after_sum", "with_row"],
    "fwd_w_load": ["after_sum", "with_row"],
}
#: Bucket -> knobs that differ from KNOBS at the shapes in it (see the module docstring); tuned one bucket at a time.
DISPATCH = {
    "1024x2": {"bwd_dw_accumulator": "tile"},
    "2048x2": {"bwd_dw_accumulator": "tile", "num_stages": 3},
    "2048x4": {"bwd_programs_per_sm": 2, "num_stages": 3},
    "4096x2": {"num_stages": 3},
    "8192x2": {"bwd_dw_order": "before_dx", "bwd_tile_elements": 16384},
    "16384x2": {"bwd_dw_order": "before_dx", "bwd_weight_reload": True},
    "16384x4": {"bwd_dw_order": "before_dx", "bwd_weight_reload": True},
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
    W_WITH_ROW: tl.constexpr,
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
                if W_WITH_ROW:
                    w = tl.load(W + cols, mask=mask, other=0.0)
                s = x + r
                tl.store(S + row64 * stride_s + cols, s, mask=mask)
                rstd = _rstd(_sum_of_squares(s, CASTING), n_cols, eps, S.dtype.element_ty, CASTING)
                tl.store(RSTD + row64, rstd)
                if not W_WITH_ROW:
                    w = tl.load(W + cols, mask=mask, other=0.0)
                wo = _weight_factor(w, offset, CASTING)
                tl.store(Y + row64 * stride_y + cols, _normalize(s, wo, rstd, CASTING), mask=mask)


@triton.jit
def _row_grads(dy, s, wo, rstd, n_cols, CASTING: tl.constexpr, ROUND_ONCE: tl.constexpr):
    """dS (from Y alone) and this row's dW contribution, in float32, following the casting mode's graph
    (``ROUND_ONCE``: without the graph's intermediate roundings)."""
    s32 = s.to(tl.float32)
    dy32 = dy.to(tl.float32)
    if CASTING == _GEMMA or ROUND_ONCE:
        m = dy32 * wo
        dw = dy32 * (s32 * rstd)
    else:
        # llama and none: autograd sees dY * (W + offset) in the input dtype, and dW = dY * (S * rstd) rounded.
        m = (dy32 * wo).to(dy.dtype).to(tl.float32)
        dw = (dy32 * (s32 * rstd).to(dy.dtype).to(tl.float32)).to(dy.dtype).to(tl.float32)
    return m, dw


@triton.jit
def _add_residual_grad(dnorm, ds, CASTING: tl.constexpr, ROUND_ONCE: tl.constexpr):
    """dS_total = dS(through Y) + dS_out, rounded as autograd rounds it: the gradient reaching S through the
    norm is cast to the input dtype first (at the float32 cast in llama and gemma), then the sum in that dtype.
    ``ROUND_ONCE``: the sum in float32, rounded once (closer to the exact gradient than autograd's)."""
    if not ROUND_ONCE:
        dnorm = dnorm.to(ds.dtype).to(tl.float32)
    return (dnorm + ds.to(tl.float32)).to(ds.dtype)


_UNCHUNKED: tl.constexpr = tl.constexpr(0)
_PER_ROW: tl.constexpr = tl.constexpr(1)
_ROWS_OUTER: tl.constexpr = tl.constexpr(2)
CHUNK_MODES = {False: 0, "per_row": 1, "rows_outer": 2}


@triton.jit
def _dx(m, s, rstd, dot, ds, n_cols, CASTING: tl.constexpr, ROUND_ONCE: tl.constexpr):
    """dS_total for a row (or a tile of rows, with ``rstd`` and ``dot`` broadcast along the columns)."""
    dnorm = rstd * m - (rstd * rstd * rstd / n_cols) * dot * s.to(tl.float32)
    return _add_residual_grad(dnorm, ds, CASTING, ROUND_ONCE)


@triton.jit
def _backward_kernel(
    DX, DY, DS, S, W, RSTD, DW_PARTIAL, DOT, DW, GROUP_PARTIAL, COUNTERS,
    stride_dx, stride_dy, stride_ds, stride_s, stride_dw, stride_gp,
    n_rows, n_cols, offset, rows_per_program, n_programs, group_size,
    CASTING: tl.constexpr, BLOCK_SIZE: tl.constexpr, CHUNK_MODE: tl.constexpr, TILE_ROWS: tl.constexpr,
    NUM_STAGES: tl.constexpr, FUSED_DW: tl.constexpr, REDUCE_COLS: tl.constexpr, ROUND_ONCE: tl.constexpr,
    DW_BEFORE_DX: tl.constexpr, RELOAD_W: tl.constexpr, DW_TILE: tl.constexpr, DS_WITH_ROW: tl.constexpr,
):
    pid = tl.program_id(0)
    row_start = pid * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, n_rows)
    cols = tl.arange(0, BLOCK_SIZE)
    if CHUNK_MODE == _PER_ROW:
        # Two passes over each row: the first computes sum(m * S) and asks L2 to keep the row, the second
        # re-reads it from there. dW cannot stay in registers across a wide row's chunks, so this program's
        # float32 partial is updated in place, row by row (it stays in L2: one row of H floats per program).
        for row in range(row_start, row_end):
            row64 = tl.cast(row, tl.int64)
            rstd = tl.load(RSTD + row64)
            dot = tl.zeros((), dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_SIZE):
                c = start + cols
                mask = c < n_cols
                dy = tl.load(DY + row64 * stride_dy + c, mask=mask, other=0.0, eviction_policy="evict_last")
                s = tl.load(S + row64 * stride_s + c, mask=mask, other=0.0, eviction_policy="evict_last")
                wo = _weight_factor(tl.load(W + c, mask=mask, other=0.0), offset, CASTING)
                m, _ = _row_grads(dy, s, wo, rstd, n_cols, CASTING, ROUND_ONCE)
                dot += tl.sum(m * s.to(tl.float32), axis=0)
            for start in range(0, n_cols, BLOCK_SIZE):
                c = start + cols
                mask = c < n_cols
                dy = tl.load(DY + row64 * stride_dy + c, mask=mask, other=0.0, eviction_policy="evict_first")
                s = tl.load(S + row64 * stride_s + c, mask=mask, other=0.0, eviction_policy="evict_first")
                wo = _weight_factor(tl.load(W + c, mask=mask, other=0.0), offset, CASTING)
                m, dw = _row_grads(dy, s, wo, rstd, n_cols, CASTING, ROUND_ONCE)
                ds = tl.load(DS + row64 * stride_ds + c, mask=mask, other=0.0, eviction_policy="evict_first")
                tl.store(DX + row64 * stride_dx + c, _dx(m, s, rstd, dot, ds, n_cols, CASTING, ROUND_ONCE), mask=mask)
                partial = DW_PARTIAL + tl.cast(pid, tl.int64) * stride_dw + c
                # The first row starts the partial: no zero-fill launch, no read of uninitialised memory.
                dw += tl.load(partial, mask=mask & (c * 0 + row > row_start), other=0.0)
                tl.store(partial, dw, mask=mask)
    elif CHUNK_MODE == _ROWS_OUTER:
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
                m, _ = _row_grads(dy, s, wo, rstd, n_cols, CASTING, ROUND_ONCE)
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
                m, dw = _row_grads(dy, s, wo, rstd, n_cols, CASTING, ROUND_ONCE)
                ds = tl.load(DS + row64 * stride_ds + c, mask=mask, other=0.0)
                tl.store(DX + row64 * stride_dx + c, _dx(m, s, rstd, tl.load(DOT + row64), ds, n_cols, CASTING, ROUND_ONCE),
                         mask=mask)
                dw_acc += dw
            tl.store(DW_PARTIAL + tl.cast(pid, tl.int64) * stride_dw + c, dw_acc, mask=mask)
    elif TILE_ROWS == 1:
        mask = cols < n_cols
        if not RELOAD_W:
            held_wo = _weight_factor(tl.load(W + cols, mask=mask, other=0.0), offset, CASTING)
        dw_acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
        for row in tl.range(row_start, row_end, num_stages=NUM_STAGES):
            row64 = tl.cast(row, tl.int64)
            if RELOAD_W:
                wo = _weight_factor(tl.load(W + cols, mask=mask, other=0.0), offset, CASTING)
            else:
                wo = held_wo
            rstd = tl.load(RSTD + row64)
            dy = tl.load(DY + row64 * stride_dy + cols, mask=mask, other=0.0)
            s = tl.load(S + row64 * stride_s + cols, mask=mask, other=0.0)
            if DS_WITH_ROW:
                ds = tl.load(DS + row64 * stride_ds + cols, mask=mask, other=0.0)
            m, dw = _row_grads(dy, s, wo, rstd, n_cols, CASTING, ROUND_ONCE)
            if DW_BEFORE_DX:
                dw_acc += dw
            dot = tl.sum(m * s.to(tl.float32), axis=0)
            if not DS_WITH_ROW:
                ds = tl.load(DS + row64 * stride_ds + cols, mask=mask, other=0.0)
            tl.store(DX + row64 * stride_dx + cols, _dx(m, s, rstd, dot, ds, n_cols, CASTING, ROUND_ONCE), mask=mask)
            if not DW_BEFORE_DX:
                dw_acc += dw
        tl.store(DW_PARTIAL + tl.cast(pid, tl.int64) * stride_dw + cols, dw_acc, mask=mask)
    else:
        # TILE_ROWS rows per step as one [TILE_ROWS, BLOCK_SIZE] tile: more independent loads in flight per
        # program where a row is narrow. Rows past this program's share are masked (their dY loads as 0, so
        # their dW contribution is 0).
        col_mask = cols < n_cols
        if not RELOAD_W:
            held_wo = _weight_factor(tl.load(W + cols, mask=col_mask, other=0.0), offset, CASTING)[None, :]
        if DW_TILE:  # summed over its rows after the loop: the loop's only cross-warp sum is each row's dot
            dw_tile = tl.zeros((TILE_ROWS, BLOCK_SIZE), dtype=tl.float32)
        else:
            dw_acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
        tile = tl.arange(0, TILE_ROWS)
        for first in tl.range(row_start, row_end, TILE_ROWS, num_stages=NUM_STAGES):
            if RELOAD_W:
                wo = _weight_factor(tl.load(W + cols, mask=col_mask, other=0.0), offset, CASTING)[None, :]
            else:
                wo = held_wo
            rows = first + tile
            row_mask = rows < row_end
            rows64 = rows.to(tl.int64)[:, None]
            mask = row_mask[:, None] & col_mask[None, :]
            rstd = tl.load(RSTD + rows64, mask=row_mask[:, None], other=0.0)
            dy = tl.load(DY + rows64 * stride_dy + cols[None, :], mask=mask, other=0.0)
            s = tl.load(S + rows64 * stride_s + cols[None, :], mask=mask, other=0.0)
            if DS_WITH_ROW:
                ds = tl.load(DS + rows64 * stride_ds + cols[None, :], mask=mask, other=0.0)
            m, dw = _row_grads(dy, s, wo, rstd, n_cols, CASTING, ROUND_ONCE)
            if DW_BEFORE_DX:
                if DW_TILE:
                    dw_tile += dw
                else:
                    dw_acc += tl.sum(dw, axis=0)
            dot = tl.sum(m * s.to(tl.float32), axis=1)[:, None]
            if not DS_WITH_ROW:
                ds = tl.load(DS + rows64 * stride_ds + cols[None, :], mask=mask, other=0.0)
            tl.store(DX + rows64 * stride_dx + cols[None, :], _dx(m, s, rstd, dot, ds, n_cols, CASTING, ROUND_ONCE), mask=mask)
            if not DW_BEFORE_DX:
                if DW_TILE:
                    dw_tile += dw
                else:
                    dw_acc += tl.sum(dw, axis=0)
        if DW_TILE:
            dw_acc = tl.sum(dw_tile, axis=0)
        tl.store(DW_PARTIAL + tl.cast(pid, tl.int64) * stride_dw + cols, dw_acc, mask=col_mask)
    if FUSED_DW:
        _finish_dw(DW, DW_PARTIAL, GROUP_PARTIAL, COUNTERS, pid, n_programs, group_size, n_cols, stride_dw,
                   stride_gp, REDUCE_COLS, 8)


@triton.jit
def _sum_partial_rows(PARTIAL, n_partials, stride_p, cols, col_mask, BLOCK_COLS: tl.constexpr,
                      BLOCK_PARTIALS: tl.constexpr):
    """Float32 sum of rows ``0 .. n_partials - 1`` of ``PARTIAL`` at ``cols``, always in the same order.

    A [BLOCK_PARTIALS, BLOCK_COLS] tile per step: the partials are few and short, so a serial walk over them
    would be one round trip to memory per partial. ``.cg`` reads from L2, where other programs' stores are."""
    parts = tl.arange(0, BLOCK_PARTIALS)
    acc = tl.zeros((BLOCK_COLS,), dtype=tl.float32)
    for first in range(0, n_partials, BLOCK_PARTIALS):
        p = first + parts
        mask = (p < n_partials)[:, None] & col_mask[None, :]
        # 64-bit offsets: partials times columns may pass 2**31 (one row per program on a large input).
        tile = tl.load(PARTIAL + p.to(tl.int64)[:, None] * stride_p + cols[None, :], mask=mask, other=0.0,
                       cache_modifier=".cg")
        acc += tl.sum(tile, axis=0)
    return acc


@triton.jit
def _sum_rows_kernel(OUT, PARTIAL, n_partials, n_cols, stride_p, BLOCK_COLS: tl.constexpr,
                     BLOCK_PARTIALS: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    col_mask = cols < n_cols
    acc = _sum_partial_rows(PARTIAL, n_partials, stride_p, cols, col_mask, BLOCK_COLS, BLOCK_PARTIALS)
    tl.store(OUT + cols, acc.to(OUT.dtype.element_ty), mask=col_mask)


@triton.jit
def _finish_dw(DW, DW_PARTIAL, GROUP_PARTIAL, COUNTERS, pid, n_programs, group_size, n_cols, stride_dw, stride_gp,
               BLOCK_COLS: tl.constexpr, BLOCK_PARTIALS: tl.constexpr):
    """The dW reduction inside the backward launch (``bwd_fused_dw_max_cols``): the last program of each group
    sums its group's partials, the last group's summer sums the group partials into ``DW``.

    ``COUNTERS[0]`` counts finished groups, ``COUNTERS[1 + g]`` finished programs of group g; each is put back
    to 0 by the program that reads the last ticket, ready for the next launch on the stream. Which program is
    last varies, what it sums and in which order does not: the result is deterministic."""
    # Every thread's partial store is issued before the ticket is taken (bar.sync, then the atomic's release
    # at GPU scope); the acquire of the last ticket makes all of the group's stores visible to its reader.
    tl.debug_barrier()
    group = pid // group_size
    first = group * group_size
    members = tl.minimum(group_size, n_programs - first)
    n_groups = tl.cdiv(n_programs, group_size)
    ticket = tl.atomic_add(COUNTERS + 1 + group, 1, sem="acq_rel")
    if ticket == members - 1:
        tl.atomic_xchg(COUNTERS + 1 + group, 0)
        group_rows = DW_PARTIAL + tl.cast(first, tl.int64) * stride_dw
        for start in range(0, n_cols, BLOCK_COLS):
            cols = start + tl.arange(0, BLOCK_COLS)
            col_mask = cols < n_cols
            acc = _sum_partial_rows(group_rows, members, stride_dw, cols, col_mask, BLOCK_COLS, BLOCK_PARTIALS)
            tl.store(GROUP_PARTIAL + tl.cast(group, tl.int64) * stride_gp + cols, acc, mask=col_mask)
        tl.debug_barrier()
        groups_done = tl.atomic_add(COUNTERS, 1, sem="acq_rel")
        if groups_done == n_groups - 1:
            tl.atomic_xchg(COUNTERS, 0)
            for start in range(0, n_cols, BLOCK_COLS):
                cols = start + tl.arange(0, BLOCK_COLS)
                col_mask = cols < n_cols
                acc = _sum_partial_rows(GROUP_PARTIAL, n_groups, stride_gp, cols, col_mask, BLOCK_COLS,
                                        BLOCK_PARTIALS)
                tl.store(DW + cols, acc.to(DW.dtype.element_ty), mask=col_mask)


# Ticket counters of the fused dW reduction, one zeroed buffer per (device, stream): a launch leaves its
# counters at 0, and launches on one stream never overlap. Allocated (one zero fill) on first use only.
_TICKET_COUNTERS: dict = {}


def _ticket_counters(device, count):
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (str(device), stream)
    counters = _TICKET_COUNTERS.get(key)
    if counters is None or counters.numel() < count:
        counters = torch.zeros(max(count, 64), dtype=torch.int32, device=device)
        _TICKET_COUNTERS[key] = counters
    return counters


def _multiprocessor_count(device):
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # the interpreter: a few programs, so that rows are still split unevenly between them


def _warps_for(elements, per_thread="auto"):
    if per_thread == "auto":
        return 32 if elements >= 32768 else 16 if elements >= 8192 else 8 if elements >= 2048 else 4
    # A power of two between 1 and 32 warps (32 threads each) holding about ``per_thread`` elements per thread.
    return min(32, max(1, triton.next_power_of_2(triton.cdiv(elements, 32 * per_thread))))


def _knobs_for(n_cols, dtype):
    """KNOBS, overridden by the DISPATCH entry of the bucket ``n_cols`` columns of ``dtype`` fall in."""
    bucket = f"{triton.next_power_of_2(n_cols)}x{dtype.itemsize}"
    return {**KNOBS, **DISPATCH.get(bucket, {})}


def _launch_settings(n_cols, dtype, device):
    """Block sizes, tile, warps and stages of both passes, chosen once in the forward and reused by the
    backward (through the autograd context), with the knobs of the shape's bucket."""
    knobs = _knobs_for(n_cols, dtype)
    row_block = triton.next_power_of_2(n_cols)
    chunk = row_block if knobs["BLOCK_SIZE"] == "auto" else min(knobs["BLOCK_SIZE"], row_block)
    fwd_chunked = bool(knobs["fwd_column_chunked"]) and chunk < row_block
    bwd_chunking = knobs["bwd_column_chunked"] if chunk < row_block else False
    fwd_block = chunk if fwd_chunked else row_block
    bwd_block = chunk if bwd_chunking else row_block
    tile = knobs["bwd_tile_elements"]
    # The split acts where "auto" rows per program size the grid: there an SM's tile, split between ``split``
    # programs, keeps its elements in flight (tile // split each).
    split = knobs["bwd_programs_per_sm"] if knobs["bwd_rows_per_program"] == "auto" else 1
    tile_rows = 1 if bwd_chunking or tile == "row" else max(1, tile // split // bwd_block)
    warps = knobs["num_warps"]
    bwd_warps = warps if knobs["bwd_num_warps"] == "same" else knobs["bwd_num_warps"]
    stages = knobs["num_stages"]
    return {
        "knobs": knobs,
        "BLOCK_SIZE": fwd_block,
        "num_warps": _warps_for(fwd_block) if warps == "auto" else warps,
        "bwd_BLOCK_SIZE": bwd_block,
        "bwd_chunk_mode": CHUNK_MODES[bwd_chunking],
        "bwd_tile_rows": tile_rows,
        "bwd_num_warps": (_warps_for(tile_rows * bwd_block, knobs["bwd_elements_per_thread"]) if bwd_warps == "auto"
                          else bwd_warps),
        # where bwd_max_rows_per_program binds, a step is one row (see the backward)
        "bwd_one_row_num_warps": (_warps_for(bwd_block, knobs["bwd_elements_per_thread"]) if bwd_warps == "auto"
                                  else bwd_warps),
        "num_stages": None if stages == "auto" else stages,
        "bwd_dw_before_dx": knobs["bwd_dw_order"] == "before_dx",
        "bwd_ds_with_row": knobs["bwd_ds_load"] == "with_row",
        "fwd_w_with_row": knobs["fwd_w_load"] == "with_row",
        "bwd_reload_w": bool(knobs["bwd_weight_reload"]),
        "bwd_dw_tile": knobs["bwd_dw_accumulator"] == "tile" and tile_rows > 1,
        "fwd_chunked": fwd_chunked,
        "sm_count": _multiprocessor_count(device),
        "bwd_programs_per_sm": split,
        # the cap acts on "auto" rows per program alone, and only at rows filling at most the knob's share of the
        # block (near a full block the tile is near the copy floor and the partials' traffic is all the cap adds)
        "bwd_max_rows_per_program": (knobs["bwd_max_rows_per_program"] if knobs["bwd_rows_per_program"] == "auto"
                                     and n_cols <= knobs["bwd_row_cap_max_fill"] * row_block else 0),
    }


#: Elements of the dW reduction's [partials, columns] tile: 32 float32 values a thread at 4 warps.
REDUCTION_TILE_ELEMENTS = 4096


def _reduction_tile(n_partials):
    """``(BLOCK_PARTIALS, BLOCK_COLS)`` of ``_sum_rows_kernel``: up to 512 partials (one or two per SM, the
    default grid and ``bwd_programs_per_sm = 2``, fit) in one tile, so each program issues all its loads at once
    and waits for memory once; the columns narrowed to match, which also spreads a row over more programs (more
    partials, as a row cap makes at large row counts, are walked 512 at a time). A
    serial walk over [32, 128] tiles made the reduction latency-bound: 8.3 us for 131 partials of 896 columns in
    7 programs (H200, trial 0061's NCU profile at 12289x896 bfloat16), against 34.8 us for the backward kernel
    itself."""
    # At least 32 partials a tile: fewer distinct tiles (and compilations) where the grid is small.
    # At most 512: a row of the tile is then 8 float32 columns, one 32-byte sector.
    block_partials = min(512, max(32, triton.next_power_of_2(n_partials)))
    return block_partials, REDUCTION_TILE_ELEMENTS // block_partials


_INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _check_inputs(X, R, W, eps, offset):
    """One clear line for an input the kernels would read wrongly (out of bounds, or rounded through float32)."""
    for name, t in (("X", X), ("R", R), ("W", W)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"fused_add_rms_norm: {name} must be a tensor, got {t!r:.60}")
    if X.dtype not in _INPUT_DTYPES:
        raise TypeError(f"fused_add_rms_norm takes X and R in float32, bfloat16 or float16, got {X.dtype}")
    if R.dtype != X.dtype:
        raise TypeError(f"fused_add_rms_norm: R must have X's dtype {X.dtype}, got {R.dtype}")
    if R.shape != X.shape:
        raise ValueError(f"fused_add_rms_norm: R must have X's shape {tuple(X.shape)}, got {tuple(R.shape)}")
    if X.dim() == 0 or X.shape[-1] == 0:
        raise ValueError(f"fused_add_rms_norm normalizes the last dimension: X needs one of size >= 1, "
                         f"got shape {tuple(X.shape)}")
    if W.shape != X.shape[-1:]:
        raise ValueError(f"fused_add_rms_norm: W must have shape ({X.shape[-1]},) (X's last dimension), "
                         f"got {tuple(W.shape)}")
    if not W.dtype.is_floating_point:
        raise TypeError(f"fused_add_rms_norm: W must be a floating-point tensor, got {W.dtype}")
    if X.device.type == "meta":
        raise ValueError("fused_add_rms_norm runs its kernels on data: X is on the meta device (move it to the GPU)")
    if R.device != X.device or W.device != X.device:
        raise ValueError(f"fused_add_rms_norm: X, R and W must be on one device, got {X.device}, {R.device} "
                         f"and {W.device}")
    for name, value in (("eps", eps), ("offset", offset)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"fused_add_rms_norm: {name} must be a Python number, got {value!r:.60}")


def _rows(t):
    t = t.reshape(-1, t.shape[-1])
    return t if t.stride(-1) == 1 else t.contiguous()


def _refuse_double_backward():
    # Autograd enables grad mode in a backward only under create_graph=True. These kernels are no autograd graph,
    # so a second derivative through them would be silently zero: refuse it.
    if torch.is_grad_enabled():
        raise RuntimeError("fused_add_rms_norm is differentiable once: its backward cannot run with "
                           "create_graph=True")


class FusedAddRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, R, W, eps, offset, casting_mode, in_place):
        if casting_mode not in CASTING_MODES:
            raise ValueError(f"casting_mode must be one of {sorted(CASTING_MODES)}, got {casting_mode!r}")
        _check_inputs(X, R, W, eps, offset)
        shape = X.shape
        X2, R2 = _rows(X), _rows(R)
        W = W.contiguous()  # the kernels index W by column alone (a strided W is copied: H elements)
        n_rows, n_cols = X2.shape
        settings = _launch_settings(n_cols, X.dtype, X.device)
        mode = CASTING_MODES[casting_mode]
        # Y and S in X's shape, the kernels writing their row views: a returned view of a tensor made here would
        # refuse an in-place update (``Y.mul_(2)``) that PyTorch's own outputs take.
        Y_out = torch.empty(shape, dtype=X.dtype, device=X.device)
        S_out = torch.empty(shape, dtype=X.dtype, device=X.device)
        Y, S = Y_out.view(n_rows, n_cols), S_out.view(n_rows, n_cols)
        RSTD = torch.empty(n_rows, dtype=torch.float32, device=X.device)
        rows_per_program = settings["knobs"]["fwd_rows_per_program"]
        _forward_kernel[(max(1, triton.cdiv(n_rows, rows_per_program)),)](
            Y, S, X2, R2, W, RSTD,
            Y.stride(0), S.stride(0), X2.stride(0), R2.stride(0),
            n_rows, n_cols, eps, offset,
            CASTING=mode, BLOCK_SIZE=settings["BLOCK_SIZE"], ROWS_PER_PROGRAM=rows_per_program,
            CHUNKED=settings["fwd_chunked"], W_WITH_ROW=settings["fwd_w_with_row"], num_warps=settings["num_warps"],
        )
        # S_out itself, not the row view made here (with grad off): an in-place change of the returned S before the
        # backward then meets autograd's own "modified by an inplace operation" error, not a misleading one.
        ctx.save_for_backward(S_out, W, RSTD)
        ctx.settings, ctx.mode, ctx.offset, ctx.in_place = settings, mode, offset, in_place
        return Y_out, S_out

    @staticmethod
    def backward(ctx, dY, dS):
        _refuse_double_backward()
        S, W, RSTD = ctx.saved_tensors
        S = S.view(-1, S.shape[-1])
        settings = ctx.settings
        knobs = settings["knobs"]
        shape = dY.shape
        dY2, dS2 = _rows(dY), _rows(dS)
        n_rows, n_cols = S.shape
        if n_rows == 0:  # nothing to launch: dX is empty and dW a sum over no rows
            dX = torch.empty_like(S).view(shape)
            return dX, dX, torch.zeros_like(W), None, None, None, None
        rows_per_program = knobs["bwd_rows_per_program"]
        tile_rows, num_warps, dw_tile = settings["bwd_tile_rows"], settings["bwd_num_warps"], settings["bwd_dw_tile"]
        if rows_per_program == "auto":
            rows_per_program = math.ceil(n_rows / (settings["sm_count"] * settings["bwd_programs_per_sm"]))
            cap = settings["bwd_max_rows_per_program"]
            if cap and rows_per_program > cap:
                # Many short programs: one row a step, so that each holds one row's registers and several share
                # an SM (a multi-row tile is what fills one program per SM, the case the cap leaves).
                rows_per_program, tile_rows, num_warps, dw_tile = cap, 1, settings["bwd_one_row_num_warps"], False
        n_programs = triton.cdiv(n_rows, rows_per_program)
        dX = dY2 if ctx.in_place and dY2.is_contiguous() else torch.empty_like(S)
        dW_partial = torch.empty((n_programs, n_cols), dtype=torch.float32, device=S.device)
        rows_outer = settings["bwd_chunk_mode"] == CHUNK_MODES["rows_outer"]
        dot = torch.empty(n_rows if rows_outer else 1, dtype=torch.float32, device=S.device)
        fused_dw = n_cols <= knobs["bwd_fused_dw_max_cols"]
        group_size = math.isqrt(n_programs - 1) + 1  # ceil(sqrt(programs)): both reduction levels equally long
        n_groups = triton.cdiv(n_programs, group_size)
        if fused_dw:
            dW = torch.empty_like(W)
            group_partial = torch.empty((n_groups, n_cols), dtype=torch.float32, device=S.device)
            counters = _ticket_counters(S.device, 1 + n_groups)
        else:
            dW, group_partial, counters = dot, dot, dot  # unused by the kernel
        _backward_kernel[(n_programs,)](
            dX, dY2, dS2, S, W, RSTD, dW_partial, dot, dW, group_partial, counters,
            dX.stride(0), dY2.stride(0), dS2.stride(0), S.stride(0), dW_partial.stride(0), group_partial.stride(0),
            n_rows, n_cols, ctx.offset, rows_per_program, n_programs, group_size,
            CASTING=ctx.mode, BLOCK_SIZE=settings["bwd_BLOCK_SIZE"], CHUNK_MODE=settings["bwd_chunk_mode"],
            TILE_ROWS=tile_rows, NUM_STAGES=settings["num_stages"], FUSED_DW=fused_dw,
            REDUCE_COLS=min(1024, triton.next_power_of_2(n_cols)), ROUND_ONCE=knobs["bwd_grad_rounding"] == "once",
            DW_BEFORE_DX=settings["bwd_dw_before_dx"], RELOAD_W=settings["bwd_reload_w"],
            DW_TILE=dw_tile, DS_WITH_ROW=settings["bwd_ds_with_row"], num_warps=num_warps,
        )
        if not fused_dw and knobs["dw_reduction"] == "triton":
            dW = torch.empty_like(W)
            block_partials, block_cols = _reduction_tile(n_programs)
            _sum_rows_kernel[(triton.cdiv(n_cols, block_cols),)](
                dW, dW_partial, n_programs, n_cols, dW_partial.stride(0), BLOCK_COLS=block_cols,
                BLOCK_PARTIALS=block_partials)
        elif not fused_dw:
            dW = dW_partial.sum(dim=0).to(W.dtype)
        dX = dX.view(shape)
        return dX, dX, dW, None, None, None, None


def fused_add_rms_norm(X, R, W, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False):
    """Returns ``(Y, S)`` with ``S = X + R`` and ``Y = RMSNorm(S) * (W + offset)`` (see the module docstring).

    ``in_place=True`` lets the backward write dX into dY's buffer (Liger's contract: saves one allocation). Use it
    only where nothing else reads that gradient buffer: when ``Y`` also feeds an add, autograd hands both branches
    one buffer and the other branch would read dX. The default, ``False``, is always safe."""
    return FusedAddRMSNormFunction.apply(X, R, W, eps, offset, casting_mode, in_place)
