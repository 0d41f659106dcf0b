#!/usr/bin/env bash
# Runs the libFuzzer targets (fuzz/) for a bounded time each: part of the test command (tools/test.sh).
# Needs clang with libFuzzer (Debian: clang, libclang-rt-dev); without clang it says so and skips.
# FP4MOE_FUZZ_SECONDS sets the time per target (default 60). Crash reproducers: build-test-fuzz/artifacts.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang++ > /dev/null; then
  echo "fuzz: no clang++ on this machine, fuzzers skipped"
  exit 0
fi
seconds=${FP4MOE_FUZZ_SECONDS:-60}
cmake -S . -B build-test-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DFP4MOE_CUDA=OFF \
  -DFP4MOE_BUILD_TESTS=OFF -DFP4MOE_BUILD_FUZZERS=ON > build-test-fuzz.configure.log 2>&1 \
  || { cat build-test-fuzz.configure.log; exit 1; }
ninja -C build-test-fuzz fuzz_safetensors_header
echo "fuzz: fuzz_safetensors_header for ${seconds} s"
FP4MOE_FUZZ_ARTIFACTS=build-test-fuzz/artifacts fuzz/run_fuzz.sh build-test-fuzz/fuzz/fuzz_safetensors_header "$seconds" \
  > build-test-fuzz/fuzz.log 2>&1 || { tail -40 build-test-fuzz/fuzz.log; echo "fuzz: FAILED (log above)"; exit 1; }
grep -E "Done [0-9]+ runs|stat::number_of_executed_units" build-test-fuzz/fuzz.log | tail -2
echo "fuzz: no crash"
