#!/usr/bin/env bash
# Issue 13 check on one H200: the narrowed sandbox (its limits and /dev), then two trials inside it with NCU:
# the accepted best against the baseline (spot checks of timed calls, the current best's NCU durations, the
# judge's cross-check), and a relu_squared variant that patches the CUDA-event timer when first called (not at
# import, where the harness watch would refuse it): the judge must find it suspicious.
# Usage (device tool, carry .whl and .deb): bash scripts/gpu_measured.sh COMMIT
set -u
export LIGER_PERF_GIT_COMMIT=${1:?the commit under test} PYTHONUNBUFFERED=1
R="$OUT/measured"; mkdir -p "$R"
dpkg -x .deb/bubblewrap_*.deb /tmp/bw && export PATH=/tmp/bw/usr/bin:$PATH
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
python3 - > "$R/steps.txt" 2>&1 <<'PY'
import json, sys, tempfile
from pathlib import Path
from liger_perf import sandbox
print("sandbox:", sandbox.unavailable_reason() or "available", json.dumps(sandbox.limits()))
d = Path(tempfile.mkdtemp())
code = ("import os, torch; print(sorted(os.listdir('/dev'))); print('cuda', torch.cuda.is_available(), "
        "torch.ones(4, device='cuda').sum().item()); print('/root', os.listdir('/root'), '/tmp', os.listdir('/tmp'))")
done = sandbox.run([sys.executable, "-c", code], d, sandbox.sandboxed_environment(d), capture_output=True, text=True)
print("inside:", done.returncode, done.stdout, done.stderr[-500:])
PY
cat "$R/steps.txt"
sed 's/^def relu_squared(X):/_REAL = torch.cuda.Event.elapsed_time\n\n\ndef _faster(start, end):\n    return _REAL(start, end) \/ 10\n\n\ndef relu_squared(X):\n    torch.cuda.Event.elapsed_time = _faster/' \
  kernels/relu_squared/baseline.py > /tmp/cheat.py
start=$(date +%s)
LIGER_PERF_NOTEBOOKS=/tmp/nb python3 -m liger_perf trial fused_add_rms_norm --device cuda --no-peers \
  --variant notebooks/nvidia-h200/fused_add_rms_norm/variants/0014-bwd-rows-per-program-8.py \
  --against kernels/fused_add_rms_norm/baseline.py --name measured > "$R/trial.log" 2>&1
echo "fused trial: exit code $?, $(( $(date +%s) - start )) s" | tee -a "$R/steps.txt"
start=$(date +%s)
LIGER_PERF_NOTEBOOKS=/tmp/nb python3 -m liger_perf trial relu_squared --device cuda --no-peers \
  --variant /tmp/cheat.py --against kernels/relu_squared/baseline.py --name cheat > "$R/cheat.log" 2>&1
echo "cheat trial: exit code $?, $(( $(date +%s) - start )) s" | tee -a "$R/steps.txt"
python3 - >> "$R/steps.txt" 2>&1 <<'PY'
import json
from pathlib import Path
from liger_perf.guardrails import Guardrails
from liger_perf.history import load_trials
from liger_perf.judge import judge, suspicions
out = {}
for kernel, target in (("fused_add_rms_norm", "backward"), ("relu_squared", "forward")):
    for t in load_trials(kernel, Path("/tmp/nb/nvidia-h200")):
        checks = t.timing.spot_checks if t.timing else []
        ratios = {}
        for contender in ("candidate", "against"):
            sums = {}
            for launch in t.launches(contender=contender):
                sums[launch.key] = sums.get(launch.key, 0) + launch.metric("gpu__time_duration.sum") / 1e6
            ratios[contender] = {" ".join(k): round(r.median_ms / sums[k], 3) for r in t.timing_rows(contender)
                                 for k in [r.key] if k in sums and sums[k] > 0}
        verdict = judge(t, Guardrails(target=target)) if t.status == "complete" else None
        out[t.notebook.split("/")[-1]] = {
            "status": t.status, "reason": t.reason[:300], "spot_checks": len(checks),
            "spot_checks_failed": sum(not c.passed for c in checks), "event_over_ncu": ratios,
            "suspicions": suspicions(t) if t.status == "complete" else None,
            "verdict": verdict.verdict if verdict else None, "reasons": verdict.reasons if verdict else None,
            "step_seconds": t.step_seconds}
print(json.dumps(out, indent=1))
json.dump(out, open("/tmp/judged.json", "w"), indent=1)
PY
cp /tmp/judged.json "$R/judged.json"
cp /tmp/nb/nvidia-h200/fused_add_rms_norm/0000-measured.ipynb /tmp/nb/nvidia-h200/relu_squared/0000-cheat.ipynb "$R/" 2>/dev/null
cd "$OUT" && tar czf run.tgz measured && rm -rf measured
tar xzf run.tgz -O measured/steps.txt | grep -v '^ *"' | head -40
