"""What drawing a suite's inputs costs, on the CPU (as unseeded draws were made until the device-draws change) and
on the device (``liger_perf.kernel.passes.case_inputs`` now): seconds per case and in all, as JSON.

    python3 scripts/draw_cost.py fused_add_rms_norm OUT.json [--suite models-tune] [--device cuda]

A trial's timing draws each case twice (its inputs, and fresh ones for the spot check); its screening, precompile
and NCU profile draw each case once more each. Run on the H200 to tell how much of a trial's timing step was draws.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from liger_perf.kernel.device import select_device
from liger_perf.kernel.passes import case_inputs
from liger_perf.kernel.registry import get_spec
from liger_perf.kernel.spec import dtype_name, shape_label


def cpu_draw(spec, case, device):
    """The draw as it was: every tensor drawn on the CPU, then moved (``make_inputs`` on the CPU, the reference
    on the device, cotangents drawn on the CPU)."""
    inputs = {k: v.to(device.torch_device) for k, v in
              spec.make_inputs(case.shape, case.dtype, torch.device("cpu"), config=case.config).items()}
    with torch.no_grad():
        outputs = spec.reference(inputs, case.config)
    cotangents = tuple(torch.randn(o.shape).to(device=o.device, dtype=o.dtype) for o in outputs)
    return inputs, cotangents


def timed(draw, device) -> float:
    start = time.perf_counter()
    drawn = draw()
    device.synchronize()
    seconds = time.perf_counter() - start
    del drawn
    return seconds


def reserved_gib(device) -> float | None:
    """The most GPU memory this process's allocator has held so far (a precompile child keeps what it reserved)."""
    return torch.cuda.max_memory_reserved() / 2**30 if not device.interpreted else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel")
    parser.add_argument("out", type=Path, help="a JSON summary; each case's row is appended to OUT.jsonl as it ends")
    parser.add_argument("--suite", default="models-tune")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--max-cases", type=int, default=0, help="the first this many cases only (0: all)")
    args = parser.parse_args(argv)
    device = select_device(args.device)
    spec = get_spec(args.kernel)
    cases = spec.cases(args.suite, "bench")[: args.max_cases or None]
    draws = {"cpu_s": lambda case: cpu_draw(spec, case, device),
             "device_s": lambda case: case_inputs(spec, case, device)}
    if cases:  # one untimed draw each way first: CUDA's kernel loading and the allocator's growth stay out
        for draw in draws.values():
            timed(lambda: draw(cases[0]), device)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows_file = args.out.with_suffix(".jsonl")
    rows = []
    for i, case in enumerate(cases):
        row = {"shape": shape_label(case.shape), "dtype": dtype_name(case.dtype), "elements": math.prod(case.shape)}
        for key in sorted(draws, reverse=bool(i % 2)):  # each way first in turn
            row[key] = timed(lambda: draws[key](case), device)
        row["reserved_gib"] = reserved_gib(device)
        rows.append(row)
        with rows_file.open("a") as out:  # a run stopped by its limit keeps the cases it finished
            out.write(json.dumps(row) + "\n")
        print(f"{row['shape']} {row['dtype']}: cpu {row['cpu_s']:.3f} s, device {row['device_s']:.3f} s", flush=True)
    total = {key: sum(r[key] for r in rows) for key in draws}
    summary = {"kernel": args.kernel, "suite": args.suite, "device": str(device.torch_device), "cases": len(rows),
               **total, "max_reserved_gib": reserved_gib(device), "rows": rows}
    args.out.write_text(json.dumps(summary, indent=1))
    print(f"{len(rows)} cases: cpu {total['cpu_s']:.1f} s, device {total['device_s']:.1f} s per draw of the suite")


if __name__ == "__main__":
    main()
