#!/usr/bin/env bash
# Issue 11 check on one H200: the typed trial engine end to end on the GPU. One step of the fused loop from the
# committed history (the notebook validates its TrialResult before it emits it; the loop judges it and records
# the Verdict), then the readers over the whole GPU history (history, report, diff). The new notebook, the
# report and the logs come back in $OUT/run.tgz.
# Usage (device tool, wheels carried as .whl): bash scripts/gpu_typed.sh COMMIT
set -u
export LIGER_PERF_GIT_COMMIT=${1:?the commit under test} PYTHONUNBUFFERED=1
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
nvidia-smi -L > "$OUT/gpus.txt" 2>&1
start=$(date +%s%N)
python3 -m liger_perf optimize fused_add_rms_norm --target backward --device cuda --budget 1 > "$OUT/optimize.log" 2>&1
echo "optimize: exit code $?, $(( ($(date +%s%N) - start) / 1000000 )) ms" | tee "$OUT/steps.txt"
python3 -m liger_perf history fused_add_rms_norm > "$OUT/history.txt" 2>&1; echo "history: exit code $?" >> "$OUT/steps.txt"
python3 -m liger_perf history fused_add_rms_norm --format json > "$OUT/history.json" 2> "$OUT/history.err"
echo "history json: exit code $?, $(wc -c < "$OUT/history.json") bytes" >> "$OUT/steps.txt"
python3 -m liger_perf diff fused_add_rms_norm > "$OUT/diff.txt" 2>&1; echo "diff: exit code $?" >> "$OUT/steps.txt"
rm -f "$OUT/history.json"
tar czf "$OUT/run.tgz" --exclude notebooks/templates --exclude 'notebooks/*/artifacts' notebooks reports/fused_add_rms_norm \
  "$OUT/steps.txt" "$OUT/optimize.log" "$OUT/history.txt" "$OUT/diff.txt" "$OUT/gpus.txt" 2>/dev/null
cat "$OUT/steps.txt"; tail -n 15 "$OUT/optimize.log"
