#!/usr/bin/env bash
# Trials on the GPU machine, through the `device` tool: each argument is one `liger-perf trial` argument list,
# e.g.  scripts/gpu_trials.sh "relu_squared" "relu_squared --against kernels/relu_squared/baseline.py --name a-a"
# Brings back, under $OUT: the log, and one tarball of the trial notebooks and their .ncu-rep artifacts.
set -u
out=${OUT:-gpu_trials_out}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  for args in "$@"; do
    start=$(date +%s)
    # shellcheck disable=SC2086
    python3 -m liger_perf trial $args --device cuda 2>&1 | grep -v 'IPKernelApp'
    echo "trial [$args]: exit code ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s"
  done
} 2>&1 | tee "$out/trials.log"
tar czf "$out/notebooks.tgz" notebooks --exclude notebooks/templates
ls -la "$out"
