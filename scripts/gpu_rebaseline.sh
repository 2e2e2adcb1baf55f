#!/usr/bin/env bash
# Issue 18 on one H200: the fixed baselines recorded as new baseline trials (with peers), and the fused kernel's
# previous best carried over to its new baseline by the loop (the carry-over trial, judged against it), in the
# sandbox, from the committed history. Usage (device tool, carry .whl and .deb): bash scripts/gpu_rebaseline.sh
# COMMIT  -> $OUT/rebaseline.tgz (notebooks/ and the logs in reports/rebaseline/)
set -u
export LIGER_PERF_GIT_COMMIT=${1:?the commit under test} PYTHONUNBUFFERED=1
R=reports/rebaseline; mkdir -p "$R"
dpkg -x .deb/bubblewrap_*.deb /tmp/bw && export PATH=/tmp/bw/usr/bin:$PATH
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
start=$(date +%s)
python3 -m liger_perf optimize fused_add_rms_norm --target backward --budget 2 --device cuda > "$R/fused.log" 2>&1
echo "fused: exit $?, $(( $(date +%s) - start )) s" | tee -a "$R/steps.txt"
start=$(date +%s)
python3 -m liger_perf optimize relu_squared --target forward --budget 1 --device cuda > "$R/relu.log" 2>&1
echo "relu: exit $?, $(( $(date +%s) - start )) s" | tee -a "$R/steps.txt"
tail -5 "$R/fused.log" "$R/relu.log"
tar czf "$OUT/rebaseline.tgz" notebooks "$R"
