#!/usr/bin/env bash
# Issue 12 on the H200: the throughput benchmark (a short optimize of fused_add_rms_norm from the committed
# history, in the sandbox, staged gates and screening) and A/A trials (a comment-only copy of the best against
# the best), resumable across calls: A/A trials already under reports/aa/ count.
# Usage (device tool, carry .whl and .deb): bash scripts/gpu_throughput.sh COMMIT [throughput] [aa] [LIMIT_S]
#   -> $OUT/throughput.tgz (reports/throughput.json and the notebooks the benchmark wrote), $OUT/aa.tgz
set -u
export LIGER_PERF_GIT_COMMIT=${1:?the commit under test} PYTHONUNBUFFERED=1
shift
LIMIT=${!#}; case $LIMIT in ''|*[!0-9]*) LIMIT=560 ;; esac
T0=$(date +%s)
R=reports/throughput; mkdir -p "$R" reports/aa
dpkg -x .deb/bubblewrap_*.deb /tmp/bw && export PATH=/tmp/bw/usr/bin:$PATH
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
echo "install: $(( $(date +%s) - T0 )) s" | tee -a "$R/steps.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee -a "$R/steps.txt"
for which in "$@"; do
  start=$(date +%s)
  case $which in
    throughput) timeout -s TERM ${TP_LIMIT:-330} python3 scripts/throughput.py fused_add_rms_norm --budget 4 \
                  --screen 4 --workers 1 --out reports/throughput.json --keep "$R/notebooks" > "$R/throughput.log" 2>&1 ;;
    aa) python3 scripts/aa_trials.py fused_add_rms_norm --trials 20 --root reports/aa \
          --deadline-s $(( LIMIT - (start - T0) - 60 > 1 ? LIMIT - (start - T0) - 60 : 1 )) >> reports/aa/aa.log 2>&1 ;;
    *) continue ;;
  esac
  echo "$which: exit $?, $(( $(date +%s) - start )) s" | tee -a "$R/steps.txt"
done
tail -n 30 "$R/throughput.log" reports/aa/aa.log 2>/dev/null
tar czf "$OUT/throughput.tgz" --exclude=artifacts reports/throughput.json "$R" 2>/dev/null
tar czf "$OUT/aa.tgz" --exclude=artifacts reports/aa
ls -la "$OUT"
