#!/usr/bin/env bash
# tools/gpu/sweep.sh: one build, several environment settings ("sides"), timed interleaved in ONE device
# call. For knobbed diagnostic patches (e.g. docs/perf/2026-12-02-h200-r27-delay-prefetch-diag.patch: a delay at a
# chosen point of the fused decode) where every side must run the same binary, so that only the knob
# differs. The build is this tree with PATCH applied, in its own copy and build folder
# (tools/gpu/lib.sh, as ab.sh does; the tree itself stays unpatched). PATCH "-" builds the tree.
# Usage, from the repository root on the device machine:
#   tools/gpu/sweep.sh PATCH SIDE=ENV... -- PRESET:TOKENS[:BACKEND[:ACTIVATION]]...
#   SIDE: a name ([A-Za-z0-9_]+; the table's ratios are to the side first in name order: name the
#   baseline so that it sorts first); ENV: comma-separated
#   VAR=VALUE settings, or "-" for none, e.g.
#   tools/gpu/sweep.sh docs/perf/2026-12-02-h200-r27-delay-prefetch-diag.patch r0=FP4MOE_FD_DIAG_DELAY=1:0 \
#     r1000=FP4MOE_FD_DIAG_DELAY=1:1000 -- qwen3.5-397b-a17b:1,8:cuda.sm80.fused_decode.v1
# Environment: OUT (default ./sweep-out), SWEEP_ROUNDS (default 2: every side once per round, in order).
# OUT gets sweep.json (every run's report: bench/record_table.py --combine), runs.tar.gz (their logs) and
# build.log; the table (bench/record_table.py --sides) prints last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
usage() { echo "usage: $0 PATCH|- SIDE=ENV... -- PRESET:TOKENS[:BACKEND[:ACTIVATION]]..." >&2; exit 2; }
[ $# -ge 4 ] || usage
patch_arg=$1
shift
sides=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do sides+=("$1"); shift; done
[ $# -gt 0 ] || usage
shift  # the "--"
[ ${#sides[@]} -ge 1 ] && [ $# -ge 1 ] || usage
for side in "${sides[@]}"; do
  [[ ${side%%=*} =~ ^[A-Za-z0-9_]+$ ]] && [[ $side == *=* ]] || { echo "sweep.sh: bad side '$side' (NAME=ENV)" >&2; exit 2; }
done
for spec in "$@"; do
  [[ $spec =~ ^[a-z0-9.-]+:[0-9,]+(:[A-Za-z0-9._]*)?(:W4A(16|4))?$ ]] || { echo "sweep.sh: bad spec '$spec'" >&2; exit 2; }
done
source tools/gpu/lib.sh
unique_labels sweep.sh "$@" || exit 2
[ -f .deps/unpack.sh ] && source .deps/unpack.sh
source tools/gpu/cublas_path.sh
out=${OUT:-$PWD/sweep-out}
mkdir -p "$out"
rounds=${SWEEP_ROUNDS:-2}

src=$PWD
if [ "$patch_arg" != "-" ]; then
  patch_file=$(realpath "$patch_arg")
  [ -f "$patch_file" ] || { echo "sweep.sh: no patch file $patch_arg" >&2; exit 2; }
  src=/tmp/fp4moe-sweep-src
  patched_copy "$patch_file" "$src" "$out/build.log" \
    || { echo "sweep.sh: the patch does not apply:"; cat "$out/build.log"; exit 3; }
fi
t0=$(date +%s)
build_90a "$src" "$PWD/build-sweep" sweep fp4moe >> "$out/build.log" 2>&1 \
  || { echo "sweep.sh: does not build:"; tail -30 "$out/build.log"; exit 4; }
echo "built in $(( $(date +%s) - t0 )) s"

runs=$(mktemp -d)
for round in $(seq 1 "$rounds"); do
  for side in "${sides[@]}"; do
    name=${side%%=*}
    env_list=${side#*=}
    settings=()
    [ "$env_list" = "-" ] || IFS=, read -r -a settings <<< "$env_list"
    for spec in "$@"; do
      run="$runs/$name-r$round-$(spec_label "$spec")"
      run_bench build-sweep/tools/fp4moe "$spec" "$run.json" "$run.log" ${settings[@]+"${settings[@]}"} \
        || { echo "sweep.sh: bench failed (side $name, $spec):"; tail -5 "$run.log"; }
    done
  done
done
python3 bench/record_table.py --combine "sweep.sh $patch_arg ${sides[*]} -- $*" "$runs" > "$out/sweep.json" \
  || { echo "sweep.sh: no reports to combine"; exit 5; }
(cd "$runs" && tar -czf "$out/runs.tar.gz" ./*.log)
rm -rf "$runs"
python3 bench/record_table.py --sides "$out/sweep.json"
