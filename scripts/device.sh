#!/usr/bin/env bash
# The one driver for a lent GPU machine (the device tool): installs what the machine lacks, runs the steps named,
# and returns every file the steps wrote under reports/ and notebooks/ as $OUT/device.tgz (unpack it at the
# checkout's root and commit what belongs to the evidence). Call it as the whole command: a `; tar czf
# $OUT/device.tgz reports notebooks` after it replaced its archive with one of every report and notebook, over the
# 16 MiB a returned file may have, and nothing came back (2026-12-04, fifteenth session: a screening and a trial lost).
#
# Unpack a call's device.tgz before the next call: the machine gets this tree, and a loop on a tree without the last
# call's trials numbers its own from the same place (2026-12-03: a screening written as a second 0056, committed
# as 0057; `liger-perf` warns of two notebooks with one number). The tree and the carried wheels travel together
# and may be 64 MiB at most: the history's notebooks are most of the tree (about 0.6 MB a trial), .whlt 19.7 MB.
# At 23e4215 (trial 0061) the tracked tree is 45.8 MB: with .whlt and .deb, 65.5 of the 67.1 MB. No step needs
# reports/evidence (14 MB), and a tracked file deleted from the working tree neither travels nor counts (2026-12-03,
# eleventh session: a call with a 3 MB .pad/ carried besides went through). So move reports/evidence out of the
# checkout before a call and back after it; then unpack device.tgz elsewhere and append its
# reports/evidence/<date>-device.log (that call's lines alone) to the committed one.
# `bash scripts/device_tree.sh out` does the moving (reports/ and tests/) and writes .device-commit, which this script
# checks its COMMIT argument against; `bash scripts/device_tree.sh back` puts them back.
# Re-zip the carried wheels with LZMA first (python3 scripts/rezip_lzma.py .whlt: 25.1 -> 18.2 MB at trial 0088;
# pip reads such wheels): with reports/ and tests/ out, a trial's call at 0088 is then 42.1 + 18.2 MB of the 67.1.
#
# Usage (carry .whl and .deb; for e2e, .whlm and .whle, the wheels without Nsight Compute's, instead of .whl):
#   a trimmed set must keep pydantic (+ pydantic_core, annotated_types, typing_inspection: the package imports
#   it), ncu_report for any step that profiles (a loop's trial) and liger_kernel for a bench or a baseline trial
#   (not the machine's Nsight Compute's own extras/python module instead: reading a report with it killed the trial's
#   kernel, 2026-12-02's trial 0044, reports/evidence/2026-12-02-loop-fused_add_rms_norm/)
#   bash scripts/device.sh COMMIT LIMIT_S STEP[:ARG,...] ...
#   COMMIT    the commit under test (the machine gets a copy of the working tree, without .git)
#   LIMIT_S   seconds this call may take in all; each step stops in time for the results to come back
# Steps (each writes into reports/evidence/<date>-<step>/ unless it says otherwise):
#   selfcheck[:KERNEL]     liger-perf selfcheck --device cuda [--kernel KERNEL]  -> reports/nvidia-h200/selfcheck.json
#                          (the fused kernel alone: 186-288 s of the whole check's 278-432 s, 2026-12-04)
#   gate-evidence          scripts/gate_evidence.py: the row-reduction rule at the gate's bfloat16 seeds
#   check-best             liger-perf check of the H200 history's best, on a GPU that is no H200 (skipped on one)
#   inductor-probe:SHAPES  scripts/inductor_probe.py: torch.compile's generated Triton for the backward, each
#                          contender's backward kernels (torch.profiler) and one NCU pass of each, at SHAPES
#                          (ROWSxCOLS:DTYPE joined by "+", e.g. 16384x2304:float32+32768x1152:float32);
#                          PROBE_ARGS="NAME=FILE ... --ncu-only": other variants beside them, NCU alone
#   norm-bound:SECONDS     scripts/norm_bound_evidence.py: the norm bound at few elements (the H200 best, baseline)
#   broken:NAME[,NAME]     liger-perf check of broken variants (tests/broken_variants.py), on the GPU
#   gate-cost-old:DIR      liger-perf check of the baseline with the package in DIR (an older checkout), cold
#   main-job:MINUTES       a fresh workspace and the README's main job (optimize fused_add_rms_norm), its log
#   loop:KERNEL,TARGET,MIN[,SUITE[,BUDGET[,REPS[,BUCKETS]]]]  the optimize loop on the committed history
#                          (notebooks/nvidia-h200/KERNEL), timing SUITE (e.g. models-tune) if given, REPS timed
#                          repetitions per contender if given (a model-suite trial at the default 100 took 400 s),
#                          tuning only BUCKETS if given (--buckets, "+" between them: 2048x2+1024x2);
#                          LOOP_ARGS="--screen 7": more options of optimize (word-split).
#                          MIN "auto": the time this call has left less MARGIN_S (default 90 s: the loop's pace is a
#                          median of the notebooks' own times, which leave out Papermill's start and the judge, and a
#                          slow trial beats a median: 0054 took 306 s in its notebook against a pace of 261 s; since
#                          2026-12-04 a candidate's pace counts the full gate and profile an accepted one runs).
#                          The loop begins no screening or trial that its recent pace says would end after
#                          --max-minutes (a fixed MIN let trials begin that the call's limit killed: 0044, and 0056
#                          after a screening of three)
#   aa:N                   N A/A trials of the fused best against a comment-only copy of itself (no NCU), in
#                          reports/evidence/<date>-aa-COMMIT/ (a later call at the same commit resumes them;
#                          AA_ROOT=DIR resumes DIR instead, e.g. across midnight or a commit that no gated file differs in)
#   nightly                two nights in a row on the committed history (the second finds nothing to do)
#   security               scripts/security_probe.py: canaries, files and forgeries inside a sandboxed trial
#   hmm-probe              scripts/hmm_probe.py: whether a compiled kernel can read the host memory of its process
#   e2e:MODEL              liger-perf e2e of a Llama-like or Gemma-like model -> reports/nvidia-h200/e2e/
#   dispatch-check         the gate of a baseline whose DISPATCH table takes other algorithms in three buckets
#   knob-check:KNOB=VALUE[,KNOB@BUCKET=VALUE...]  the gate of the fused baseline with those knobs (Python
#                          literals, else strings), e.g. a new knob's paths on the GPU
#   trial-models:K[,R]     one trial of K's baseline on the tuning split (--suite models-tune), R repetitions, its
#                          notebook in reports/evidence/<date>-trial-models-K/notebooks/
#   ab-models:K,KNOB,VALUE[,R]  K's baseline with KNOB=VALUE against the baseline on the tuning split (backward,
#                          no NCU, R repetitions), in a scratch history under reports/evidence/<date>-ab-models-K/
#   ab-time:K,R,NAME=FILE[,NAME=FILE...]  scripts/ab_time.py: the variants (the first the reference) and
#                          liger-kernel on the tuning split, backward, R repetitions, no gate -> <date>-ab-time-K/ab.json
#                          (AB_MAX_COLUMNS=H / AB_MIN_COLUMNS=H: only the cases at most / at least H columns wide; AB_NAME=X: the folder <date>-X)
#   draw-cost[:K]          scripts/draw_cost.py: seconds to draw K's tuning-split inputs on the CPU and on the device
#   bench-models:K,R[,no-compile[,S]]  liger-perf bench K --suite models, R repetitions (torch.compile left out
#                          with no-compile; "compile" keeps it), stopped after S seconds -> reports/<device>/K/bench-models.*
#                          (BENCH_SHAPES=4096x1024,...: those shapes only -> bench-models-shapes.*, e.g. torch.compile
#                          at a few model shapes: it compiles each shape anew; BENCH_VARIANT=FILE: that variant, not
#                          the device's best; BENCH_VARIANT=h200-best: the H200 history's best, e.g. on another GPU)
# After a call: unpack device.tgz, rename each step's folder to reports/evidence/<date>-<topic>/ if it needs a
# clearer name, and write its README.md (the commit, this command line, the result in a few lines).
# This script replaces the one-off scripts/gpu_*.sh of earlier runs; what each of those ran is written in the
# README of the evidence folder it produced (reports/evidence/*/README.md).
set -u
export LIGER_PERF_GIT_COMMIT=${1:?the commit under test} PYTHONUNBUFFERED=1
# The label every record of this call carries: checked against what scripts/device_tree.sh wrote of the tree sent.
if [ -f .device-commit ]; then
  read -r tree_commit tree_state < .device-commit || true
  hash='^[0-9a-f]{7,40}$'
  if ! [[ "${tree_commit:-}" =~ $hash && "$LIGER_PERF_GIT_COMMIT" =~ $hash ]]; then
    echo "device.sh: .device-commit says '${tree_commit:-}' and the label is '$LIGER_PERF_GIT_COMMIT': both must be" \
         "commit hashes of 7 to 40 hex digits (scripts/device_tree.sh out writes the file)"
    exit 2
  fi
  case "$LIGER_PERF_GIT_COMMIT" in
    "$tree_commit"*|"${tree_commit:0:${#LIGER_PERF_GIT_COMMIT}}") ;;
    *) echo "device.sh: this tree is $tree_commit ($tree_state), not $LIGER_PERF_GIT_COMMIT: call again with" \
            "$tree_commit, or run scripts/device_tree.sh back and out again after a new commit"
       exit 2 ;;
  esac
  [ "$tree_state" = dirty ] && export LIGER_PERF_GIT_DIRTY=1
