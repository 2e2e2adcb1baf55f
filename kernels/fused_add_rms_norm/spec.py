"""Spec of ``fused_add_rms_norm``: S = X + R; Y = RMSNorm(S) * (W + offset); returns (Y, S)."""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import nn

from liger_perf.spec import Footprint, KernelSpec, Remedy, Tolerance, Tolerances

HIDDEN_SIZES = (1024, 2048, 4096, 8192, 16384, 32768)

_CHUNK = "walk each row in BLOCK_SIZE-column chunks, so that a thread holds one chunk in registers, not the row"
# Widest chunks first after the first: a chunk size that loses at a narrower H than the one that spills is
# followed by one that leaves that H alone.
_CHUNKED_BWD = [
    Remedy({"bwd_column_chunked": "per_row", "BLOCK_SIZE": 8192},
           _CHUNK + " (8192 columns), twice per row: the second pass re-reads the row from L2 and updates the "
           "program's float32 dW partial in place", "backward no longer spills at H > 8192: several times faster "
           "there (DRAM bytes unchanged, L2 absorbs the re-read); H <= 8192 unchanged"),
    Remedy({"bwd_column_chunked": "per_row", "BLOCK_SIZE": 16384}, _CHUNK + " (16384 columns, two passes per row)",
           "backward spills less at H = 32768; unchanged below"),
    Remedy({"bwd_column_chunked": "per_row", "BLOCK_SIZE": 4096}, _CHUNK + " (4096 columns, two passes per row)",
           "backward no longer spills at H > 4096; fewer registers per thread, higher occupancy"),
    Remedy({"bwd_column_chunked": "rows_outer", "BLOCK_SIZE": 8192}, _CHUNK + " (8192 columns), columns "
           "outermost with a chunk of dW in registers", "backward no longer spills at H > 8192, at the cost of "
           "re-reading dY and S from DRAM"),
]
# A narrow row leaves a one-program-per-SM backward with one row's loads in flight per step: a multi-row tile
# (as many rows as make up ~8192 elements) multiplies that without adding dW partials.
_TILE_BWD = [
    Remedy({"bwd_tile_elements": 8192}, "walk the backward's rows as [rows, H] tiles of about 8192 elements "
           "(8 rows at H = 1024), so each program has several rows' loads in flight per step",
           "backward 2-4x faster at H <= 2048, faster at H = 4096; unchanged at H >= 8192 (a tile is one row)"),
    Remedy({"bwd_tile_elements": 16384}, "[rows, H] tiles of about 16384 elements in the backward",
           "backward faster at H <= 8192; unchanged above"),
    Remedy({"bwd_tile_elements": 4096}, "[rows, H] tiles of about 4096 elements in the backward",
           "backward faster at H <= 2048; unchanged above"),
]
# The dW partials summed inside the backward launch: no reduction kernel (torch's took 8-10 us at every H on the
# H200, 40 % of the backward at H = 1024: trial 0017's NCU profile; the baseline's Triton one, the default since
# it holds each column's partials in one tile, is not yet measured there), no cast kernel. One program does the
# last level of the sum, so the wider the row the more it costs: widest threshold first, the narrower ones next.
# The last remedy is for a best that still sums with torch (the default before the one-tile reduction).
_FUSED_DW = [
    Remedy({"bwd_fused_dw_max_cols": h}, "sum the float32 dW partials inside the backward launch up to "
           f"H = {h} (the last program of each group of about sqrt(programs) sums its group, the last group "
           "sums the groups, in a fixed order): no reduction or cast kernel of its own",
           f"backward faster by most of the reduction kernel's time at H <= {h}; unchanged above")
    for h in (8192, 4096, 2048)
] + [Remedy({"dw_reduction": "triton"}, "sum the float32 dW partials in one Triton kernel instead of torch.sum "
            "plus a cast", "backward a few microseconds faster at every H")]
