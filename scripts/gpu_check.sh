#!/usr/bin/env bash
# Run the correctness gate on a CUDA machine: the baselines of the kernels named (default: all), then every
# broken variant of those kernels (tests/broken_variants.py; each must fail). Writes its logs under ${OUT:-gpu_check_out}.
set -u
out=${OUT:-gpu_check_out}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
kernels=("$@")
[ ${#kernels[@]} -gt 0 ] || kernels=(fused_add_rms_norm relu_squared)
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  for k in "${kernels[@]}"; do
    python3 -m liger_perf check "$k" --device cuda; echo "exit code: $?"
  done
  broken=$(mktemp -d)
  python3 tests/broken_variants.py "$broken" > /dev/null || exit 1
  for k in "${kernels[@]}"; do
    for f in "$broken/$k"/*.py; do
      log="$out/$(basename "$f" .py).log"
      python3 -m liger_perf check "$k" --variant "$f" --device cuda --no-convergence > "$log" 2>&1
      echo "broken variant $k/$(basename "$f"): exit code $?; failing outputs: $(grep -E '│ FAIL|FAIL ' "$log" | awk -F'│' '{print $6 $7}' | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
    done
  done
} 2>&1 | tee "$out/gpu_check.log"
