"""Evidence for the gate's norm bound at few elements (``correctness.ROUNDING_FLIPS``), on the GPU.

1. The comparison that failed the best's re-validation on the H200 (trial 0031: 3x8 bfloat16, casting mode none,
   inputs padded, seed 325903337): the kernel's dW, autograd's same-dtype dW and the float64 dW per element, their
   distances per element (in ulps of bfloat16) and in norm, and the gate's verdict without the allowance (the rule
   before) and with it.
2. A sweep of the gate's small cases (at most ``--max-elements`` per input) at fresh seeds, for the best and the
   baseline: every comparison's verdict under both rules, the failures of each listed.

The variants run inside the sandbox (they are the loop's code): the script copies itself and them into a
scratch folder and runs itself there with ``--inside``.

    python3 scripts/norm_bound_evidence.py OUT.json [--seconds S] [VARIANT.py ...]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

SEED = 325903337
CASE = "3x8 bfloat16 [casting_mode=none,offset=0.0,eps=1e-06,in_place=False]"
LAYOUT = "padded"


def outside(args) -> None:
    from liger_perf.isolation.sandbox import run_contained

    scratch = Path(tempfile.mkdtemp(prefix="norm-bound-"))
    shutil.copy(__file__, scratch / "evidence.py")
    copies = []
    for i, path in enumerate(args.variants):
        copy = scratch / f"v{i}-{Path(path).name}"
        shutil.copy(path, copy)
        copies.append(copy.name)
    done = run_contained([sys.executable, "evidence.py", "--inside", "out.json", "--seconds", str(args.seconds),
                          "--max-elements", str(args.max_elements), "--device", args.device, *copies], scratch)
    if done.returncode:
        raise SystemExit(f"the sandboxed run exited with {done.returncode}")
    report = json.loads((scratch / "out.json").read_text())
    report["variant_files"] = [str(p) for p in args.variants]
    Path(args.out).write_text(json.dumps(report, indent=1))
    shutil.rmtree(scratch, ignore_errors=True)


def inside(args) -> None:
    import torch

    from liger_perf.gate import correctness as gate
    from liger_perf.kernel.device import select_device
    from liger_perf.kernel.registry import baseline_path, get_spec
    from liger_perf.kernel.spec import Case
    from liger_perf.kernel.variants import load_variant
    from liger_perf.record.notebook import jsonable

    device = select_device(args.device)
    spec = get_spec("fused_add_rms_norm")
    paths = [Path(p) for p in args.variants] or [baseline_path(spec.name)]
    flips = gate.ROUNDING_FLIPS
    report = {"rounding_flips": flips, "seed": SEED, "case": CASE, "layout": LAYOUT, "variants": [], "sweep": {}}
    started = time.time()

    def verdicts(variant, g, seed):
        """The case's rows under the rule before (no allowance) and after."""
        out = {}
        for label, value in (("before", 0.0), ("after", flips)):
            gate.ROUNDING_FLIPS = value
            out[label] = gate.check_case(spec, variant, g, device, seed)
        gate.ROUNDING_FLIPS = flips
        return out

    for path in paths:
        variant = load_variant(path, spec)
        failed = gate.GateCase(Case((3, 8), torch.bfloat16, {"casting_mode": "none", "offset": 0.0, "eps": 1e-6,
                                                              "in_place": False}), gate.Probe(inputs=LAYOUT))
        assert failed.case.label() == CASE, failed.case.label()
        rows = verdicts(variant, failed, SEED)
        entry = {"variant": path.name, "values": dw_values(spec, variant, failed, device, gate),
                 **{label: [{k: r[k] for k in ("output", "against", "verdict", "norm_rel_err", "tolerance_used",
                                               "reason")} for r in rs if r["output"] == "dW"]
                    for label, rs in rows.items()}}
        report["variants"].append(entry)
        print(path.name, {label: [r["verdict"] for r in entry[label]] for label in ("before", "after")}, flush=True)

    small = None
    for path in paths:
        variant = load_variant(path, spec)
        if small is None:
            small = [g for g in gate.gate_cases(spec, variant, device)
                     if g.kind != "large" and math.prod(g.shape(spec)) <= args.max_elements]
        report["sweep"][path.name] = {"cases": len(small), "draws": 0,
                                      "comparisons": {"before": 0, "after": 0}, "failed": {"before": [], "after": []}}
    rng = torch.Generator().manual_seed(int(time.time()))
    draw = 0
    while time.time() - started < args.seconds:
        base = int(torch.randint(0, 2**31 - 1, (1,), generator=rng))
        for path in paths:
            variant = load_variant(path, spec)
            sweep = report["sweep"][path.name]
            for g in small:
                for label, rs in verdicts(variant, g, g.seed(base)).items():
                    sweep["comparisons"][label] += len(rs)
                    sweep["failed"][label] += [{"case": g.case.label(), "layout": g.probe.label(),
                                                "seed": g.seed(base), "output": r["output"],
                                                "against": r["against"], "reason": r["reason"]}
                                               for r in rs if r["verdict"] != "pass"]
            sweep["draws"] += 1
        draw += 1
        print(f"draw {draw}: " + "; ".join(f"{name}: {len(s['failed']['before'])} failed before, "
                                           f"{len(s['failed']['after'])} after, of {s['comparisons']['after']}"
                                           for name, s in report["sweep"].items()), flush=True)
    report["seconds"] = round(time.time() - started, 1)
    Path(args.out).write_text(json.dumps(jsonable(report), indent=1))


