"""The small process that NCU profiles: it warms a variant up, then runs each pass under profile once.

Run as ``python -m liger_perf.measure.ncu_driver KERNEL VARIANT --passes backward,...`` under
``ncu --profile-from-start off --nvtx``. Everything before ``cudaProfilerStart`` (imports, JIT compilation,
autotuning, the forward that a backward needs) stays out of the report. Each profiled case is wrapped in an
NVTX *process* range (start/end, not push/pop) named ``liger-perf|<pass>|<shape>|<dtype>``: backward kernels
are launched from autograd's own thread, which a thread-scoped push/pop range would not cover.
"""

from __future__ import annotations

import argparse

RANGE_PREFIX = "liger-perf"


def range_name(pass_name: str, shape: str, dtype: str) -> str:
    return f"{RANGE_PREFIX}|{pass_name}|{shape}|{dtype}"


def parse_range_name(name: str) -> tuple[str, str, str] | None:
    parts = name.split("|")
    if len(parts) != 4 or parts[0] != RANGE_PREFIX:
        return None
    return parts[1], parts[2], parts[3]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("kernel")
    parser.add_argument("variant")
    parser.add_argument("--passes", default="forward,backward")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--suite", default="", choices=("", "gpu", "models-tune"),
                        help="the suite whose cases to run: the device's (default) or models-tune")
    parser.add_argument("--shapes", default="", help="comma-separated shapes (e.g. 2048x32768); default: the suite")
    parser.add_argument("--dtypes", default="", help="comma-separated dtypes; default: the suite's")
    args = parser.parse_args(argv)

    from liger_perf.kernel.device import select_device

    device = select_device("cuda")
    import torch

    from liger_perf.kernel.passes import case_inputs, prepare_pass
    from liger_perf.kernel.registry import get_spec
    from liger_perf.kernel.spec import dtype_name, shape_label
    from liger_perf.kernel.variants import load_variant

    spec = get_spec(args.kernel)
    forward = spec.variant_forward(load_variant(args.variant, spec).module)
    for case in spec.cases(args.suite or device.suite, "bench"):
        if args.shapes and shape_label(case.shape) not in args.shapes.split(","):
            continue
        if args.dtypes and dtype_name(case.dtype) not in args.dtypes.split(","):
            continue
        inputs, cotangents = case_inputs(spec, case, device)  # once for every pass
        for pass_name in args.passes.split(","):
            prepared = prepare_pass(spec, forward, inputs, case.config, pass_name, cotangents)
            for _ in range(args.warmup):
                prepared.arm()()
            thunk = prepared.arm()
            torch.cuda.synchronize()
            nvtx_range = torch.cuda.nvtx.range_start(
                range_name(pass_name, shape_label(case.shape), dtype_name(case.dtype)))
            torch.cuda.profiler.start()
            thunk()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            torch.cuda.nvtx.range_end(nvtx_range)
            del prepared, thunk
        del inputs, cotangents


if __name__ == "__main__":
    main()