# More warps for the same row: fewer elements (and registers) per thread; liger-kernel runs 32 warps at 16384.
_MORE_WARPS_BWD = [
    Remedy({"bwd_elements_per_thread": 16}, "16 elements per thread: 32 warps for a 16384-column row instead of "
           "16, half the registers each needs", "backward faster where a wide row spills (H = 16384); "
           "unchanged where a tile is 8192 elements"),
    Remedy({"bwd_elements_per_thread": 8}, "8 elements per thread: more warps for every tile",
           "backward faster where a thread's share of the row spills or too few warps hide latency"),
]
# Fewer vectors live in a wide row's loop (H200, trial 0033: 128 registers and 420-528 MB of spills at H = 16384;
# reports/evidence/2026-12-02-register-order/: each change won in some buckets and lost in others, so per bucket).
_FEWER_LIVE_BWD = [
    Remedy({"bwd_dw_order": "before_dx"}, "add each row's dW term to the accumulator before dX is computed, so "
           "its registers are free for dX (Liger-Kernel's order)", "backward 7-16% faster where a wide row "
           "spills (H >= 4608 in 16-bit types, 12288-16384 in float32)"),
    Remedy({"bwd_weight_reload": True}, "load W + offset for every row from L2 instead of holding it in "
           "registers across the program's rows", "backward faster where a wide row spills (H >= 12288)"),
]
# A 16-bit thread loads 8 elements, so 2048 columns span 8 warps and a 16-warp tile puts its rows on different
# warps: the tile's column sums into dW then cross warps through shared memory, behind a barrier, at every step
# (H200, trial 0045's NCU profile at 43690x1536 bfloat16: 16 KB of shared memory per block, short-scoreboard,
# MIO-throttle and barrier stalls ahead of DRAM, 30 % of its peak; float32 at the same shape: 256 bytes, 72 %).
_SHARED_MEMORY_BWD = [
    Remedy({"bwd_dw_accumulator": "tile"}, "accumulate dW in a [tile rows, H] float32 tile, element by element, "
           "and sum its rows once after the loop: the loop's column sums, which cross warps through shared memory "
           "at every step, are gone", "backward faster where a tile's rows sit on different warps (16-bit rows "
           "up to 2048 columns, float32 up to 1024); a tile's worth of registers more elsewhere"),
]
_FEWER_ROWS_BWD = [
    Remedy({"bwd_rows_per_program": 8}, "more, shorter backward programs (8 rows each) fill every SM and hide "
           "the latency of one program behind others", "backward faster where a program per SM left SMs idle"),
    Remedy({"bwd_rows_per_program": 4}, "more backward programs (4 rows each) for more warps in flight",
           "backward faster at small H"),
]

# One program per SM waits on its loads, its row sums and its barriers in turn; two or four programs, each with a
# tile as many times smaller, keep the SM's elements (and warps) in flight and may overlap those waits (H200, trial
# 0061's NCU profile: DRAM at 47-59 % of its peak from 896 to 2560 columns in 16-bit types, long-scoreboard and
# barrier stalls ahead; torch.compile is up to 1.2 times faster there:
# reports/evidence/2026-12-03-bench-compile-best-0061-more/). More programs with the tile unchanged were slower
# (reports/evidence/2026-12-02-programs-per-sm/); this split, measured by the loop, took 0.948 of the time in bucket
# 2048x2 (screening 0070) and was accepted in bucket 2048x4 (trial 0073, backward 1.11x faster):
# notebooks/nvidia-h200/fused_add_rms_norm/.
_SPLIT_BWD = [
    Remedy({"bwd_programs_per_sm": 2}, "split each SM's rows between two programs, each walking tiles half the "
           "size: as many elements in flight, from two programs that need not wait on each other's row sums and "
           "barriers", "backward faster where DRAM is under 60 % busy at narrow rows and two programs fit on an SM "
           "together; slower where they do not (a second wave)"),
    Remedy({"bwd_programs_per_sm": 4}, "split each SM's rows between four programs, tiles a quarter the size",
           "backward faster where two programs per SM still leave DRAM idle and four fit together"),
]