def dw_values(spec, variant, g, device, gate) -> dict:
    """dW of the kernel, of autograd in bfloat16 and in float64, with the inputs ``check_case`` draws at SEED."""
    import torch

    generator = torch.Generator().manual_seed(SEED)
    inputs = spec.make_inputs(g.shape(spec), g.case.dtype, device.torch_device, generator, g.case.config)
    leaves = gate._leaves(inputs, spec.differentiable, "contiguous")
    ref_out = gate._forward(spec.reference_forward(), leaves, g.case.config)
    cotangents = spec.grad_outputs(tuple(o.detach() for o in ref_out), generator)
    names = spec.gradient_names()
    autograd = dict(zip(names, gate._backward(spec, ref_out, leaves, cotangents)))["dW"]
    wide, _ = gate.float64_reference(spec, inputs, cotangents, g.case.config)
    mine_leaves = gate._leaves(inputs, spec.differentiable, g.probe.inputs)
    mine_out = gate._forward(spec.variant_forward(variant.module), mine_leaves, g.case.config)
    kernel = dict(zip(names, gate._backward(spec, mine_out, mine_leaves,
                                            [gate._laid_out(c, g.probe.cotangents) for c in cotangents])))["dW"]
    kernel64, autograd64, exact = kernel.double(), autograd.double(), wide["dW"].double()
    _, exponent = torch.frexp(autograd64.abs())
    ulp = torch.ldexp(torch.full_like(autograd64, torch.finfo(torch.bfloat16).eps), exponent - 1)

    def norm(a, b):
        return float((a - b).norm() / b.norm())

    return {"kernel": kernel64.tolist(), "autograd_bfloat16": autograd64.tolist(), "float64": exact.tolist(),
            "kernel_minus_autograd_in_ulps": ((kernel64 - autograd64) / ulp).tolist(),
            "norm_kernel_vs_autograd": norm(kernel64, autograd64), "norm_kernel_vs_float64": norm(kernel64, exact),
            "norm_autograd_vs_float64": norm(autograd64, exact)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("variants", nargs="*")
    parser.add_argument("--seconds", type=float, default=40.0, help="how long the sweep may run")
    parser.add_argument("--max-elements", type=int, default=4096, help="the sweep's largest case, in elements")
    parser.add_argument("--device", default="cuda", help="cuda (the evidence) or interpret (a smoke test)")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parsed = parser.parse_intermixed_args()
    inside(parsed) if parsed.inside else outside(parsed)
