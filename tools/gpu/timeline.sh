#!/usr/bin/env bash
# tools/gpu/timeline.sh: per-CTA launch timelines of the fused decode in ONE device call. A diagnostic
# patch (e.g. docs/perf/2026-12-02-h200-r26-timeline.patch) adds globaltimer stamps and a dump that
# `fp4moe bench moe` writes when FP4MOE_FD_TIMELINE=FILE is set; this script builds this tree with the
# patch applied in its own source copy and build folder (tools/gpu/lib.sh, as ab.sh does; the
# tree itself stays unpatched), runs each spec and summarizes the stamps with the patch's summarizer.
# Usage, from the repository root on the device machine:
#   tools/gpu/timeline.sh PATCH SUMMARIZER.py "LABEL:ENV:PRESET:TOKENS[:ACTIVATION]" ...
#   ENV: comma-separated VAR=VALUE settings for that run, or "-" for none, e.g.
#   tools/gpu/timeline.sh docs/perf/2026-12-02-h200-r26-timeline.patch docs/perf/2026-12-02-h200-r26-timeline.py \
#     late:FP4MOE_FD_DIAG_EARLY=0:qwen3.5-397b-a17b:1 early:FP4MOE_FD_DIAG_EARLY=1:qwen3.5-397b-a17b:1
# Each run is lib.sh's run_bench (300 s at most). OUT (default ./tl-out) gets timeline-LABEL.txt (the
# summaries), stamps.tar.gz (the raw stamp files, each run's report and log) and build.log. A stamped
# build runs slower than the plain one: compare its specs with each other only.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
[ $# -ge 3 ] || { echo "usage: $0 PATCH SUMMARIZER.py LABEL:ENV:PRESET:TOKENS[:ACTIVATION]..." >&2; exit 2; }
patch_file=$(realpath "$1")
summarizer=$(realpath "$2")
shift 2
[ -f "$patch_file" ] && [ -f "$summarizer" ] || { echo "timeline.sh: no file $patch_file or $summarizer" >&2; exit 2; }
[ -f .deps/unpack.sh ] && source .deps/unpack.sh
source tools/gpu/cublas_path.sh
source tools/gpu/lib.sh
out=${OUT:-$PWD/tl-out}
mkdir -p "$out"
src=/tmp/fp4moe-tl-src
patched_copy "$patch_file" "$src" "$out/build.log" \
  || { echo "timeline.sh: the patch does not apply:"; cat "$out/build.log"; exit 3; }
build=$PWD/build-tl
build_90a "$src" "$build" timeline fp4moe >> "$out/build.log" 2>&1 \
  || { echo "timeline.sh: does not build:"; tail -30 "$out/build.log"; exit 4; }
mkdir -p "$out/stamps"
for spec in "$@"; do
  IFS=: read -r label env preset tokens activation <<< "$spec"
  [ -n "$label" ] && [ -n "$preset" ] && [ -n "$tokens" ] || { echo "timeline.sh: bad spec $spec" >&2; exit 2; }
  stamps="$out/stamps/$label.txt"
  rm -f "$stamps"
  settings=()
  [ "$env" = "-" ] || IFS=, read -r -a settings <<< "$env"
  run_bench "$build/tools/fp4moe" "$preset:$tokens:cuda.sm80.fused_decode.v1:${activation:-}" "$out/stamps/$label.json" \
    "$out/stamps/$label.log" ${settings[@]+"${settings[@]}"} FP4MOE_FD_TIMELINE="$stamps" \
    || { echo "timeline.sh: $label failed:"; tail -20 "$out/stamps/$label.log"; exit 5; }
  python3 "$summarizer" "$stamps" "$label ($env)" | tee "$out/timeline-$label.txt"
done
tar -czf "$out/stamps.tar.gz" -C "$out" stamps && rm -rf "$out/stamps"
