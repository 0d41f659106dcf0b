# shellcheck shell=bash
# Sourced by tools/gpu/ab.sh, sweep.sh and timeline.sh (from the repository root on the device machine):
# a copy of this tree with a patch applied, an sm_90a build of a source folder, and one benchmark run of
# a spec. Why a copy: the machine's .git is a snapshot from the start of the session and copied files keep
# their modification times, so tracked files are never edited there (docs/perf/README.md).

# patched_copy PATCH DEST LOG: DEST = this tree's files (tracked and untracked; no build folders, .git or
# the scripts' output and copies) with PATCH applied; patch's output goes to LOG. Fails if it does not apply.
patched_copy() {
  rm -rf "$2" && mkdir -p "$2"
  tar --exclude='./build*' --exclude='./.git' --exclude='./ab-out' --exclude='./tl-*' --exclude='./sweep-out' -cf - . | tar -xf - -C "$2"
  (cd "$2" && patch -p1 --quiet < "$1") > "$3" 2>&1
}

# build_90a SOURCE BUILD COMMIT TARGETS...: configures BUILD for sm_90a once (Release, CUDA on), then
# builds TARGETS with ninja; COMMIT is what `fp4moe info` reports as the built commit.
build_90a() {
  local source=$1 build=$2 commit=$3
  shift 3
  [ -f "$build/build.ninja" ] || cmake -S "$source" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4MOE_CUDA=ON \
    -DFP4MOE_CUDA_ARCHS=90a -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
    -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 || return 1
  FP4MOE_GIT_COMMIT="$commit" ninja -C "$build" -j "$(nproc)" "$@"
}

# spec_label SPEC: the label of a PRESET:TOKENS[:BACKEND[:ACTIVATION]] spec, PRESET or PRESET-ACTIVATION:
# the <preset> part of the <side>-r<round>-<preset>.json names that bench/record_table.py reads.
spec_label() {
  local preset tokens backend activation
  IFS=: read -r preset tokens backend activation <<< "$1"
  echo "$preset${activation:+-$activation}"
}

# unique_labels SCRIPT SPEC...: fails (naming SCRIPT) when two specs share a label: their runs' JSONs
# would overwrite each other's. Put their token counts in one spec, or (two backends of one preset with
# different token counts) give one spec an explicit activation: PRESET:TOKENS:BACKEND:W4A16 is labelled
# PRESET-W4A16.
unique_labels() {
  local script=$1 dup
  shift
  dup=$(for spec in "$@"; do spec_label "$spec"; done | sort | uniq -d | head -1)
  [ -z "$dup" ] || { echo "$script: two specs share the label $dup (their JSONs would collide); merge their token lists, or label one apart with an explicit :W4A16 (PRESET:TOKENS:BACKEND:W4A16)" >&2; return 1; }
}

# run_bench FP4MOE SPEC JSON LOG [VAR=VALUE...]: `FP4MOE bench moe` of one PRESET:TOKENS[:BACKEND[:ACTIVATION]]
# spec (no baseline; 300 s at most) with those environment settings, its report to JSON, its output to LOG.
run_bench() {
  local binary=$1 spec=$2 json=$3 log=$4 preset tokens backend activation
  shift 4
  IFS=: read -r preset tokens backend activation <<< "$spec"
  local args=(bench moe --preset "$preset" --tokens "$tokens" --no-baseline --json "$json")
  [ -n "$backend" ] && args+=(--backend "$backend")
  [ -n "$activation" ] && args+=(--activation "$activation")
  env "$@" timeout 300 "$binary" "${args[@]}" > "$log" 2>&1
}