# torch.compile's backward (Inductor's mixed-order reduction) runs many short programs: 16 rows each, one row a step,
# a dW partial each; at 16384x2304 float32 three 72-register programs share an SM and DRAM runs at 80 % of its peak,
# where the best's one program per SM (102 registers) reaches 69 % (H200, reports/evidence/2026-12-04-inductor-probe/).
# The best with 16 rows a program, one row a step and dW added before dX: 80 registers, three to an SM, 81 %, 0.89 of
# the best's time there (reports/evidence/2026-12-04-ab-mixed-order-2/, a stand-in with 16 rows a program
# fixed); with W reloaded per row, 0.90 at 16384x2304 and 12289x3584 bfloat16 and 0.93 at 16384x3840 and 26214x2560
# bfloat16, where W held was 1.00-1.08 (2304-3840 columns; at 1152-1536 columns reloading was no better). That
# stand-in was 1.2-2.2x slower at 1024-2047 rows, where its fixed 16 rows a program also left SMs idle (64-128
# programs on 132 SMs): the cap acts only where "auto" rows per program exceed it, and only there walks one row a
# step. At 4608-7168 columns 16-bit it was 1.2-1.4x slower, and 1.03 at 43690x1536 float32.
_MANY_PROGRAMS_BWD = [
    Remedy({"bwd_max_rows_per_program": 16, "bwd_dw_order": "before_dx"},
           "at most 16 rows a backward program, one row a step where that cap binds, dW added before dX "
           "(torch.compile's design): several short programs of fewer registers share an SM at large row counts",
           "backward faster at large row counts where the best stays under about 80 % of the copy floor "
           "(0.89-0.96 at 8192-26214 rows of 1536-2560 float32 columns); unchanged where rows are fewer than "
           "16 a program"),
    Remedy({"bwd_max_rows_per_program": 16, "bwd_dw_order": "before_dx", "bwd_weight_reload": True},
           "at most 16 rows a backward program (one row a step where the cap binds), dW added before dX, "
           "W + offset reloaded per row from L2: fewer registers still", "backward faster at large row counts of "
           "2304-3840 columns in 16-bit types"),
    Remedy({"bwd_max_rows_per_program": 16, "bwd_dw_order": "before_dx", "bwd_row_cap_max_fill": 0.75},
           "at most 16 rows a backward program, one row a step, dW added before dX, only where a row fills at most "
           "three quarters of its power-of-two block: the short programs' bytes in flight where the one-program "
           "tile holds many masked lanes, the tile where it is already near the copy floor",
           "backward faster at large row counts of sparsely filled blocks (0.90 at 16384x2304 and 0.95 at "
           "26214x2560 float32, trials 0081-0082), unchanged at fuller rows, where the cap alone cost 3 % "
           "(1.03 at 16384x3840 float32)"),
]

# A row's sum crosses warps through shared memory behind barriers, and the compiler issues no load across a barrier:
# a load written after the sum waits its whole latency there, every row. Triton 3.6's sm_90 code at 32768x1152
# float32, 16 rows a program (reports/evidence/2026-12-05-ds-load-order/): the backward's dS_out loads follow the
# sum's last barrier, where torch.compile's kernel, which takes 0.91-0.93 of its time at that shape with the same
# grid (H200, reports/evidence/2026-12-04-inductor-probe/), issues them before its sum; loaded with the row, ours do
# too, at 56 registers to its 57. The forward's W (from L2) waits the same way. Where a bucket's row loop is
# pipelined (num_stages 3 in 0085's bucket 4096x2) its loads reach shared memory ahead of their use already: there the
# early load only holds the row in registers (16384x2304 bfloat16, num_stages 3: 100 registers to 110).
_EARLY_LOAD_BWD = [
    Remedy({"bwd_ds_load": "with_row"}, "load each row's dS_out with its dY and S, before the row's sum, so that "
           "its DRAM latency passes during the sum's barriers instead of after them (torch.compile's order)",
           "backward faster where its loads wait on memory latency (long-scoreboard stalls, DRAM under about 80 % "
           "busy) and its row loop is not pipelined (num_stages \"auto\"); a thread holds the row's dS_out across the "
           "sum: a register more per 4 bytes of it"),
    Remedy({"bwd_max_rows_per_program": 16, "bwd_dw_order": "before_dx", "bwd_ds_load": "with_row"},
           "torch.compile's backward whole: at most 16 rows a program, one row a step where that cap binds, dW added "
           "before dX, each row's dS_out loaded with the row", "backward toward torch.compile's time at large row "
           "counts of narrow float32 rows (32768x1152: torch.compile took 0.91-0.93 of the cap alone's time)"),
]
_EARLY_LOAD_FWD = [
    Remedy({"fwd_w_load": "with_row"}, "load W with the row's X and R, before the row's sum of squares, so that "
           "its L2 round trip passes during the sum's barriers instead of after them",
           "forward faster where its loads wait on latency; a thread holds W + offset across the sum (32 to 50 "
           "registers at 16 float32 elements a thread: fewer programs may share an SM)"),
]


