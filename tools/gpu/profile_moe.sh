#!/usr/bin/env bash
# tools/gpu/profile_moe.sh: Nsight Compute on one backend's kernels inside `fp4moe bench moe` (CUDA-graph
# replays, clocks not locked: --clock-control none) + the SASS of its kernel library, for docs/perf.
# Usage (GPU machine): tools/gpu/profile_moe.sh BUILD_DIR BACKEND_ID KERNEL_REGEX PRESET TOKENS...
# Writes $OUT/ncu-<preset>-T<tokens>.txt (duration, DRAM bytes, stall reasons per issued instruction,
# pipe utilization) and $OUT/sass-<regex>.txt (cuobjdump of the matching kernels, instruction counts).
set -uo pipefail
build=$1 backend=$2 regex=$3 preset=$4
shift 4
out=${OUT:-/tmp/profile-out}
mkdir -p "$out"
metrics=$(tr -d '\n' < "$(dirname "$0")/ncu_metrics.txt")
for tokens in "$@"; do
  timeout 150 ncu --clock-control none -k "regex:$regex" --launch-skip 40 --launch-count 2 \
    --section SpeedOfLight --section Occupancy --metrics "$metrics" \
    "$build/tools/fp4moe" bench moe --preset "$preset" --tokens "$tokens" --backend "$backend" --no-baseline \
    --weight-sets 2 --repeats 3 > "$out/ncu-$preset-T$tokens.txt" 2>&1
done
lib=$(find "$build/src/kernels" -name '*.a' | head -5)
for a in $lib; do cuobjdump -sass "$a" 2>/dev/null; done | awk -v re="$regex" '
  /Function :/ { keep = ($0 ~ re) } keep' > "$out/sass-kernels.txt"
grep -E "Function :" "$out/sass-kernels.txt" | head
# Static instruction mix per kernel (opcode without modifiers; a leading @predicate is skipped).
awk '/Function :/ {name=$3} /^ +\/\*[0-9a-f]+\*\// {o = ($2 ~ /^@/) ? $3 : $2; split(o, op, "."); count[name" "op[1]]++}
     END {for (k in count) print count[k], k}' "$out/sass-kernels.txt" | sort -k2,2 -k1,1nr > "$out/sass-mix.txt"
