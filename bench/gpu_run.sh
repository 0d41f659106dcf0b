#!/usr/bin/env bash
# Runs the baseline/ceiling GPU tests and `fp4moe bench moe` on the GPU machine (the `run` tool),
# from binaries built here (build-bench, carried) or, when they do not start there, built there.
#   bash bench/gpu_run.sh [BUILD_DIR] [extra `bench moe` args...]
# Writes $OUT/bench-moe.json, $OUT/bench-moe.txt and $OUT/gpu-run.log. Set FP4MOE_GIT_COMMIT.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
build=${1:-build-bench}
shift || true
out=${OUT:-/tmp/fp4moe-out}
mkdir -p "$out"
exec > >(tee "$out/gpu-run.log") 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv || true
source tools/gpu/cublas_path.sh
if ! "$build/tools/fp4moe" info; then
  echo "=== carried binaries do not run here; building (sm_90a) on this machine"
  [ -f .deps/unpack.sh ] && source .deps/unpack.sh
  build="build-gpu"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4MOE_CUDA=ON -DFP4MOE_CUDA_ARCHS=90a > "$out/configure.log" 2>&1 \
    || { tail -30 "$out/configure.log"; exit 1; }
  ninja -C "$build" -j 16 fp4moe test_cublas_bf16_baseline || exit 1
  "$build/tools/fp4moe" info || exit 1
fi
echo "=== GPU tests: cuBLAS baseline vs CPU reference, ceilings"
"$build/tests/bench/test_cublas_bf16_baseline" --gtest_brief=1 || echo "BASELINE TESTS FAILED"
echo "=== fp4moe bench moe"
"$build/tools/fp4moe" bench moe --json "$out/bench-moe.json" "$@" | tee "$out/bench-moe.txt"