class FusedAddRMSNormSpec(KernelSpec):
    name = "fused_add_rms_norm"
    math = (
        "S = X + R; rstd = 1/sqrt(mean(S^2, -1) + eps); Y = S * rstd * (W + offset). "
        "Backward: dX = dR = dS_out + rstd*m - rstd^3/H * sum(m*S, -1) * S with m = dY*(W + offset); "
        "dW = sum over rows of dY * S * rstd. Casting modes: llama (normalisation in float32, cast back before "
        "the weight product), gemma (all in float32, Y cast back), none (every op in the input dtype)."
    )
    interface = ("fused_add_rms_norm", "KNOBS", "KNOB_CHOICES")
    differentiable = ("X", "R", "W")
    outputs = ("Y", "S")
    row_reductions = ("dW",)
    rows_independent = True  # a row's Y, S, dX and dR are that row's alone; dW sums over the rows
    suites = {
        "gpu": [(2048, h) for h in HIDDEN_SIZES],
        "interpret": [(16, 64), (9, 200)],
    }
    # Odd hidden sizes, a single row, and row counts that do not divide by the number of backward programs
    # (132 SMs on an H200; 4 programs in the interpreter).
    check_shapes = {
        "gpu": [(1, 4096), (131, 1000), (397, 4096), (2051, 8192), (300, 32768)],
        "interpret": [(1, 64), (13, 100), (6, 37), (1021, 40)],
    }
    check_configs = (
        {"casting_mode": "llama", "offset": 0.0, "eps": 1e-6, "in_place": False},
        {"casting_mode": "gemma", "offset": 1.0, "eps": 1e-6, "in_place": False},
        {"casting_mode": "none", "offset": 0.0, "eps": 1e-6, "in_place": False},
        {"casting_mode": "llama", "offset": 0.5, "eps": 1e-5, "in_place": True},
    )
    bench_config = {"casting_mode": "llama", "offset": 0.0, "eps": 1e-6, "in_place": False}
    remedies = {
        "backward": {
            "spills": [*_FEWER_LIVE_BWD, *_CHUNKED_BWD, *_MORE_WARPS_BWD],
            "extra_launches": _FUSED_DW,
            "register_limited_occupancy": [
                *_MANY_PROGRAMS_BWD, *_FEWER_LIVE_BWD, *_CHUNKED_BWD[2:3], *_MORE_WARPS_BWD,
                Remedy({"bwd_num_warps": 16}, "fewer warps per program leave more registers to each thread",
                       "backward: higher theoretical occupancy per SM at wide H")],
            "under_one_wave": [*_TILE_BWD, *_FEWER_ROWS_BWD],
            "low_achieved_occupancy": [*_MANY_PROGRAMS_BWD, *_TILE_BWD, *_SPLIT_BWD, *_FEWER_ROWS_BWD],
            "shared_memory_stalls": _SHARED_MEMORY_BWD,
            "memory_latency": [
                Remedy({"num_stages": 2}, "software-pipeline the backward's row loop so the next row's loads are "
                       "in flight while this row computes", "backward 5-20% faster where DRAM is under 75% of its peak"),
                Remedy({"num_stages": 3}, "deeper pipelining of the backward's row loop",
                       "backward faster where memory latency, not bandwidth, limits"),
                *_TILE_BWD[1:2],
                *_EARLY_LOAD_BWD,
                *_SPLIT_BWD,
                *_MANY_PROGRAMS_BWD,
            ],
            "explore": [*_EARLY_LOAD_BWD, *_MANY_PROGRAMS_BWD, *_FUSED_DW, *_TILE_BWD, *_SPLIT_BWD, *_FEWER_ROWS_BWD,
                        *_MORE_WARPS_BWD],
        },
        "forward": {
            "spills": [Remedy({"fwd_column_chunked": True, "BLOCK_SIZE": 8192}, _CHUNK,
                              "forward no longer spills at H > 8192")],
            "register_limited_occupancy": [Remedy({"num_warps": 16}, "fewer warps per program leave more "
                                                  "registers to each thread", "forward: higher occupancy at wide H")],
            "memory_latency": [Remedy({"fwd_rows_per_program": 2}, "two rows per program keep more loads in "
                                      "flight per warp", "forward faster at small H"), *_EARLY_LOAD_FWD],
            "explore": [Remedy({"fwd_rows_per_program": 2}, "two rows per program amortise the weight load",
                               "forward faster at small H"), *_EARLY_LOAD_FWD],
        },
    }
    tolerances = {
        torch.float32: Tolerances(
            same_dtype=Tolerance(atol=1e-5, rtol=1e-5, norm=1e-5),
            float64=Tolerance(atol=1e-4, rtol=1e-4, norm=1e-5),
            convergence=1e-4,
            # dW sums thousands of rows whose terms reach ~25 in the outlier channels: a column that cancels to
            # ~0.06 carries ~1e-4 of summation-order error (seen on the H200: trial 0015, seed 1963308909).
            row_reduction=Tolerance(atol=1e-3, rtol=1e-4, norm=1e-5),
        ),
        torch.float16: Tolerances(
            same_dtype=Tolerance(atol=1e-3, rtol=2e-3, norm=1e-4),
            float64=Tolerance(atol=2e-2, rtol=2e-2, norm=1e-2),
            convergence=1e-2,
            row_reduction=Tolerance(atol=1e-2, rtol=1e-2, norm=1e-3),
        ),
        torch.bfloat16: Tolerances(
            same_dtype=Tolerance(atol=1e-2, rtol=1.6e-2, norm=8e-4),
            float64=Tolerance(atol=1e-1, rtol=1e-1, norm=2e-2),
            convergence=3e-2,
            row_reduction=Tolerance(atol=5e-2, rtol=5e-2, norm=5e-3),
        ),
    }

    def make_inputs(self, shape, dtype, device, generator=None, config=None):
        *rows, hidden = shape  # (rows, hidden), or (batch, sequence, hidden)
        config = config or {}

        # Seeded (the gate): on the CPU, the same values on every device; unseeded (timing): on the device.
        where = "cpu" if generator is not None else device

        def randn(*size):
            return torch.randn(*size, generator=generator, dtype=torch.float32, device=where)

        X, R = randn(*rows, hidden), 0.5 * randn(*rows, hidden)
        if config.get("casting_mode", "llama") != "none":
            # LLM activations carry a few huge channels; their squares overflow float16, which is why llama and
            # gemma compute the statistics in float32. Inputs without them could not tell the difference.
            channels = torch.randperm(hidden, generator=generator)[: max(1, hidden // 32)].to(X.device)
            X[..., channels] *= 300.0
        W = 1.0 + 0.1 * randn(hidden)
        return {name: t.to(device=device, dtype=dtype) for name, t in (("X", X), ("R", R), ("W", W))}

    def tolerance(self, dtype, config):
        if config.get("casting_mode") == "none" and dtype != torch.float32:
            # PyTorch rounds after every op of the backward in half precision; no kernel mirrors all of them.
            tol = self.tolerances[dtype]
            return replace(tol, same_dtype=_loosened(tol.same_dtype, 4e-3), float64=_loosened(tol.float64, 2e-2),
                           row_reduction=_loosened(tol.row_reduction, 4e-3))
        return self.tolerances[dtype]

    def may_overwrite_cotangents(self, config):
        return bool(config.get("in_place", False))  # in_place: dX may be written into dY (Liger's contract)

    def reference(self, inputs, config):
        X, R, W = inputs["X"], inputs["R"], inputs["W"]
        mode, eps, offset = config.get("casting_mode", "llama"), config.get("eps", 1e-6), config.get("offset", 0.0)
        S = X + R
        dtype = S.dtype
        # "float32" in a casting mode means at least float32: the float64 reference keeps full precision.
        acc = torch.promote_types(dtype, torch.float32)
        if mode == "llama":
            h = S.to(acc)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
            Y = h.to(dtype) * (offset + W)
        elif mode == "gemma":
            h = S.to(acc)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
            Y = (h * (offset + W.to(acc))).to(dtype)
        elif mode == "none":
            Y = S * torch.rsqrt(S.pow(2).mean(-1, keepdim=True) + eps) * (offset + W)
        else:
            raise ValueError(f"unknown casting mode {mode!r}")
        return Y, S

    def call(self, variant, inputs, config):
        return variant.fused_add_rms_norm(
            inputs["X"], inputs["R"], inputs["W"], eps=config.get("eps", 1e-6), offset=config.get("offset", 0.0),
            casting_mode=config.get("casting_mode", "llama"), in_place=config.get("in_place", False))

    @staticmethod
    def _geometry(knobs, hidden):
        """``baseline.py``'s ``_launch_settings`` arithmetic: the row block (H rounded up to a power of two), the
        columns a pass holds at once, whether the backward walks a row in chunks, the programs "auto" rows per
        program make per SM, and the rows of a backward step."""
        row_block = 1 << max(hidden - 1, 0).bit_length()
        block = knobs.get("BLOCK_SIZE", "auto")
        chunk = row_block if block == "auto" else min(block, row_block)
        chunking = knobs.get("bwd_column_chunked", False) if chunk < row_block else False
        bwd_block = chunk if chunking else row_block
        tile = knobs.get("bwd_tile_elements", "row")
        split = knobs.get("bwd_programs_per_sm", 1) if knobs.get("bwd_rows_per_program", "auto") == "auto" else 1
        tile_rows = 1 if chunking or tile == "row" else max(1, tile // split // bwd_block)
        return row_block, chunk, chunking, bwd_block, split, tile_rows

    def launch_footprints(self, knobs, pass_name, shape, dtype):
        """The launch model of ``baseline.py``'s knobs (its ``_launch_settings``): the forward's launch, or the
        backward's launches (its kernel's tile walk; where the row cap may bind, the same kernel's one-row walk
        too; the dW reduction's kernel where it runs), calibrated on the H200's NCU profiles (trials 0002, 0008
        and 0017): a backward thread needs about 24 + 6 registers per element it holds (walking a row in chunks,
        24 + 3: the two passes keep fewer values live), a forward thread 20 + 3; a pipelined row loop
        (``num_stages`` s > 1) buffers s - 1 steps of its dY, S and dS loads in shared memory (0008: 2 x 16384 x 12
        bytes + 72 of scratch = 393288 bytes, which no H200 block may have). A row's ``dS_out`` loaded with the
        row (``bwd_ds_load``), or the forward's ``W`` (``fwd_w_load``), is held across the row's sum: about one
        register more per 4 bytes a thread holds of it (sm_90 code of Triton 3.6: 48 to 56 registers at 8 float32
        elements a thread, 80 to 98 at 16; the forward 32 to 50 at 16 float32 elements, 34 to 39 at 16 float16
        ones; ``reports/evidence/2026-12-05-ds-load-order/``)."""
        hidden = shape[-1]
        size = torch.tensor([], dtype=dtype).element_size()
        row_block, chunk, chunking, bwd_block, split, tile_rows = self._geometry(knobs, hidden)

        def warps_for(elements, per_thread="auto"):
            if per_thread == "auto":
                return 32 if elements >= 32768 else 16 if elements >= 8192 else 8 if elements >= 2048 else 4
            return min(32, max(1, 1 << max(-(-elements // (32 * per_thread)) - 1, 0).bit_length()))

        warps = knobs.get("num_warps", "auto")
        if pass_name == "forward":
            fwd_block = chunk if knobs.get("fwd_column_chunked") and chunk < row_block else row_block
            threads = 32 * (warps_for(fwd_block) if warps == "auto" else warps)
            per_thread = -(-fwd_block // threads)
            registers = 20 + 3 * per_thread
            if fwd_block == row_block and knobs.get("fwd_w_load", "after_sum") == "with_row":
                registers += -(-per_thread * size // 4)
            return [Footprint("_forward_kernel", threads, 4 * threads, registers, fwd_block)]
        if pass_name != "backward":
            return []
        bwd_warps = warps if knobs.get("bwd_num_warps", "same") == "same" else knobs["bwd_num_warps"]
        stages = knobs.get("num_stages", "auto")

        def backward(rows_a_step, dw_tile):
            elements = rows_a_step * bwd_block
            threads = 32 * (warps_for(elements, knobs.get("bwd_elements_per_thread", "auto")) if bwd_warps == "auto"
                             else bwd_warps)
            per_thread = -(-elements // threads)
            pipelined = 0 if chunking or stages == "auto" else (stages - 1) * elements * 3 * size
            registers = 24 + (3 if chunking else 6) * per_thread
            if not chunking and knobs.get("bwd_ds_load", "after_sum") == "with_row":
                registers += -(-per_thread * size // 4)  # the row's dS_out, held across its sum
            if dw_tile:
                registers += per_thread  # the float32 dW tile beside the loaded one
            if hidden <= knobs.get("bwd_fused_dw_max_cols", 0):
                # The in-launch dW reduction sums [8, min(1024, row)] float32 tiles after the rows are done.
                registers = max(registers, 24 + -(-8 * min(1024, row_block) // threads))
            return Footprint("_backward_kernel", threads, pipelined + 4 * threads, registers, elements)

        launches = [backward(tile_rows, tile_rows > 1 and knobs.get("bwd_dw_accumulator", "row") == "tile")]
        if tile_rows > 1 and self._row_cap_may_bind(knobs, shape):
            # Where bwd_max_rows_per_program binds, the same kernel walks one row a step with warps for one row and
            # no dW tile. Whether it binds depends on the SM count too, which the model does not know, so both
            # launches are listed: neither is smaller in every respect (fewer threads leave the in-launch dW sum
            # more registers a thread).
            launches.append(backward(1, False))
        if hidden > knobs.get("bwd_fused_dw_max_cols", 0) and knobs.get("dw_reduction") == "triton":
            launches.append(Footprint("_sum_rows_kernel", 128, 0, None, 4096))  # baseline.REDUCTION_TILE_ELEMENTS
        return launches

    @staticmethod
    def _row_cap_may_bind(knobs, shape):
        """Whether ``bwd_max_rows_per_program`` can bind at ``shape`` on some GPU: only on "auto" rows per program
        and at rows filling at most ``bwd_row_cap_max_fill`` of their block; "auto" rows per program are
        ceil(rows / (SMs x programs per SM)), over the cap only where rows exceed cap x programs per SM (the model
        does not know the SM count, so it takes one: "may bind" is then never missed, only over-reported)."""
        if knobs.get("bwd_rows_per_program", "auto") != "auto":
            return False
        hidden, row_block = shape[-1], 1 << max(shape[-1] - 1, 0).bit_length()
        if hidden > knobs.get("bwd_row_cap_max_fill", 1.0) * row_block:
            return False
        cap, split = knobs.get("bwd_max_rows_per_program", 0), knobs.get("bwd_programs_per_sm", 1)
        return bool(cap) and math.prod(shape[:-1]) > cap * split

    def effective_settings(self, knobs, shape, dtype):
        """``baseline.py``'s ``_launch_settings`` and the backward's choices, from the knobs alone: what a launch
        at ``shape`` and ``dtype`` runs (a knob that cannot act there, such as a chunk wider than the row or
        stages on a chunked walk, leaves this unchanged)."""
        hidden = shape[-1]
        row_block, chunk, chunking, bwd_block, split, tile_rows = self._geometry(knobs, hidden)
        fwd_chunked = bool(knobs.get("fwd_column_chunked")) and chunk < row_block
        fwd_block = chunk if fwd_chunked else row_block
        fused_dw = hidden <= knobs.get("bwd_fused_dw_max_cols", 0)
        backward = [f for f in self.launch_footprints(knobs, "backward", shape, dtype)
                    if f.kernel == "_backward_kernel"]
        footprint, one_row = backward[0], (backward[1] if len(backward) > 1 else None)
        forward = self.launch_footprints(knobs, "forward", shape, dtype)[0]
        return {
            "forward": (fwd_block, fwd_chunked, forward.threads, knobs.get("fwd_rows_per_program", 1),
                        None if fwd_chunked else knobs.get("fwd_w_load", "after_sum")),  # a chunked walk has W late
            "backward": (bwd_block, chunking, tile_rows, footprint.threads,
                         None if chunking else knobs.get("num_stages", "auto"),  # it pipelines unchunked loops
                         knobs.get("bwd_rows_per_program", "auto"), fused_dw,
                         split,  # the programs "auto" rows per program make, times this
                         # and their cap on a program's rows (more programs at large row counts), where it may bind
                         knobs.get("bwd_max_rows_per_program", 0) if self._row_cap_may_bind(knobs, shape) else 0,
                         None if fused_dw else knobs.get("dw_reduction", "triton"),
                         knobs.get("bwd_grad_rounding", "once"),
                         # the register order, the weight's reload and dS_out's load act on the unchunked loops only
                         None if chunking else knobs.get("bwd_dw_order", "after_dx"),
                         None if chunking else bool(knobs.get("bwd_weight_reload", False)),
                         None if chunking else knobs.get("bwd_ds_load", "after_sum"),
                         # the dW tile exists only where a step is a tile of rows
                         tile_rows > 1 and knobs.get("bwd_dw_accumulator", "row") == "tile",
                         # where the row cap may bind: the warps of its one-row walk (no tile, no dW tile)
                         one_row.threads if one_row else None),
        }

    def upstream_forward(self):
        try:
            from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
        except ImportError:
            return None

        def forward(inputs, config):
            return LigerFusedAddRMSNormFunction.apply(
                inputs["X"], inputs["R"], inputs["W"], config.get("eps", 1e-6), config.get("offset", 0.0),
                config.get("casting_mode", "llama"), config.get("in_place", False))
        return forward

    def min_bytes(self, pass_name, shape, dtype):
        rows, hidden = shape
        size = torch.tensor([], dtype=dtype).element_size()
        forward = (4 * rows * hidden + hidden) * size  # read X, R, W; write Y, S
        backward = (4 * rows * hidden + 2 * hidden) * size  # read dY, dS, S, W; write dX (= dR), dW
        return {"forward": forward, "backward": backward, "full": forward + backward}[pass_name]

    def convergence_model(self, forward, config, generator, device, dtype):
        hidden, depth, batch = 64, 3, 32
        model = _ResidualNormNet(forward, config, hidden, depth, generator).to(device=device, dtype=dtype)
        inputs = torch.randn(4, batch, hidden, generator=generator).to(device=device, dtype=dtype)
        targets = torch.randn(4, batch, hidden, generator=generator).to(device=device, dtype=dtype)
        return model, inputs, targets


def _loosened(tol, norm):
    return replace(tol, atol=4 * tol.atol, rtol=4 * tol.rtol, norm=norm)


class _ResidualNormNet(nn.Module):
    """A few pre-norm residual blocks: residual += h; h = tanh(Linear(RMSNorm(residual)))."""

    def __init__(self, forward, config, hidden, depth, generator):
        super().__init__()
        self.forward_fn, self.config = forward, dict(config)
        self.linears = nn.ParameterList(
            nn.Parameter(torch.randn(hidden, hidden, generator=generator) / hidden ** 0.5) for _ in range(depth))
        self.norms = nn.ParameterList(
            nn.Parameter(1.0 + 0.1 * torch.randn(hidden, generator=generator)) for _ in range(depth))

    def forward(self, x):
        h, residual = x, x
        for linear, norm in zip(self.linears, self.norms):
            y, residual = self.forward_fn({"X": h, "R": residual, "W": norm}, self.config)
            h = torch.tanh(y @ linear)
        return h
