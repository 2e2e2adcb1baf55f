#!/usr/bin/env bash
# Issue 5 on a two-GPU machine: the fused loop on GPU 0; on GPU 1 the ReLU^2 loops (forward, then backward)
# and their bench. Resumable: a second call continues both loops from the notebooks.
# Usage (device tool, from the checkout): bash scripts/gpu_issue5.sh FUSED_MINUTES [bench]
set -u
fused_minutes=${1:-5.8}
mkdir -p "$OUT"
nvidia-smi -L > "$OUT/gpus.txt" 2>&1
run() { python3 -m liger_perf "$@"; }
(
  export CUDA_VISIBLE_DEVICES=0
  run optimize fused_add_rms_norm --target backward --device cuda --budget 8 --max-minutes "$fused_minutes"
  if [ "${2:-}" = bench ]; then run bench fused_add_rms_norm --device cuda; fi
) > "$OUT/fused.log" 2>&1 &
(
  export CUDA_VISIBLE_DEVICES=1
  if [ "${2:-}" != bench ]; then
    run optimize relu_squared --target forward --device cuda --budget 3 --max-minutes 3
    run optimize relu_squared --target backward --device cuda --budget 3 --max-minutes 2
    run bench relu_squared --device cuda
  fi
) > "$OUT/relu.log" 2>&1 &
wait
tar czf "$OUT/run.tgz" --exclude notebooks/templates notebooks reports
tail -n 25 "$OUT/fused.log" "$OUT/relu.log"
