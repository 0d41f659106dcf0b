# shellcheck shell=bash
# Sourced by tools/gpu/ab.sh and tools/gpu/timeline.sh (from the repository root on the device machine):
# a copy of this tree with a patch applied, and an sm_90a build of a source folder. Why a copy: the
# machine's .git is a snapshot from the start of the session and copied files keep their modification
# times, so tracked files are never edited there (docs/perf/README.md).

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
