#!/usr/bin/env bash
# Issue 13 check on one H200: trials inside the bubblewrap sandbox with compiled Triton and NCU. A probe variant
# of relu_squared tries to write outside its folder, reach the network, see other processes and read a secret;
# then the fused kernel's best runs a full trial (gate, timing, NCU) against the baseline inside the sandbox.
# Usage (device tool, carry .whl and .deb; .deb from ../shared/device/sandbox-deb.sh): bash scripts/gpu_sandbox.sh C
set -u
export LIGER_PERF_GIT_COMMIT=${1:?the commit under test} PYTHONUNBUFFERED=1 OPENAI_API_KEY=sk-gpu-never-seen
mkdir -p "$OUT/sandbox"
dpkg -x .deb/bubblewrap_*.deb /tmp/bw && export PATH=/tmp/bw/usr/bin:$PATH
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
python3 -c "from liger_perf import sandbox; print('sandbox:', sandbox.unavailable_reason() or 'available')" \
  | tee "$OUT/sandbox/steps.txt"
python3 - <<'PY'
import os, re
test = open("tests/test_sandbox.py").read()
probe = re.search(r"PROBE = '''(.*?)'''", test, re.S).group(1)
probe = probe.replace("TARGETS", repr(["/tmp/outside.txt", os.getcwd() + "/kernels/escaped.txt"]))
probe = probe.replace("PORT", "9").replace("PARENT", str(os.getpid()))
open("/tmp/probe.py", "w").write(probe + open("kernels/relu_squared/baseline.py").read())
PY
start=$(date +%s)
LIGER_PERF_NOTEBOOKS=/tmp/nb python3 -m liger_perf trial relu_squared --device cuda --no-peers --no-ncu \
  --variant /tmp/probe.py --name probe > "$OUT/sandbox/probe.log" 2>&1
echo "probe trial: exit code $?, $(( $(date +%s) - start )) s" | tee -a "$OUT/sandbox/steps.txt"
cat /tmp/nb/nvidia-h200/relu_squared/artifacts/0000-probe/probe.json >> "$OUT/sandbox/steps.txt"; echo >> "$OUT/sandbox/steps.txt"
ls /tmp/outside.txt kernels/escaped.txt >> "$OUT/sandbox/steps.txt" 2>&1
start=$(date +%s)
LIGER_PERF_NOTEBOOKS=/tmp/nb python3 -m liger_perf trial fused_add_rms_norm --device cuda --no-peers \
  --variant notebooks/nvidia-h200/fused_add_rms_norm/variants/0006-bwd-tile-elements-8192.py \
  --against kernels/fused_add_rms_norm/baseline.py --name sandboxed > "$OUT/sandbox/trial.log" 2>&1
echo "fused trial: exit code $?, $(( $(date +%s) - start )) s" | tee -a "$OUT/sandbox/steps.txt"
cp /tmp/nb/nvidia-h200/fused_add_rms_norm/0000-sandboxed.ipynb /tmp/nb/nvidia-h200/relu_squared/0000-probe.ipynb "$OUT/sandbox/" 2>/dev/null
cd "$OUT" && tar czf run.tgz sandbox && rm -rf sandbox
tar xzf run.tgz -O sandbox/steps.txt; tar xzf run.tgz -O sandbox/trial.log | tail -3
