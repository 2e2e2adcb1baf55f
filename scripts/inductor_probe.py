"""What torch.compile's backward of fused_add_rms_norm is, beside the best's, at a few shapes (a diagnosis, no gate):

    python3 scripts/inductor_probe.py OUT_DIR VARIANT ROWSxCOLS:DTYPE[,ROWSxCOLS:DTYPE...] [NAME=FILE ...] [--ncu-only]

For each shape it writes under OUT_DIR/<shape>-<dtype>/: the Triton code Inductor generated for the forward and
the backward (``code-*.py``, from ``torch._inductor.utils.run_and_get_code``), and into OUT_DIR/probe.json each
contender's backward kernels with their mean CUDA time (``torch.profiler``, 20 backwards after 5 of warm-up).
Then it profiles one backward of each contender under Nsight Compute (launch grid, block, registers, DRAM
throughput, occupancy, warp stalls: OUT_DIR/ncu.csv), with each NAME=FILE variant beside them (e.g. the
best with other knobs); ``--ncu-only`` skips the code and the profiler. Why: where torch.compile's backward leads the best's (float32 at
1152-2560 columns), the knobs no longer close the gap, and the generated code says how Inductor splits the rows
and the dW reduction there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

REPEATS, WARMUP = 20, 5
NCU_METRICS = ("gpu__time_duration.sum", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
               "dram__bytes_read.sum", "dram__bytes_write.sum", "launch__grid_size", "launch__block_size",
               "launch__registers_per_thread", "launch__shared_mem_per_block_dynamic",
               "launch__shared_mem_per_block_static", "sm__warps_active.avg.pct_of_peak_sustained_active",
               "launch__occupancy_limit_registers", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
               "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum", "lts__t_sector_hit_rate.pct")


def parse_shapes(text: str) -> list[tuple[tuple[int, int], torch.dtype]]:
    shapes = []
    for item in text.split(","):
        dims, _, dtype = item.partition(":")
        rows, cols = (int(d) for d in dims.split("x"))
        shapes.append(((rows, cols), getattr(torch, dtype or "float32")))
    return shapes


def contenders(variant: str, others: dict[str, str] | None = None):
    from liger_perf.kernel.registry import get_spec
    from liger_perf.kernel.variants import load_variant

    spec = get_spec("fused_add_rms_norm")
    found = {"best": spec.variant_forward(load_variant(variant, spec).module),
             "torch.compile": torch.compile(spec.reference_forward(), dynamic=False)}
    for name, path in (others or {}).items():
        found[name] = spec.variant_forward(load_variant(path, spec).module)
    upstream = spec.upstream_forward()
    if upstream is not None:
        found["liger-kernel"] = upstream
    return spec, found


def prepared_backward(spec, forward, shape, dtype):
    from liger_perf.kernel.passes import prepare_pass
    from liger_perf.kernel.spec import Case

    case = Case(shape, dtype, {})
    inputs = spec.make_inputs(shape, dtype, "cuda", generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        outputs = spec.reference(inputs, case.config)
    cotangents = spec.grad_outputs(tuple(o.detach() for o in outputs), torch.Generator().manual_seed(1))
    return prepare_pass(spec, forward, inputs, case.config, "backward", cotangents)


def kernel_times(prepared) -> list[dict]:
    for _ in range(WARMUP):
        prepared.arm()()
    thunks = [prepared.arm() for _ in range(REPEATS)]
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for thunk in thunks:
            thunk()
        torch.cuda.synchronize()
    totals: dict[str, list] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            entry = totals.setdefault(event.name, [0.0, 0])
            entry[0] += event.device_time
            entry[1] += 1
    return [{"kernel": name, "mean_us_per_backward": total / REPEATS, "launches_per_backward": count / REPEATS}
            for name, (total, count) in sorted(totals.items(), key=lambda kv: -kv[1][0])]


def probe(out: Path, variant: str, shapes) -> None:
    from torch._inductor.utils import run_and_get_code

    spec, found = contenders(variant)
    results = []
    for shape, dtype in shapes:
        label = f"{shape[0]}x{shape[1]}-{str(dtype).removeprefix('torch.')}"
        folder = out / label
        folder.mkdir(parents=True, exist_ok=True)
        torch._dynamo.reset()
        found["torch.compile"] = torch.compile(spec.reference_forward(), dynamic=False)

        def first_backward():
            prepared = prepared_backward(spec, found["torch.compile"], shape, dtype)
            prepared.arm()()
            torch.cuda.synchronize()
            return prepared

        prepared, codes = run_and_get_code(first_backward)
        for index, code in enumerate(codes):
            (folder / f"code-{index}.py").write_text(code)
        row = {"shape": list(shape), "dtype": str(dtype), "generated_modules": len(codes), "contenders": {}}
        for name, forward in found.items():
            prepared = prepared_backward(spec, forward, shape, dtype)
            kernels = kernel_times(prepared)
            row["contenders"][name] = {"backward_us": sum(k["mean_us_per_backward"] for k in kernels),
                                       "kernels": kernels}
            print(label, name, f"{row['contenders'][name]['backward_us']:.1f} us",
                  [(k["kernel"][:60], round(k["mean_us_per_backward"], 1)) for k in kernels], flush=True)
            del prepared
        results.append(row)
        (out / "probe.json").write_text(json.dumps(results, indent=1))


def ncu_child(variant: str, shapes, others: dict[str, str]) -> None:
    """One backward of each contender inside cudaProfilerStart/Stop (warm-up and compilation stay outside)."""
    spec, found = contenders(variant, others)
    for shape, dtype in shapes:
        torch._dynamo.reset()
        found["torch.compile"] = torch.compile(spec.reference_forward(), dynamic=False)
        for name, forward in found.items():
            prepared = prepared_backward(spec, forward, shape, dtype)
            for _ in range(WARMUP):
                prepared.arm()()
            thunk = prepared.arm()
            torch.cuda.synchronize()
            marker = torch.cuda.nvtx.range_start(f"{name}|{shape[0]}x{shape[1]}|{dtype}")
            torch.cuda.profiler.start()
            thunk()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            torch.cuda.nvtx.range_end(marker)
            del prepared, thunk


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--ncu-only"]
    others = dict(a.split("=", 1) for a in args[3:])
    if args[0] == "--ncu-child":
        ncu_child(args[1], parse_shapes(args[2]), others)
        return
    out, variant, shapes = Path(args[0]), args[1], args[2]
    out.mkdir(parents=True, exist_ok=True)
    if "--ncu-only" not in sys.argv:
        probe(out, variant, parse_shapes(shapes))
    from liger_perf.measure.ncu import find_ncu

    ncu = find_ncu()
    if ncu is None:
        print("no ncu: the NCU part is left out")
        return
    command = [ncu, "--profile-from-start", "off", "--clock-control", "none", "--nvtx", "--target-processes", "all",
               "--section", "WarpStateStats", "--section", "Occupancy", "--section", "LaunchStats",
               "--metrics", ",".join(NCU_METRICS), "--csv", "--page", "raw",
               sys.executable, __file__, "--ncu-child", variant, shapes, *args[3:]]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ})
    (out / "ncu.csv").write_text(done.stdout)
    (out / "ncu-stderr.txt").write_text(done.stderr[-20000:])
    print("ncu rc", done.returncode, "csv lines", len(done.stdout.splitlines()))


if __name__ == "__main__":
    main()
