"""Evidence for the gate's row-reduction rule, on the GPU: at the exact seeds of the gate's bfloat16 cases, the
kernel's dW, autograd's same-dtype dW and the float64 dW, their distances per element and in norm, and the verdict
of the rule before (no summation spread) and after (``correctness.SUM_SPREAD``). Also the large case's peak GPU
memory, which ``correctness.LARGE_CASE_INPUTS`` is calibrated on.

    python3 scripts/gate_evidence.py OUT.json [VARIANT.py]
"""

from __future__ import annotations

import json
import math
import sys
import time

import torch


def main(out_path: str, variant_path: str | None = None) -> None:
    from liger_perf.kernel.device import select_device

    device = select_device("cuda")
    from liger_perf.gate import correctness as gate
    from liger_perf.record.notebook import jsonable
    from liger_perf.kernel.registry import baseline_path, get_spec
    from liger_perf.kernel.variants import load_variant

    spec = get_spec("fused_add_rms_norm")
    variant = load_variant(variant_path or baseline_path("fused_add_rms_norm"), spec)
    wanted = {(300, 32768), (2051, 8192), spec.large_shape()}
    cases = [g for g in gate.gate_cases(spec, variant, device)
             if g.case.dtype == torch.bfloat16 and tuple(g.case.shape) in wanted]
    report = {"variant": str(variant.path), "sum_spread": gate.SUM_SPREAD, "cases": []}
    for g in cases:
        seed = g.seed(gate.FIXED_SEED)
        entry = {"case": g.case.label(), "layout": g.probe.label(), "kind": g.kind, "seed": seed}
        for label, spread in (("before", 0.0), ("after", gate.SUM_SPREAD)):
            gate.SUM_SPREAD = spread
            torch.cuda.reset_peak_memory_stats()
            started = time.time()
            rows = gate.check_case(spec, variant, g, device, seed)
            entry[f"{label}_seconds"] = round(time.time() - started, 2)
            entry[f"{label}_peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
            entry[label] = [{k: r[k] for k in ("output", "against", "verdict", "tolerance_used", "reason")}
                            for r in rows if r["output"] == "dW" or r["verdict"] != "pass"]
        gate.SUM_SPREAD = report["sum_spread"]
        if g.kind != "large":
            entry["values"] = dw_values(spec, variant, g, device, seed, gate)
        else:
            entry["large_case_inputs"] = round(entry["after_peak_gib"] * 2**30 / (math.prod(g.shape(spec)) * 2), 1)
        report["cases"].append(entry)
        print(entry["case"], entry["layout"], "before:", [r["verdict"] for r in entry["before"]],
              "after:", [r["verdict"] for r in entry["after"]], flush=True)
    with open(out_path, "w") as f:
        json.dump(jsonable(report), f, indent=1)


def dw_values(spec, variant, g, device, seed, gate) -> dict:
    """The case's inputs drawn as ``check_case`` draws them; dW of the kernel, of autograd in bfloat16 and in
    float64; the elements the rule before the spread failed, and the norms."""
    shape = g.shape(spec)
    generator = torch.Generator().manual_seed(seed)
    inputs = spec.make_inputs(shape, g.case.dtype, device.torch_device, generator, g.case.config)
    leaves = gate._leaves(inputs, spec.differentiable, "contiguous")
    ref_out = gate._forward(spec.reference_forward(), leaves, g.case.config)
    cotangents = spec.grad_outputs(tuple(o.detach() for o in ref_out), generator)
    if g.probe.cotangents == "expanded":
        cotangents = tuple(gate._row_equal(c) for c in cotangents)
    autograd = gate._backward(spec, ref_out, leaves, cotangents)[2].double()
    wide, terms = gate.float64_reference(spec, inputs, cotangents, g.case.config)
    exact, rss = wide["dW"], terms["dW"]
    mine_leaves = gate._leaves(inputs, spec.differentiable, "contiguous")
    mine_out = gate._forward(spec.variant_forward(variant.module), mine_leaves, g.case.config)
    kernel = gate._backward(spec, mine_out, mine_leaves, [c.clone() for c in cotangents])[2].double()
    same = spec.tolerance(g.case.dtype, g.case.config).for_output("dW", spec.row_reductions)[0]
    allowed = same.atol + same.rtol * autograd.abs()
    excess = (kernel - autograd).abs() / allowed
    worst = torch.argsort(excess, descending=True)[:8].tolist()
    eps = torch.finfo(g.case.dtype).eps

    def norm(a, b):
        return float((a - b).norm() / b.norm())

    return {
        "norm_kernel_vs_float64": norm(kernel, exact), "norm_autograd_vs_float64": norm(autograd, exact),
        "norm_kernel_vs_autograd": norm(kernel, autograd),
        "max_abs_kernel_vs_float64_over_eps_rss": float(((kernel - exact).abs() / (eps * rss)).max()),
        "max_abs_autograd_vs_float64_over_eps_rss": float(((autograd - exact).abs() / (eps * rss)).max()),
        "max_abs_kernel_vs_autograd_over_eps_rss": float(((kernel - autograd).abs() / (eps * rss)).max()),
        "elements_beyond_the_old_bound": int((excess > 1).sum()),
        "worst": [{"column": j, "kernel": float(kernel[j]), "autograd": float(autograd[j]),
                   "float64": float(exact[j]), "kernel_minus_float64": float(kernel[j] - exact[j]),
                   "autograd_minus_float64": float(autograd[j] - exact[j]),
                   "old_allowance": float(allowed[j]), "sqrt_sum_squared_terms": float(rss[j]),
                   "spread_allowance": float(gate.SUM_SPREAD * eps * rss[j])} for j in worst],
    }


if __name__ == "__main__":
    main(*sys.argv[1:])
