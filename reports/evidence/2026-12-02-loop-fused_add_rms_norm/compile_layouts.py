"""What Triton compiles the fused backward's tile loop to for sm_90, on a machine without a GPU (no launch).

Usage: python compile_layouts.py  (from the checkout's root; TRITON_DEFAULT_FP_FUSION=1)
Prints, per (dtype, row block, tile rows, warps, dW accumulator): the tile's blocked layout (warpsPerCTA: how the
warps split [rows, columns]), whether a row reduction over the tile (axis 0) stays inside the loop, and ptxas's
register count. The Triton here (3.9) is not the H200's (3.6): the layouts are indicative, not measurements.
"""
import os
import re
import subprocess

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from liger_perf.kernel.registry import baseline_path
from liger_perf.kernel.variants import load_variant
from liger_perf.kernel.registry import get_spec

module = load_variant(baseline_path("fused_add_rms_norm"), get_spec("fused_add_rms_norm")).module
PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas-blackwell")


def compile_once(dtype, block, tile_rows, warps, dw_tile):
    p = f"*{dtype}"
    sig = {"DX": p, "DY": p, "DS": p, "S": p, "W": p, "RSTD": "*fp32", "DW_PARTIAL": "*fp32", "DOT": "*fp32",
           "DW": p, "GROUP_PARTIAL": "*fp32", "COUNTERS": "*i32", "stride_dx": "i32", "stride_dy": "i32",
           "stride_ds": "i32", "stride_s": "i32", "stride_dw": "i32", "stride_gp": "i32", "n_rows": "i32",
           "n_cols": "i32", "offset": "fp32", "rows_per_program": "i32", "n_programs": "i32", "group_size": "i32"}
    const = dict(CASTING=0, BLOCK_SIZE=block, CHUNK_MODE=0, TILE_ROWS=tile_rows, NUM_STAGES=None, FUSED_DW=False,
                 REDUCE_COLS=1024, ROUND_ONCE=True, DW_BEFORE_DX=False, RELOAD_W=False, DW_TILE=dw_tile)
    sig.update({c: "constexpr" for c in const})
    names = list(sig)
    aligned = [n for n in names if sig[n].startswith("*") or n.startswith("stride") or n == "n_cols"]
    source = ASTSource(fn=module._backward_kernel, signature=sig,
                       constexprs={(names.index(c),): v for c, v in const.items()},
                       attrs={(names.index(n),): [["tt.divisibility", 16]] for n in aligned})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    ttgir = compiled.asm["ttgir"]
    layout = re.search(r"#blocked = .*warpsPerCTA = (\[[0-9, ]*\])", ttgir).group(1)
    loop = ttgir[ttgir.index("scf.for"):ttgir.index("scf.yield")]
    with open("/tmp/compile_layouts.ptx", "w") as f:
        f.write(compiled.asm["ptx"])
    ptxas = subprocess.run([PTXAS, "-arch=sm_90a", "-v", "/tmp/compile_layouts.ptx", "-o", "/dev/null"],
                           capture_output=True, text=True).stderr
    registers = re.search(r"Used (\d+) registers", ptxas).group(1)
    spills = re.search(r"(\d+) bytes spill stores", ptxas).group(1)
    return layout, "axis = 0" in loop, registers, spills


print("dtype block tile_rows warps accumulator | warpsPerCTA  axis-0-sum-in-loop  registers  spill-bytes")
for dtype, block, rows in (("bf16", 2048, 4), ("fp32", 2048, 4), ("bf16", 1024, 8), ("fp32", 1024, 8)):
    for dw_tile in (False, True):
        layout, in_loop, registers, spills = compile_once(dtype, block, rows, 16, dw_tile)
        print(f"{dtype} {block} {rows} 16 {'tile' if dw_tile else 'row '} | {layout:10s} {str(in_loop):5s} "
              f"{registers} {spills}")
