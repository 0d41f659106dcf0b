#!/usr/bin/env bash
# tools/gpu/check.sh: the whole GPU check in ONE device call (the device time is scarce):
#   configure (first time) + incremental build into build-gpu/ (ignored; sm_90a only, to keep it short:
#   the 80;90a;120a compile is checked where the sources are written), the GPU tests (ctest -L gpu),
#   compute-sanitizer memcheck + racecheck + synccheck on the tiny cases, and `fp4moe bench moe` when the
#   binary has it. Logs and JSON go to $OUT (at most 8 files come back); a summary table prints last.
# Usage, from the repository root on the device machine:  tools/gpu/check.sh
# Environment: OUT (output folder; default ./gpu-check-out), FP4MOE_GPU_ARCHS (default 90a),
#   FP4MOE_GPU_TARGETS (ninja targets; default all), FP4MOE_GPU_CTEST_REGEX (ctest -R filter),
#   FP4MOE_GPU_BENCH_TOKENS (default 1,4,16,64,256,1024,4096), FP4MOE_GPU_BENCH_TIMEOUT (s, default 300),
#   FP4MOE_GPU_SKIP (words: tests sanitizer bench qualify hfnames), FP4MOE_GPU_QUALIFY_PRESET (default
#   qwen3.5-397b-a17b), FP4MOE_GPU_QUALIFY_MAX_TOKENS (default 1024).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
source .deps/unpack.sh
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
build="build-gpu"
archs=${FP4MOE_GPU_ARCHS:-90a}
skip=" ${FP4MOE_GPU_SKIP:-} "
jobs=$(nproc)
rows=()
record() { rows+=("$(printf '%-22s %-8s %6ss  %s' "$1" "$2" "$3" "$4")"); }
now() { date +%s; }

{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; } > "$out/device.txt" 2>&1

# 1. Configure + build. CMake < 3.27 lacks nvcc's C++20 flag; giving it keeps older CMakes working.
t=$(now)
{
  if [ ! -f "$build/build.ninja" ]; then
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4MOE_CUDA=ON -DFP4MOE_CUDA_ARCHS="$archs" \
      -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20
  fi
  # shellcheck disable=SC2086
  ninja -C "$build" -k 0 -j "$jobs" ${FP4MOE_GPU_TARGETS:-}
} > "$out/build.log" 2>&1
build_rc=$?
record build "$([ $build_rc = 0 ] && echo ok || echo FAILED)" $(( $(now) - t )) "archs=$archs log=build.log"

# 1b. SASS check of the sm_90a kernels: no instruction may write the A registers of an in-flight HGMMA
#     (ptxas once did so silently: tools/gpu/sass_hgmma_hazards.py).
sm90a_lib=$(find "$build/src/kernels" -name 'libfp4moe_kernels_sm90a.a' | head -1)
if [ -n "$sm90a_lib" ] && command -v cuobjdump > /dev/null; then
  t=$(now)
  cuobjdump -sass "$sm90a_lib" > "$out/sass-sm90a.txt" 2>&1
  python3 tools/gpu/sass_hgmma_hazards.py "$out/sass-sm90a.txt" > "$out/sass-hazards.txt" 2>&1
  rc=$?
  record "sass hgmma hazards" "$([ $rc = 0 ] && echo ok || echo FAILED)" $(( $(now) - t )) "$(tail -1 "$out/sass-hazards.txt")"
  rm -f "$out/sass-sm90a.txt"
fi

# 1b'. SASS check of the CUDA kernels (every architecture built): no memory descriptor in an odd uniform
#      register (ptxas 13.0 emitted such LDGSTS for cp.async with an L2 cache policy: illegal instruction
#      at run time; tools/gpu/sass_odd_descriptors.py). CI runs the same scan (ctest kernels_sass_odd_descriptors).
cuda_lib=$(find "$build/src/kernels" -name 'libfp4moe_kernels_cuda.a' | head -1)
if [ -n "$cuda_lib" ] && command -v cuobjdump > /dev/null; then
  t=$(now)
  python3 tools/gpu/sass_odd_descriptors.py --cuobjdump "$(command -v cuobjdump)" "$cuda_lib" > "$out/sass-descriptors.txt" 2>&1
  rc=$?
  record "sass odd descriptors" "$([ $rc = 0 ] && echo ok || echo FAILED)" $(( $(now) - t )) "$(tail -1 "$out/sass-descriptors.txt")"
fi

