#!/usr/bin/env bash
# Issue 18 on one H200: the fixed baselines recorded as new baseline trials (with peers), and the fused kernel's
# previous best carried over to its new baseline by the loop (the carry-over trial, judged against it), in the
# sandbox, from the committed history. Only the files the run wrote come back (the whole history is over the
# 16 MiB a returned file may have).
# Usage (device tool, carry .whl and .deb): bash scripts/gpu_rebaseline.sh COMMIT [fused] [relu]
#   -> $OUT/rebaseline.tgz (the new notebooks and variants, and the logs in reports/rebaseline/)
set -u
export LIGER_PERF_GIT_COMMIT=${1:?the commit under test} PYTHONUNBUFFERED=1
shift
R=reports/rebaseline; mkdir -p "$R"; touch /tmp/started
dpkg -x .deb/bubblewrap_*.deb /tmp/bw && export PATH=/tmp/bw/usr/bin:$PATH
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
for which in "$@"; do
  start=$(date +%s)
  case $which in
    fused) python3 -m liger_perf optimize fused_add_rms_norm --target backward --budget 2 --device cuda ;;
    relu) python3 -m liger_perf optimize relu_squared --target forward --budget 1 --device cuda ;;
  esac > "$R/$which.log" 2>&1
  echo "$which: exit $?, $(( $(date +%s) - start )) s" | tee -a "$R/steps.txt"
  tail -n 8 "$R/$which.log"
done
find notebooks -newer /tmp/started -type f \( -name '*.ipynb' -o -name '*.py' \) -not -path '*/artifacts/*' \
  > /tmp/new-files
tar czf "$OUT/rebaseline.tgz" -T /tmp/new-files "$R"
