"""Time variants side by side with liger-kernel on a suite, one pass, no gate: a diagnosis for the next loop run,
never a verdict (a variant is accepted only through a trial). Run on a GPU:

    python3 scripts/ab_time.py KERNEL OUT.json --variant NAME=FILE ... [--suite models-tune] [--passes backward]
                               [--repetitions 10] [--max-columns H] [--min-columns H]

The first variant is the reference of every ratio (time / its time, with the timing's simultaneous intervals).
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel")
    parser.add_argument("out")
    parser.add_argument("--variant", action="append", required=True, metavar="NAME=FILE")
    parser.add_argument("--suite", default="models-tune", choices=("models-tune", "gpu", "interpret"),
                        help="never the held-out split: it shows what the loop never saw")
    parser.add_argument("--passes", default="backward")
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--max-columns", type=int, default=0, help="only the cases at most this wide (0: all)")
    parser.add_argument("--min-columns", type=int, default=0, help="only the cases at least this wide (0: all)")
    parser.add_argument("--device", default="cuda", help="cuda, or interpret to try the script on a CPU")
    args = parser.parse_args()

    from liger_perf.kernel.device import select_device

    device = select_device(args.device)  # before any variant is imported
    from liger_perf.kernel.registry import get_spec
    from liger_perf.kernel.variants import load_variant
    from liger_perf.measure.fingerprint import fingerprint
    from liger_perf.measure.timing import TimingPlan, copy_bandwidth, peer_contenders, summarize, time_suite
    from liger_perf.core.workspace import current

    spec = get_spec(args.kernel)
    contenders, files = {}, {}
    for item in args.variant:
        name, _, path = item.partition("=")
        variant = load_variant(path, spec)
        contenders[name] = [spec.variant_forward(variant.module),
                            spec.variant_forward(load_variant(path, spec).module)]  # two copies, as a trial
        files[name] = {"path": path, "sha256": variant.sha256}
    reference = next(iter(contenders))
    peers, _ = peer_contenders(spec, device)
    if "liger-kernel" in peers:
        contenders["liger-kernel"] = peers["liger-kernel"]
    started = time.time()
    plan = TimingPlan.default(device, args.repetitions)
    cases = [c for c in spec.cases(args.suite, "bench")
             if (not args.max_columns or c.shape[-1] <= args.max_columns) and c.shape[-1] >= args.min_columns]
    if not cases:
        parser.error(f"no case of the {args.suite} suite is {args.min_columns} to {args.max_columns or 'any'} "
                     "columns wide: widen --min-columns / --max-columns")
    bandwidth = copy_bandwidth(device)
    samples = time_suite(spec, contenders, cases, args.passes.split(","), device, plan,
                         judged=tuple(n for n in contenders if n != "liger-kernel"))
    summary = summarize(samples, reference, spec, bandwidth, plan)
    with open(args.out, "w") as f:
        json.dump({"kernel": args.kernel, "suite": args.suite, "reference": reference, "variants": files,
                   "repetitions": plan.repetitions, "min_columns": args.min_columns,
                   "max_columns": args.max_columns, "seconds": round(time.time() - started, 1),
                   "copy_bandwidth_bytes_per_s": bandwidth, "fingerprint": fingerprint(device, current().root),
                   "rows": summary.to_dict("records")}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
