# Run from the checkout root: python reports/evidence/2026-12-02-loop-fused_add_rms_norm/estimate_0045.py
"""liger-kernel's backward time over 0045's, estimated: the 0042 bench's side-by-side ratios (liger / 0042)
over 0045's trial ratios (0045 / 0042), per tuning case."""
import json
from pathlib import Path
from liger_perf.record.history import load_trials, geomean
d = json.load(open("reports/nvidia-h200/fused_add_rms_norm/bench-models.json"))
bench = {(r["pass"], r["shape"], r["dtype"]): r["ratio"] for r in d["rows"] if r["contender"] == "liger-kernel" and r["split"] == "tune"}
t = next(x for x in load_trials("fused_add_rms_norm", Path("notebooks/nvidia-h200")) if x.trial_id == 45)
trial = {(r.pass_name, r.shape, r.dtype): r.ratio for r in t.candidate_ratios("backward")}
out = {k[1:]: bench[k] / trial[k] for k in bench if k[0] == "backward" and k in trial}
print("0042 bench: geomean", round(geomean([bench[k] for k in bench if k[0] == "backward"]), 3), "slower", sum(bench[k] < 1 for k in bench if k[0] == "backward"))
print("0045 est: geomean", round(geomean(list(out.values())), 3), "cases", len(out), "slower", sum(v < 1 for v in out.values()))
for k, v in sorted(out.items(), key=lambda kv: kv[1])[:12]: print(k, round(v, 3), "bench", round(bench[("backward", *k)], 3), "trial", round(trial[("backward", *k)], 3))
