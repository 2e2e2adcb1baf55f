#!/usr/bin/env bash
# Issue 19 evidence on one H200: a real night from the committed history (re-validation and tuning under a wall
# clock), then a second night right after it, which must find nothing to do. Both summaries and the new
# notebooks come back in $OUT/run.tgz.
# Usage (device tool, wheels carried as .whl): bash scripts/gpu_nightly.sh COMMIT
set -u
export LIGER_PERF_GIT_COMMIT=${1:?the commit under test}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
nvidia-smi -L > "$OUT/gpus.txt" 2>&1
for night in 1 2; do
  start=$(date +%s%N)
  python3 -m liger_perf nightly --config scripts/nightly-h200.yaml > "$OUT/night$night.log" 2>&1
  code=$?
  echo "night $night: exit code $code, $(( ($(date +%s%N) - start) / 1000000 )) ms" | tee -a "$OUT/nights.txt"
done
tar czf "$OUT/run.tgz" --exclude artifacts notebooks reports/nvidia-h200/nightly
tail -n 30 "$OUT/night1.log" "$OUT/night2.log"
