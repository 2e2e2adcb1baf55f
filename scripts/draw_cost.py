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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel")
    parser.add_argument("out", type=Path)
    parser.add_argument("--suite", default="models-tune")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--max-cases", type=int, default=0, help="the first this many cases only (0: all)")
    args = parser.parse_args(argv)
    device = select_device(args.device)
    spec = get_spec(args.kernel)
    cases = spec.cases(args.suite, "bench")[: args.max_cases or None]
    rows = []
    for case in cases:
        row = {"shape": shape_label(case.shape), "dtype": dtype_name(case.dtype), "elements": math.prod(case.shape),
               "cpu_s": timed(lambda: cpu_draw(spec, case, device), device),
               "device_s": timed(lambda: case_inputs(spec, case, device), device)}
        rows.append(row)
        print(f"{row['shape']} {row['dtype']}: cpu {row['cpu_s']:.3f} s, device {row['device_s']:.3f} s", flush=True)
    total = {key: sum(r[key] for r in rows) for key in ("cpu_s", "device_s")}
    summary = {"kernel": args.kernel, "suite": args.suite, "device": str(device.torch_device), "cases": len(rows),
               **total, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1))
    print(f"{len(rows)} cases: cpu {total['cpu_s']:.1f} s, device {total['device_s']:.1f} s per draw of the suite")


if __name__ == "__main__":
    main()
