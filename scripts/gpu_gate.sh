#!/usr/bin/env bash
# Issue 18 on one H200: what the hardened gate costs per trial (both baselines, cold and warm Triton cache, by kind
# of check), and every broken variant of tests/broken_variants.py gated on the GPU, the ones only a GPU can show
# (a race, bfloat16, more than 2**31 elements) with 20 seeds (the large one with 3: its whole gate is long).
# Usage (device tool, carry .whl): bash scripts/gpu_gate.sh COMMIT   -> $OUT/gate.tgz (reports/gate/)
set -u
export LIGER_PERF_GIT_COMMIT=${1:?the commit under test} PYTHONUNBUFFERED=1
R=reports/gate; mkdir -p "$R/broken"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$R/device.txt"
export TRITON_CACHE_DIR=/tmp/triton-cost
for k in fused_add_rms_norm relu_squared; do
  start=$(date +%s)
  python3 scripts/gate_gpu.py cost $k "$R/cost-$k.json" > "$R/cost-$k.log" 2>&1
  echo "cost $k: exit $?, $(( $(date +%s) - start )) s" | tee -a "$R/steps.txt"
done
export TRITON_CACHE_DIR=/tmp/triton-broken
names=$(cd tests && python3 -c "from broken_variants import BROKEN; print(' '.join(f'{b.name}:{b.gpu_only}' for b in BROKEN))")
start=$(date +%s)
for entry in $names; do
  name=${entry%%:*}; only=${entry#*:}
  seeds=2; [ -n "$only" ] && seeds=20; [ "$only" = large ] && seeds=3
  python3 scripts/gate_gpu.py broken "$name" $seeds "$R/broken/$name.json" > "$R/broken/$name.log" 2>&1 &
  while [ "$(jobs -rp | wc -l)" -ge 4 ]; do sleep 1; done
done
wait
echo "broken variants: $(( $(date +%s) - start )) s" | tee -a "$R/steps.txt"
cat "$R"/broken/*.log | grep caught | tee -a "$R/steps.txt"
tar czf "$OUT/gate.tgz" "$R"
