#!/usr/bin/env bash
# Issue 13 check on one H200: a variant that dumps its environment and working folder at import runs under
# `check --device cuda` and in a full trial (gate, timing, NCU) while the caller holds secrets; none may reach it,
# and the trial must complete with its NCU profile. Everything comes back in $OUT/run.tgz.
# Usage (device tool, wheels carried as .whl): bash scripts/gpu_contained.sh COMMIT
set -u
export LIGER_PERF_GIT_COMMIT=${1:?the commit under test} PYTHONUNBUFFERED=1
mkdir -p "$OUT/contained"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export OPENAI_API_KEY=sk-gpu-never-seen GITHUB_TOKEN=ghp-gpu-never-seen
for where in check trial; do
  python3 - "$where" <<'PY'
import sys
where = sys.argv[1]
spy = (f"import json as _j, os as _o\n_j.dump({{'env': dict(_o.environ), 'cwd': _o.getcwd()}}, "
       f"open('/tmp/seen-{where}.json', 'w'))\n")
open(f"/tmp/spy_{where}.py", "w").write(spy + open("kernels/fused_add_rms_norm/baseline.py").read())
PY
done
start=$(date +%s)
python3 -m liger_perf check fused_add_rms_norm --device cuda --no-convergence --variant /tmp/spy_check.py \
  > "$OUT/contained/check.log" 2>&1
echo "check: exit code $?, $(( $(date +%s) - start )) s" | tee "$OUT/contained/steps.txt"
start=$(date +%s)
LIGER_PERF_NOTEBOOKS=/tmp/nb python3 -m liger_perf trial fused_add_rms_norm --device cuda --no-peers \
  --variant /tmp/spy_trial.py --name spy > "$OUT/contained/trial.log" 2>&1
echo "trial: exit code $?, $(( $(date +%s) - start )) s" | tee -a "$OUT/contained/steps.txt"
for where in check trial; do
  python3 - "$where" >> "$OUT/contained/steps.txt" <<'PY'
import json, sys
seen = json.load(open(f"/tmp/seen-{sys.argv[1]}.json"))
leaked = [k for k, v in seen["env"].items() if "never-seen" in v]
print(f"{sys.argv[1]}: {len(seen['env'])} variables seen, secrets among them: {leaked or 'none'}; cwd {seen['cwd']}")
print(f"{sys.argv[1]}: variables: {' '.join(sorted(seen['env']))}")
PY
done
cp /tmp/nb/nvidia-h200/fused_add_rms_norm/0000-spy.ipynb "$OUT/contained/" 2>/dev/null
cd "$OUT" && tar czf run.tgz contained && rm -rf contained
tar xzf run.tgz -O contained/steps.txt
