#!/usr/bin/env bash
# The optimize loop on the H200, resumed from the committed history (notebooks/nvidia-h200/<kernel>/): screening,
# staged gates, the accuracy step, knob exploration once the spec's remedies are spent. New trials are written
# into the history itself (to be committed); a trial cut off by the time limit leaves a partial file the next run
# drops.
# Usage (device tool, carry .whl and .deb): bash scripts/gpu_loop.sh COMMIT KERNEL TARGET MINUTES [LIMIT_S [BENCH_S]]
#   BENCH_S > 0: keep that many seconds after the loop for `liger-perf bench KERNEL` (30 repetitions) of the best
#   -> $OUT/loop.tgz (the kernel's new notebooks and variants, its report and bench, the log)
set -u
export LIGER_PERF_GIT_COMMIT=${1:?the commit under test} PYTHONUNBUFFERED=1
KERNEL=${2:?kernel} TARGET=${3:?target} MINUTES=${4:?minutes} LIMIT=${5:-560} BENCH=${6:-0}
T0=$(date +%s)
dpkg -x .deb/bubblewrap_*.deb /tmp/bw && export PATH=/tmp/bw/usr/bin:$PATH
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
mkdir -p reports/loop
echo "install: $(( $(date +%s) - T0 )) s" | tee reports/loop/$KERNEL-steps.txt
timeout $(( LIMIT - ($(date +%s) - T0) - 20 - BENCH )) python3 -m liger_perf optimize "$KERNEL" --target "$TARGET" \
  --device cuda --budget 8 --max-minutes "$MINUTES" > "reports/loop/$KERNEL.log" 2>&1
echo "optimize: rc=$? $(( $(date +%s) - T0 )) s" | tee -a reports/loop/$KERNEL-steps.txt
tail -n 25 "reports/loop/$KERNEL.log"
if [ "$BENCH" -gt 0 ]; then
  timeout $(( LIMIT - ($(date +%s) - T0) - 15 )) python3 -m liger_perf bench "$KERNEL" --device cuda \
    --repetitions 30 > "reports/loop/bench-$KERNEL.log" 2>&1
  echo "bench: rc=$? $(( $(date +%s) - T0 )) s" | tee -a reports/loop/$KERNEL-steps.txt
  tail -n 30 "reports/loop/bench-$KERNEL.log"
fi
tar czf "$OUT/loop.tgz" --exclude=artifacts --exclude='.*' "notebooks/nvidia-h200/$KERNEL" \
  "reports/nvidia-h200/$KERNEL" reports/loop