else
  echo "device.sh: no .device-commit (scripts/device_tree.sh out writes it): the label $LIGER_PERF_GIT_COMMIT is not checked"
fi
LIMIT=${2:?seconds this call may take}
shift 2
T0=$(date +%s)
DAY=$(date +%F)
MARK=$(mktemp) && touch -d '-1 second' "$MARK"
left() { echo $(( LIMIT - 25 - ($(date +%s) - T0) )); }
log() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "reports/evidence/$DAY-device.log"; }
# The fused kernel's best in the H200 history: the variant file the probes and check-best take.
h200_best() {
  python3 -c 'from liger_perf.record.history import best_variant_file
from liger_perf.record.store import Store
print(best_variant_file("fused_add_rms_norm", Store(device="nvidia-h200").notebooks))'
}
mkdir -p "reports/evidence"
dpkg -x .deb/bubblewrap_*.deb /tmp/bw && export PATH=/tmp/bw/usr/bin:$PATH
for wheels in .whl .whle .whlm .whls .whlt; do  # .whls: .whl less what no step here needs (debugpy, openai, dask); .whlt: .whls less jedi and parso (IPython runs without them), for a tree near the 64 MiB carry limit
  [ -d "$wheels" ] || continue
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$wheels"/*.whl || { echo "device.sh: the wheels of $wheels did not install"; exit 1; }
done
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/triton-cache
log "install done; $(nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader)"
run() {  # run STEP_DIR CMD...: the command under the time left, its output in STEP_DIR/$RUN_LOG (log.txt)
  local dir=$1 output=${RUN_LOG:-log.txt}; shift
  mkdir -p "$dir"
  # An earlier call's log of the same step and day (committed evidence) is kept: this one gets the time in its name.
  [ -e "$dir/$output" ] && output="${output%.txt}-$(date +%H%M%S).txt"
  local budget; budget=$(left)
  if [ "$budget" -lt 20 ]; then log "skipped (no time left): $*"; return 0; fi
  log "start ($budget s left, output $dir/$output): $*"
  timeout "$budget" "$@" > "$dir/$output" 2>&1
  local rc=$?
  log "end rc=$rc: $*"
  tail -n 12 "$dir/$output"
}
for step in "$@"; do
  name=${step%%:*}; arg=${step#*:}; [ "$arg" = "$step" ] && arg=""
  dir="reports/evidence/$DAY-$name"
  case "$name" in
    selfcheck) run "$dir" python3 -m liger_perf selfcheck --device cuda ${arg:+--kernel "$arg"} ;;
    gate-evidence) run "$dir" python3 scripts/gate_evidence.py "$dir/dw.json" ;;
    check-best)  # the H200 history's best through the full gate on another GPU (a selfcheck there has no best)
      if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then log "skipped on an H200: selfcheck gates the best"; continue; fi
      best=$(h200_best)
      run "$dir" python3 -m liger_perf check fused_add_rms_norm --device cuda --variant "$best" ;;
    inductor-probe)  # torch.compile's generated backward beside the best's at SHAPES (ROWSxCOLS:DTYPE+...)
      best=$(h200_best)
      run "$dir" python3 scripts/inductor_probe.py "$dir" "$best" "${arg//+/,}" ${PROBE_ARGS:-} ;;
    norm-bound)
      best=$(h200_best)
      run "$dir" python3 scripts/norm_bound_evidence.py "$dir/norm-bound.json" --seconds "${arg:-40}" \
        "$best" kernels/fused_add_rms_norm/baseline.py ;;
    broken)
      python3 tests/broken_variants.py /tmp/broken > /dev/null
      for b in ${arg//,/ }; do
        run "$dir/$b" python3 -m liger_perf check fused_add_rms_norm --device cuda --no-convergence \
          --variant "/tmp/broken/fused_add_rms_norm/$b.py"
      done ;;
    gate-cost-old)
      run "$dir" env PYTHONPATH="/tmp/site:$PWD/$arg" TRITON_CACHE_DIR=/tmp/triton-old \
        python3 -m liger_perf check fused_add_rms_norm --device cuda ;;
    main-job)
      rm -rf /tmp/fresh-workspace && python3 -m liger_perf init /tmp/fresh-workspace > /dev/null
      run "$dir" bash -c "cd /tmp/fresh-workspace && python3 -m liger_perf optimize fused_add_rms_norm \
        --target backward --max-minutes ${arg:-4}"
      mkdir -p "$dir/notebooks" && cp -r /tmp/fresh-workspace/notebooks/. "$dir/notebooks/" ;;
    loop)
      IFS=, read -r kernel target minutes suite budget reps buckets <<< "$arg"
      if [ "$minutes" = auto ]; then
        minutes=$(python3 -c "import sys; print(max(0.1, (int(sys.argv[1]) - int(sys.argv[2])) / 60))" \
          "$(left)" "${MARGIN_S:-90}")
      fi
      # A log per call (the loop resumes across calls into one folder; log.txt would overwrite the last one's).
      RUN_LOG="log-$(date +%H%M%S).txt" run "$dir-$kernel" python3 -m liger_perf optimize "$kernel" \
        --target "$target" --device cuda --max-minutes "$minutes" ${suite:+--suite "$suite"} ${budget:+--budget "$budget"} \
        ${reps:+--repetitions "$reps"} ${buckets:+--buckets "${buckets//+/,}"} ${LOOP_ARGS:-} ;;
    aa) dir=${AA_ROOT:-"$dir-$LIGER_PERF_GIT_COMMIT"}  # one root per commit: calls at the same commit resume it
      run "$dir" python3 scripts/aa_trials.py fused_add_rms_norm --trials "${arg:-20}" --root "$dir" \
          --deadline-s "$(( $(left) > 111 ? $(left) - 110 : 1 ))" ;;  # 0 would mean no deadline
    nightly)
      run "$dir/first" python3 -m liger_perf nightly --config scripts/nightly-h200.yaml
      run "$dir/second" python3 -m liger_perf nightly --config scripts/nightly-h200.yaml ;;
    security) run "$dir" python3 scripts/security_probe.py "$dir" ;;
    hmm-probe) run "$dir" python3 scripts/hmm_probe.py "$dir" ;;  # can a compiled kernel read host memory here?
    e2e) run "$dir-${arg:-llama}" python3 -m liger_perf e2e --model "${arg:-llama}" --device cuda ;;
    dispatch-check)  # the gate of the baseline with entries in three buckets, each taking another algorithm
      mkdir -p "$dir" && python3 scripts/with_knobs.py fused_add_rms_norm "bwd_column_chunked@32768x4=rows_outer,\
BLOCK_SIZE@32768x4=4096,bwd_rows_per_program@32768x4=16,bwd_tile_elements@1024x2=4096,\
bwd_fused_dw_max_cols@1024x2=1024,num_warps@8192x2=8" > "$dir/dispatched.py"
      run "$dir" python3 -m liger_perf check fused_add_rms_norm --device cuda --no-convergence \
        --variant "$dir/dispatched.py" ;;
    knob-check)
      mkdir -p "$dir" && python3 scripts/with_knobs.py fused_add_rms_norm "$arg" > "$dir/knobs.py"
      run "$dir" python3 -m liger_perf check fused_add_rms_norm --device cuda --no-convergence --variant "$dir/knobs.py" ;;
    trial-models)  # one trial of the baseline on the tuning split, in a scratch history under the step's folder
      IFS=, read -r kernel reps <<< "$arg"
      LIGER_PERF_NOTEBOOKS="$dir-$kernel/notebooks" run "$dir-$kernel" python3 -m liger_perf trial "$kernel" \
        --suite models-tune --device cuda --repetitions "${reps:-20}" --timeout "$(( $(left) > 60 ? $(left) - 30 : 30 ))" ;;
    ab-models)  # K's baseline with one knob changed, trialled against the baseline on the tuning split, backward
      IFS=, read -r kernel knob value reps <<< "$arg"
      mkdir -p "$dir-$kernel" && python3 scripts/with_knobs.py "$kernel" "$knob=$value" > "$dir-$kernel/$knob-$value.py"
      LIGER_PERF_NOTEBOOKS="$dir-$kernel/notebooks" run "$dir-$kernel" python3 -m liger_perf trial "$kernel" \
        --variant "$dir-$kernel/$knob-$value.py" --against "kernels/$kernel/baseline.py" --name "$knob-$value" \
        --suite models-tune --passes backward --no-ncu --device cuda --repetitions "${reps:-10}" \
        --timeout "$(( $(left) > 60 ? $(left) - 30 : 30 ))" ;;
    ab-time)  # variants side by side with liger-kernel on the tuning split, backward, no gate (a diagnosis)
      IFS=, read -r kernel reps variants <<< "$arg"
      out="reports/evidence/$DAY-${AB_NAME:-ab-time-$kernel}"
      mkdir -p "$out"
      run "$out" python3 scripts/ab_time.py "$kernel" "$out/ab.json" --repetitions "${reps:-10}" \
        --max-columns "${AB_MAX_COLUMNS:-0}" --min-columns "${AB_MIN_COLUMNS:-0}" $(tr ',' '\n' <<< "$variants" | sed 's/^/--variant /') ;;
    draw-cost)  # what drawing the tuning split's inputs costs on the CPU (as before device-draws) and on the device
      run "$dir" python3 scripts/draw_cost.py "${arg:-fused_add_rms_norm}" "$dir/draw-cost-$(date +%H%M%S).json" --device cuda ;;
    bench-models)
      IFS=, read -r kernel reps compiled seconds <<< "$arg"
      limit=$(( $(left) > 60 ? $(left) - 30 : 30 )); [ -n "$seconds" ] && [ "$seconds" -lt "$limit" ] && limit=$seconds
      variant=${BENCH_VARIANT:-}; [ "$variant" = h200-best ] && variant=$(h200_best)
      run "$dir-$kernel" python3 -m liger_perf bench "$kernel" --suite models --device cuda \
        --repetitions "${reps:-20}" ${compiled:+"--$compiled"} --timeout "$limit" ${BENCH_SHAPES:+--shapes "$BENCH_SHAPES"} \
        ${variant:+--variant "$variant"} ;;
    *) log "unknown step $step" ;;
  esac
done
log "all steps done"
find reports notebooks -type f -newer "$MARK" ! -name '*.ncu-rep' ! -path '*/artifacts/*' -print0 \
  | tar czf "$OUT/device.tgz" --null -T -
ls -la "$OUT"
