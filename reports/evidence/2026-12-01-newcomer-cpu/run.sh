#!/usr/bin/env bash
# The README's first command, verbatim, its output piped (as with nohup, tee or CI), each line time-stamped.
cd /tmp/newcomer
start=$(date +%s)
bash -c 'python3 -m venv .venv && . .venv/bin/activate && python -m pip install torch==2.13.0 && python -m pip install -e . && liger-perf optimize fused_add_rms_norm --target backward' 2>&1 \
  | while IFS= read -r line; do echo "[$(( $(date +%s) - start )) s] $line"; done
echo "[$(( $(date +%s) - start )) s] exit: ${PIPESTATUS[0]}"
