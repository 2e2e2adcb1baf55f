"""Issue 18 on the GPU: what the hardened gate costs, and which broken variants it catches there.

    python scripts/gate_gpu.py cost KERNEL OUT.json     # the baseline's whole gate, timed by kind of check
    python scripts/gate_gpu.py broken NAME SEEDS OUT.json   # one broken variant, gated with seeds 0..SEEDS-1

Each broken variant runs in a process of its own: a variant that reads out of bounds leaves the process's CUDA
context unusable.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
DEVICE = os.environ.get("GATE_DEVICE", "cuda")  # "interpret": a dry run of this script on a CPU


def cost(kernel: str, out: Path) -> None:
    from liger_perf.gate.convergence import check_convergence
    from liger_perf.gate.correctness import determinism_rows, gate_cases, run_case
    from liger_perf.kernel.device import select_device
    from liger_perf.kernel.registry import baseline_path, get_spec
    from liger_perf.kernel.variants import load_variant

    device = select_device(DEVICE)
    spec = get_spec(kernel)
    variant = load_variant(baseline_path(kernel), spec)
    report = {"kernel": kernel, "device": device.describe(), "runs": []}
    for run in ("cold", "warm"):  # cold: Triton compiles every kernel the gate needs; warm: the checks alone
        seconds: dict[str, float] = {}
        cases: dict[str, int] = {}
        rows = []
        for gate_case in gate_cases(spec, variant, device):
            started = time.perf_counter()
            rows += run_case(spec, variant, gate_case, device, fresh=1)
            seconds[gate_case.kind] = seconds.get(gate_case.kind, 0.0) + time.perf_counter() - started
            cases[gate_case.kind] = cases.get(gate_case.kind, 0) + 1
        started = time.perf_counter()
        rows += [] if device.interpreted else determinism_rows(spec, variant, device)
        seconds["determinism"] = time.perf_counter() - started
        started = time.perf_counter()
        convergence = check_convergence(spec, variant, device)
        seconds["convergence"] = time.perf_counter() - started
        failed = [r for r in rows if r["verdict"] != "pass"]
        used = [r["tolerance_used"] for r in rows if r["verdict"] == "pass"]
        report["runs"].append({
            "run": run, "seconds": {k: round(v, 2) for k, v in seconds.items()},
            "total_s": round(sum(seconds.values()), 2), "cases": cases, "comparisons": len(rows),
            "draws": len({r["seed"] for r in rows}), "failed": failed[:10], "worst_tolerance_used": max(used),
            "convergence_runs": convergence.groupby(["config", "dtype"]).ngroups,
            "convergence_failed": int((convergence["verdict"] != "pass").sum())})
        print(json.dumps(report["runs"][-1], default=str)[:2000], flush=True)
    out.write_text(json.dumps(report, indent=1, default=str))


def broken(name: str, seeds: int, out: Path) -> None:
    from broken_variants import BROKEN, write_broken_variant

    from liger_perf.gate.correctness import check_variant
    from liger_perf.kernel.device import select_device
    from liger_perf.kernel.registry import get_spec
    from liger_perf.kernel.variants import load_variant

    device = select_device(DEVICE)
    mistake = next(b for b in BROKEN if b.name == name)
    spec = get_spec(mistake.kernel)
    variant = load_variant(write_broken_variant(mistake, Path(tempfile.mkdtemp())), spec)
    exposed = set(mistake.exposed_in.split("|"))
    report = {"name": name, "kernel": mistake.kernel, "mistake": mistake.mistake, "gpu_only": mistake.gpu_only,
              "seeds": seeds, "caught": 0, "runs": []}
    for seed in range(seeds):
        started = time.perf_counter()
        try:
            result = check_variant(spec, variant, device, convergence=False, fail_fast=True, seed=seed)
        except Exception as e:  # the CUDA context is gone (an illegal address): the gate did not pass it
            report["runs"].append({"seed": seed, "caught": True, "raised": f"{type(e).__name__}: {e}"[:300]})
            report["caught"] += 1
            break
        failures = result.failures()
        caught = not result.passed and bool(exposed & set(failures["output"]))
        first = failures.iloc[0].to_dict() if len(failures) else {}
        report["caught"] += caught
        report["runs"].append({"seed": seed, "caught": caught, "seconds": round(time.perf_counter() - started, 2),
                               "first_failure": {k: first.get(k) for k in ("case", "layout", "output", "against",
                                                                            "reason")}})
    out.write_text(json.dumps(report, indent=1, default=str))
    print(name, f"caught {report['caught']}/{len(report['runs'])}", flush=True)


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "cost":
        cost(args[0], Path(args[1]))
    else:
        broken(args[0], int(args[1]), Path(args[2]))
