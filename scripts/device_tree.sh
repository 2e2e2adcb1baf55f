#!/usr/bin/env bash
# Ready this checkout for a call of scripts/device.sh, and put it back after: the device tool sends the working
# tree (tracked files, untracked ones git does not ignore, and what the call carries) and takes at most 64 MiB.
#
#   bash scripts/device_tree.sh out [FOLDER ...]   # before a call; default folders: reports tests
#   bash scripts/device_tree.sh back               # after it, before unpacking device.tgz
#
# out: moves the folders (by default reports/ and tests/; name them all to choose, e.g. `out reports tests
# notebooks/nvidia-h200/relu_squared` for a call on the fused kernel alone) to ../device-aside-<this checkout's
# folder name>/, writes .device-commit (HEAD's hash, and "dirty" when a file that travels differs from it), and
# prints what the call will carry against the limit, with the wheel folders and .deb beside it. The loop, the
# selfcheck, bench and the probes need neither folder. Steps that do: `broken` and `gate-evidence` import from
# tests/ (keep it: `out reports`); `aa` resumes from reports/evidence/<date>-aa-COMMIT/ (keep reports/: `out
# tests`). device.sh refuses to run when .device-commit names another commit than its COMMIT
# argument: every record a call writes (selfcheck.json above all) is labelled with that argument, and a
# mislabelled record was committed once (2026-12-04: "8a2a0d0", a typo for 8b8a39e).
set -euo pipefail
top=$(git rev-parse --show-toplevel)
cd "$top"
aside="../device-aside-$(basename "$top")"  # one per checkout: another checkout's `back` never takes this one's
case "${1:-}" in
  out)
    shift
    [ -e "$aside" ] && { echo "device_tree.sh: $aside exists: put it back first (device_tree.sh back)"; exit 2; }
    mkdir -p "$aside"
    echo "$top" > "$aside/.from"
    [ $# -gt 0 ] || set -- reports tests
    for folder in "$@"; do
      [ -e "$folder" ] || { echo "device_tree.sh: no $folder here"; continue; }
      mkdir -p "$aside/$(dirname "$folder")" && mv "$folder" "$aside/$folder" && echo "$folder" >> "$aside/.moved"
    done
    # What travels and differs from HEAD: changed or untracked files outside the folders put aside (which read
    # as deleted).
    excludes=()
    while read -r folder; do excludes+=(":(exclude)$folder"); done < "$aside/.moved"
    state=clean
    [ -n "$(git status --porcelain -- . "${excludes[@]}")" ] && state=dirty
    echo "$(git rev-parse --short HEAD) $state" > .device-commit
    bytes=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | while IFS= read -r -d '' f; do
      [ -f "$f" ] && stat -c %s "$f"; done | awk '{s += $1} END {print s + 0}')
    echo "tree: $(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1e6}') MB ($(cat .device-commit))"
    for carried in .whl .whle .whlm .whls .whlt .deb; do
      [ -d "$carried" ] && echo "  + $carried $(du -sb "$carried" | awk '{printf "%.1f", $1 / 1e6}') MB"
    done
    echo "the device tool carries at most 67.1 MB (64 MiB): the tree and what the call's carry names"
    ;;
  back)
    [ -f "$aside/.moved" ] || { echo "device_tree.sh: nothing was put aside ($aside/.moved is missing)"; exit 2; }
    [ "$(cat "$aside/.from" 2>/dev/null)" = "$top" ] || {
      echo "device_tree.sh: $aside was put aside from $(cat "$aside/.from" 2>/dev/null || echo 'elsewhere'), not $top"; exit 2; }
    while read -r folder; do
      [ -e "$folder" ] && { echo "device_tree.sh: $folder is here again: $aside/$folder left as it is"; continue; }
      mkdir -p "$(dirname "$folder")" && mv "$aside/$folder" "$folder"
    done < "$aside/.moved"
    rm -f "$aside/.moved" "$aside/.from" .device-commit
    find "$aside" -depth -type d -empty -delete
    [ -e "$aside" ] && echo "device_tree.sh: $aside still holds something: look before deleting it"
    git status --short | head -5
    ;;
  *)
    echo "usage: bash scripts/device_tree.sh out [FOLDER ...] | back"; exit 2 ;;
esac
