#!/usr/bin/env bash
# tools/gpu/stage_times.sh: where one MoE layer's time goes, kernel by kernel, inside `fp4moe bench moe`
# (CUDA-graph replays), under Nsight Compute with clocks unlocked. Two passes: caches flushed before
# every kernel (ncu's default: the cold-start cost, which inflates small kernels: a one-token route
# kernel measured 14 us so) and caches left as the replays leave them (--cache-control none: closer to
# what a kernel costs in the replay). Prints one table per pass: kernel (grid), median microseconds over
# the profiled layers, share of the layer.
# Usage (GPU machine): tools/gpu/stage_times.sh BUILD_DIR PRESET TOKENS BACKEND_ID [LAYERS (default 3)]
# Environment: OUT; STAGE_KERNELS (ncu kernel-name regex of the stages; the default covers every backend).
# Writes $OUT/stage-times-<preset>-T<tokens>.txt and the raw CSVs.
set -uo pipefail
[ $# -ge 4 ] || { echo "usage: $0 BUILD_DIR PRESET TOKENS BACKEND_ID [LAYERS]" >&2; exit 2; }
build=$1 preset=$2 tokens=$3 backend=$4 layers=${5:-3}
out=${OUT:-/tmp/stage-out}
mkdir -p "$out"
report="$out/stage-times-$preset-T$tokens.txt"
: > "$report"
for cache in all none; do
  csv="$out/stage-times-$preset-T$tokens-cache-$cache.csv"
  # Only the MoE stages' kernels (not the ceilings' copies and GEMMs) are counted; the first four
  # layers' worth (warm-up) are skipped, then `layers` layers of up to 8 kernels each are profiled.
  timeout 300 ncu --csv --clock-control none --cache-control "$cache" --metrics gpu__time_duration.sum \
    -k "regex:${STAGE_KERNELS:-route_kernel|align|gather_kernel|grouped_gemm_kernel|combine_kernel|fused_gemm|sm90_regw|sm90_grouped|swiglu_kernel}" \
    --launch-skip 32 --launch-count $((8 * layers)) \
    "$build/tools/fp4moe" bench moe --preset "$preset" --tokens "$tokens" --backend "$backend" --no-baseline \
    --weight-sets 2 --repeats 20 > "$csv" 2> "$csv.log"
  python3 - "$csv" "$cache" "$backend" >> "$report" <<'EOF'
import csv, statistics, sys
path, cache, backend = sys.argv[1:4]
rows = [r for r in csv.reader(line for line in open(path) if line.startswith('"'))]
if not rows:
    print(f"cache-control {cache}: no kernels profiled (see {path}.log)")
    sys.exit(0)
head = rows[0]
col = {name: i for i, name in enumerate(head)}
missing = [c for c in ("Kernel Name", "Metric Name", "Metric Unit", "Metric Value") if c not in col]
if missing:
    print(f"cache-control {cache}: this ncu's CSV lacks columns {missing}; header: {head}")
    sys.exit(0)
times, order = {}, []
for r in rows[1:]:
    if r[col["Metric Name"]] != "gpu__time_duration.sum":
        continue
    kernel = r[col["Kernel Name"]].replace("(anonymous namespace)::", "").replace("<unnamed>::", "").removeprefix("void ")
    grid = r[col["Grid Size"]] if "Grid Size" in col else ""
    name = kernel.split("(")[0].split("::")[-1][:48] + " " + grid
    value = float(r[col["Metric Value"]].replace(",", ""))
    unit = r[col["Metric Unit"]]
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(unit)
    if scale is None:
        sys.exit(f"cache-control {cache}: unknown time unit {unit!r} in {path}")
    if name not in times:
        order.append(name)
    times.setdefault(name, []).append(value * scale)
medians = {k: statistics.median(v) for k, v in times.items()}
total = sum(medians.values())
print(f"{backend}, cache-control {cache}: {len(rows) - 1} profiled launches")
for k in order:
    print(f"  {k:64} {medians[k]:10.2f} us {100 * medians[k] / total:5.1f} %  (n={len(times[k])})")
print(f"  {'sum of the medians':64} {total:10.2f} us")
EOF
done
cat "$report"
