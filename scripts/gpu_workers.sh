#!/usr/bin/env bash
# Issue 11 evidence on the two-GPU machine: the fused loop from a copy of the committed history, one trial with
# --workers 1, then one round of two trials on two Dask workers (one GPU each) from the same copy, for the wall
# time per round. Each run starts with an empty Triton cache of its own (a warm cache would favour the second).
# Which GPU each trial's process used is sampled every 2 s (apps.txt). Notebooks and logs come back in run.tgz.
# Usage (device tool, kind nvidia-h200-x2, wheels carried as .whl): bash scripts/gpu_workers.sh COMMIT
set -u
export LIGER_PERF_GIT_COMMIT=${1:?the commit under test} PYTHONUNBUFFERED=1
mkdir -p "$OUT/w1" "$OUT/w2"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
nvidia-smi -L > "$OUT/gpus.txt" 2>&1
nvidia-smi --query-compute-apps=timestamp,pid,gpu_uuid,used_memory --format=csv -l 2 > "$OUT/apps.txt" 2>&1 &
for w in 1 2; do
  rm -rf /tmp/nb$w && cp -r notebooks /tmp/nb$w
  start=$(date +%s%N)
  TRITON_CACHE_DIR=/tmp/triton-cache-$w LIGER_PERF_NOTEBOOKS=/tmp/nb$w LIGER_PERF_REPORTS=$OUT/w$w \
    python3 -m liger_perf optimize fused_add_rms_norm --target backward --device cuda --workers $w --budget $w \
    > "$OUT/w$w/optimize.log" 2>&1
  code=$?
  echo "workers $w: exit code $code, $(( ($(date +%s%N) - start) / 1000000 )) ms" | tee -a "$OUT/workers.txt"
  mkdir -p "$OUT/w$w/notebooks" && cp /tmp/nb$w/nvidia-h200/fused_add_rms_norm/001[2-9]-*.ipynb "$OUT/w$w/notebooks/" 2>/dev/null
  cp -r /tmp/nb$w/nvidia-h200/fused_add_rms_norm/variants "$OUT/w$w/variants"
done
kill %1 2>/dev/null
cd "$OUT" && tar czf run.tgz workers.txt gpus.txt apps.txt w1 w2 && rm -rf w1 w2
tail -n 12 "$OUT/workers.txt"