# 1c. Registers per thread of the fused decode's kernels (informational): launch 1 has a register budget
#     beside launch 2 (FusedDecodeRegisters.* judges it; docs/perf/2026-12-01-h200-r23.md), shown here so
#     that a change sees its count before any timing. gemm1<shape,F>, gemm2<shape,O,F>: O = 1 the one-tile
#     instance, F = 1 the table-free block scales.
if [ -n "$cuda_lib" ] && command -v cuobjdump > /dev/null; then
  t=$(now)
  regs=$(cuobjdump -res-usage "$cuda_lib" 2>/dev/null | awk '
    /Function .*fused_gemm[12]_kernelILi/ { match($0, /fused_gemm[12]_kernelILi[0-9]+E(Lb[01]E)*/); k = substr($0, RSTART + 6, RLENGTH - 6)
                                           gsub(/_kernelILi/, "<", k); gsub(/ELb/, ",", k); sub(/E$/, ">", k); next }
    k != "" && /REG:/ { match($0, /REG:[0-9]+/); printf "%s%s %s", sep, k, substr($0, RSTART + 4, RLENGTH - 4); sep = ", "; k = "" }')
  record "fused decode registers" ok $(( $(now) - t )) "${regs:-no fused decode kernels found}"
fi

# 2. GPU tests.
if [[ $skip != *" tests "* ]]; then
  t=$(now)
  regex=()
  [ -n "${FP4MOE_GPU_CTEST_REGEX:-}" ] && regex=(-R "$FP4MOE_GPU_CTEST_REGEX")
  (cd "$build" && ctest -L gpu "${regex[@]}" -V --timeout 600) > "$out/ctest-gpu.log" 2>&1
  rc=$?
  passed=$(grep -cE 'Test +#[0-9]+: .* Passed' "$out/ctest-gpu.log")
  failed=$(grep -cE 'Test +#[0-9]+: .*(\*\*\*Failed|\*\*\*Exception|\*\*\*Timeout|Not Run)' "$out/ctest-gpu.log")
  skipped=$(grep -cE 'Test +#[0-9]+: .*Skipped' "$out/ctest-gpu.log")
  record "ctest -L gpu" "$([ $rc = 0 ] && echo ok || echo FAILED)" $(( $(now) - t )) \
    "passed=$passed failed=$failed skipped=$skipped log=ctest-gpu.log"
  if grep -q "Syntax Error in cmake code" "$out/ctest-gpu.log"; then
    # ctest could not read a discovered-tests script: show it and run the backend tests directly.
    { echo "=== cmake $(cmake --version | head -1); discovered-tests scripts:"
      for f in "$build"/tests/kernels/cuda/*_tests.cmake; do echo "--- $f"; head -12 "$f" | cut -c1-400; done
      echo "=== direct run"; "$build/tests/kernels/cuda/test_cuda_moe_kernels"; } >> "$out/ctest-gpu.log" 2>&1
    rc=$?
    record "direct gtest run" "$([ $rc = 0 ] && echo ok || echo FAILED)" $(( $(now) - t )) "test_cuda_moe_kernels log=ctest-gpu.log"
  fi
fi
if [ "${FP4MOE_GPU_PERF:-0}" = 1 ] && [ -x "$build/tests/kernels/cuda/test_cuda_moe_perf" ]; then
  "$build/tests/kernels/cuda/test_cuda_moe_perf" 2>&1 | grep -E "timing|FAILED|Failure" | tee -a "$out/summary-perf.txt"
fi

# 3. compute-sanitizer on the tiny case (every kernel and tile configuration once).
kernels_test="$build/tests/kernels/cuda/test_cuda_moe_kernels"
if [[ $skip != *" sanitizer "* ]] && [ -x "$kernels_test" ]; then
  : > "$out/sanitizer.log"
  # synccheck: barriers reached by only part of a CTA or warp (first run 2026-11-30 r10; it then flagged the
  # W4A4 96-row tile's K loop, docs/perf/2026-11-30-h200-r10.md; fixed in r11).
  # The fused decode's launch-2 shape count, from the kernel's header (the loop below runs each shape).
  fd_shapes=$(grep -oP 'kFusedDecodeGemm2ShapeCount = \K[0-9]+' src/kernels/cuda/moe_fused_decode_sm80.h)
  for tool in memcheck racecheck synccheck; do
    t=$(now)
    filter='Backends/MoeBackendSuite.Tiny*:FusedDecodeW4A4.*'  # every CUDA backend's tiny cases, W4A4 blocks
    [ $tool = memcheck ] && filter="$filter:CudaMoeAlign.*:CudaMoeGather.*:CudaMoeCombine.*:CudaGroupedGemmTiles.*"
    # The tile tests run every sm80 GEMM configuration (the tiny cases pick only some, by rows per expert).
    [ $tool = synccheck ] && filter="$filter:CudaGroupedGemmTiles.*"
    # racecheck does not see the mbarrier complete_tx of raw-address cp.async.bulk copies as ordering
    # them before the consumers' ld.shared (a known false positive; descriptor TMA is not affected):
    # it flags every K block of the sm90 register-weight GEMM, whose weight codes arrive that way and
    # are read with LDS after the stage's full barrier. That kernel's ordering is covered instead by
    # memcheck, its 3-CTA vs full-grid bit identity and graph-replay tests, and the SASS scan above.
    [ $tool = racecheck ] && filter="$filter:CudaGroupedGemmTiles.*-*cuda_sm90*"
    echo "=== compute-sanitizer --tool $tool ($filter)" >> "$out/sanitizer.log"
    compute-sanitizer --tool $tool --error-exitcode 9 "$kernels_test" --gtest_filter="$filter" >> "$out/sanitizer.log" 2>&1
    rc=$?
    # The fused decode's tiny cases under each launch-2 CTA shape (FP4MOE_FD_GEMM2_SHAPE; the plan picks one
    # per chunk size, and the tiny H picks no 32-row one).
    for shape in $(seq 0 $(( ${fd_shapes:-0} - 1 ))); do
      echo "=== FP4MOE_FD_GEMM2_SHAPE=$shape compute-sanitizer --tool $tool (fused decode tiny cases)" >> "$out/sanitizer.log"
      FP4MOE_FD_GEMM2_SHAPE=$shape compute-sanitizer --tool $tool --error-exitcode 9 "$kernels_test" \
        --gtest_filter='Backends/MoeBackendSuite.Tiny*/cuda_sm80_fused_decode_v1' >> "$out/sanitizer.log" 2>&1
      shape_rc=$?
      [ $rc = 0 ] && rc=$shape_rc
    done
    # The synthetic weights' block scales are all positive normal, so the passes above take the table-free
    # scales wherever the plan allows; this one forces the shared-memory scale table in every launch.
    echo "=== FP4MOE_FD_TABLE_SCALES=1 compute-sanitizer --tool $tool (fused decode tiny cases)" >> "$out/sanitizer.log"
    FP4MOE_FD_TABLE_SCALES=1 compute-sanitizer --tool $tool --error-exitcode 9 "$kernels_test" \
      --gtest_filter='Backends/MoeBackendSuite.Tiny*/cuda_sm80_fused_decode_v1' >> "$out/sanitizer.log" 2>&1
    table_rc=$?
    [ $rc = 0 ] && rc=$table_rc
    summary_line=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer.log" | tail -1)
    record "sanitizer $tool" "$([ $rc = 0 ] && echo ok || echo FAILED)" $(( $(now) - t )) "${summary_line:-no summary} log=sanitizer.log"
  done
fi

# 4. Benchmark, when this build has it.
fp4moe="$build/tools/fp4moe"
if [[ $skip != *" bench "* ]] && [ -x "$fp4moe" ] && "$fp4moe" bench --help > /dev/null 2>&1; then
  t=$(now)
  timeout "${FP4MOE_GPU_BENCH_TIMEOUT:-300}" "$fp4moe" bench moe --preset qwen3.5-397b-a17b --tokens "${FP4MOE_GPU_BENCH_TOKENS:-1,4,16,64,256,1024,4096}" \
    --json "$out/bench.json" > "$out/bench.log" 2>&1
  rc=$?
  record "bench moe" "$([ $rc = 0 ] && echo ok || echo FAILED)" $(( $(now) - t )) "log=bench.log json=bench.json"
else
  record "bench moe" skipped 0 "no 'fp4moe bench' in this build (or skipped)"
fi

# 5. Qualification of every serving backend for a preset (the main job), with its table and plot.
if [[ $skip != *" qualify "* ]] && [ -x "$fp4moe" ]; then
  t=$(now)
  FP4MOE_CACHE_DIR="$build/qualify-cache" timeout "${FP4MOE_GPU_QUALIFY_TIMEOUT:-400}" "$fp4moe" qualify --requalify \
    --preset "${FP4MOE_GPU_QUALIFY_PRESET:-qwen3.5-397b-a17b}" --max-tokens "${FP4MOE_GPU_QUALIFY_MAX_TOKENS:-1024}" \
    --json "$out/qualify.json" --plot "$out/qualify.svg" > "$out/qualify.txt" 2>&1
  rc=$?
  record "qualify" "$([ $rc = 0 ] && echo ok || echo FAILED)" $(( $(now) - t )) "log=qualify.txt json=qualify.json plot=qualify.svg"
fi

# 6. Tensor names of synthetic checkpoints (the four architectures at toy size) against transformers'
#    own state_dict (no GPU needed; transformers is on the GPU machine only).
if [[ $skip != *" hfnames "* ]] && [ -x "$fp4moe" ]; then
  t=$(now)
  python3 tests/io/check_hf_names.py --fp4moe "$fp4moe" > "$out/hf-names.txt" 2>&1
  rc=$?
  record "hf names" "$([ $rc = 0 ] && echo ok || echo FAILED)" $(( $(now) - t )) "log=hf-names.txt"
fi

{
  echo "== tools/gpu/check.sh summary ($(date -u +%Y-%m-%dT%H:%MZ), $(head -2 "$out/device.txt" | tail -1))"
  printf '%s\n' "${rows[@]}"
} | tee "$out/summary.txt"
grep -q -E 'FAILED' "$out/summary.txt" && exit 1
exit 0
