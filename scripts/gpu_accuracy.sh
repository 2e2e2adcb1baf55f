#!/usr/bin/env bash
# Issue 15, accuracy on the H200: `liger-perf bench` of both kernels (the best beside the baseline, eager and
# liger-kernel, with the new accuracy table), then one trial of the fused kernel's best against the baseline in a
# scratch history (what the accuracy step costs in a trial, and what it records). Runs from the checkout without
# installing it (PYTHONPATH), as a user of the source tree would.
# Usage (device tool, carry .whl and .deb): bash scripts/gpu_accuracy.sh COMMIT
#   -> $OUT/accuracy.tgz (reports/nvidia-h200/<kernel>/bench.*, reports/accuracy/: the trial's notebook, logs)
set -u
export LIGER_PERF_GIT_COMMIT=${1:?the commit under test} PYTHONUNBUFFERED=1
T0=$(date +%s)
R=reports/accuracy; mkdir -p "$R"
dpkg -x .deb/bubblewrap_*.deb /tmp/bw && export PATH=/tmp/bw/usr/bin:$PATH
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
echo "install: $(( $(date +%s) - T0 )) s" | tee -a "$R/steps.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee -a "$R/steps.txt"
for kernel in fused_add_rms_norm relu_squared; do
  start=$(date +%s)
  timeout 200 python3 -m liger_perf bench "$kernel" --device cuda --repetitions 30 > "$R/bench-$kernel.log" 2>&1
  echo "bench $kernel: rc=$? $(( $(date +%s) - start )) s" | tee -a "$R/steps.txt"
done
start=$(date +%s)
best=notebooks/nvidia-h200/fused_add_rms_norm/variants/0017-carry-over-0006.py
LIGER_PERF_NOTEBOOKS=/tmp/nb timeout 240 python3 -m liger_perf trial fused_add_rms_norm --device cuda --no-peers \
  --variant "$best" --against kernels/fused_add_rms_norm/baseline.py --name best-vs-baseline \
  --hypothesis "none: the accuracy step's cost and record, on the current best against the baseline" \
  > "$R/trial.log" 2>&1
echo "trial: rc=$? $(( $(date +%s) - start )) s" | tee -a "$R/steps.txt"
cp /tmp/nb/nvidia-h200/fused_add_rms_norm/0000-*.ipynb "$R/" 2>/dev/null
tail -n 5 "$R"/*.log
tar czf "$OUT/accuracy.tgz" --exclude=artifacts "$R" reports/nvidia-h200/fused_add_rms_norm/bench.* \
  reports/nvidia-h200/relu_squared/bench.* reports/nvidia-h200/fused_add_rms_norm/bench-*.png \
  reports/nvidia-h200/relu_squared/bench-*.png 2>/dev/null
echo "total: $(( $(date +%s) - T0 )) s" | tee -a "$R/steps.txt"
