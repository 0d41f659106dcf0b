#!/usr/bin/env bash
# tools/gpu/ab.sh: A/B timing of a change in ONE device call. The spread between processes (and machines)
# is 2-6 %, so a change is only measured against the tree without it, built and timed in the same call,
# with the runs interleaved (A B A B ...).
#   A = this tree as copied to the machine; B = A with PATCH applied (`git diff main BRANCH > x.tmp.patch`
#   here; the file travels because it is untracked and not ignored).
# Why not git on the machine: its .git is a snapshot from when the session began, so `git checkout` or
# `git show HEAD:` there yield old files; and copied files keep their modification times, so a file
# rewritten there and later copied back older is not rebuilt. Each side therefore gets its own source copy
# and build folder, and B's copy is made fresh from A's files every call (its build folder keeps its
# objects: ninja sees B's patched files as new).
# Usage, from the repository root on the device machine:
#   tools/gpu/ab.sh PATCH "PRESET:TOKENS[:BACKEND[:ACTIVATION]]" ... e.g.
#   tools/gpu/ab.sh regw.tmp.patch qwen3-235b-a22b:4096,16384:cuda.sm90.prefill.v1 qwen3.5-397b-a17b:1,4096:cuda.sm80.pipeline.v1
#   A spec with an ACTIVATION (W4A16 or W4A4) runs `--activation` and is labelled PRESET-ACTIVATION.
# Environment: OUT (logs and JSON), AB_ROUNDS (default 2: A B A B), AB_TESTS (a ctest -R regex run on
# both sides first, e.g. "CudaSm90|Backends"), AB_TARGETS (ninja targets; default fp4moe + the test
# binaries). Prints the medians per (preset, T) over the rounds and the B/A time ratios; OUT gets ab.json
# (those medians, every round's time, every run's report), runs.tar.gz (the runs' JSONs and logs) and the
# build, test and patch logs: 7 files, within the 8 a device call returns.
# Budget (H200, 2026-11-30): both builds 50 s; AB_TESTS="CudaSm90|Backends|Nvfp4" 133 + 184 s; a 397b bench
# ~25 s and a 235b one ~12 s per side and round. Wrap the call in `timeout` below the device limit.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
[ $# -ge 2 ] || { echo "usage: $0 PATCH PRESET:TOKENS[:BACKEND[:ACTIVATION]]..." >&2; exit 2; }
patch_file=$(realpath "$1")
shift
[ -f "$patch_file" ] || { echo "ab.sh: no patch file $patch_file" >&2; exit 2; }
source tools/gpu/lib.sh
unique_labels ab.sh "$@" || exit 2
[ -f .deps/unpack.sh ] && source .deps/unpack.sh
out=${OUT:-$PWD/ab-out}
mkdir -p "$out"
rounds=${AB_ROUNDS:-2}
targets=${AB_TARGETS:-fp4moe test_cuda_moe_kernels test_cuda_sm90_prefill test_cuda_weight_layout}
source tools/gpu/cublas_path.sh

# B's sources: A's files (tracked and untracked, no build folders) with the patch applied.
src_b=/tmp/fp4moe-ab-b
patched_copy "$patch_file" "$src_b" "$out/patch.log" \
  || { echo "ab.sh: the patch does not apply:"; cat "$out/patch.log"; exit 3; }

build_side() {  # $1 = side, $2 = source folder
  # shellcheck disable=SC2086
  build_90a "$2" "$PWD/build-ab-$1" "ab-$1" $targets > "$out/build-$1.log" 2>&1 \
    || { echo "ab.sh: side $1 does not build:"; tail -30 "$out/build-$1.log"; exit 4; }
}
t0=$(date +%s)
build_side a "$PWD"
build_side b "$src_b"
echo "built both sides in $(( $(date +%s) - t0 )) s"

if [ -n "${AB_TESTS:-}" ]; then
  for side in a b; do
    (cd build-ab-$side && timeout 900 ctest -R "$AB_TESTS" --output-on-failure) > "$out/tests-$side.log" 2>&1
    echo "tests side $side: rc=$? $(grep -E 'tests passed|tests failed' "$out/tests-$side.log" | tail -1)"
  done
fi

for round in $(seq 1 "$rounds"); do
  for side in a b; do
    for spec in "$@"; do
      run="$out/$side-r$round-$(spec_label "$spec")"
      run_bench "build-ab-$side/tools/fp4moe" "$spec" "$run.json" "$run.log" \
        || { echo "ab.sh: bench failed (side $side, $spec):"; tail -5 "$run.log"; }
    done
  done
done

# Summary: per backend, preset and T, the median over rounds of each side and the ratio B/A.
python3 - "$out" "$rounds" "$@" <<'EOF'
import json, os, statistics, sys
out, rounds, specs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
times = {}  # (side, preset, backend, T) -> [us]
runs = {}  # every run's report, for ab.json
for side in "ab":
    for r in range(1, rounds + 1):
        for spec in specs:
            fields = spec.split(":")
            preset = fields[0] + (f"-{fields[3]}" if len(fields) > 3 and fields[3] else "")
            path = os.path.join(out, f"{side}-r{r}-{preset}.json")
            if not os.path.exists(path):
                continue
            report = json.load(open(path))
            runs[f"{side}-r{r}-{preset}"] = report
            for backend in report["backends"]:
                for point in backend.get("points", []):
                    key = (side, preset, backend["id"], point["tokens"])
                    times.setdefault(key, []).append(point["us_median"])
print(f"{'preset':22} {'backend':28} {'T':>6} {'A us':>10} {'B us':>10} {'B/A':>7}")
medians = []
for (side, preset, backend, t) in sorted(k for k in times if k[0] == "a"):
    a = statistics.median(times[("a", preset, backend, t)])
    b_runs = times.get(("b", preset, backend, t))
    b = statistics.median(b_runs) if b_runs else float("nan")
    print(f"{preset:22} {backend:28} {t:>6} {a:>10.1f} {b:>10.1f} {b / a:>7.3f}")
    medians.append({"preset": preset, "backend": backend, "tokens": t, "a_us": times[("a", preset, backend, t)],
                    "b_us": b_runs or [], "a_median_us": a, "b_median_us": b if b_runs else None})
json.dump({"rounds": rounds, "specs": specs, "medians": medians, "runs": runs},
          open(os.path.join(out, "ab.json"), "w"), indent=1)
EOF
# At most 8 files come back from a device call: every run's JSON is in ab.json, the run logs go into one
# archive (the builds', tests' and patch logs stay beside them).
(cd "$out" && ls ./*-r[0-9]*-*.json > /dev/null 2>&1 \
  && tar -czf runs.tar.gz ./*-r[0-9]*-*.json ./*-r[0-9]*-*.log && rm -f ./*-r[0-9]*-*.json ./*-r[0-9]*-*.log)
