#!/usr/bin/env bash
# The test command (README): installs the dependencies (tools/install_deps.sh), then builds and
# runs every test configuration CI runs.
#   1. the default build (CUDA parts when nvcc is present; FP4MOE_TEST_CUDA_ARCHS, default 90a, narrows
#      the architectures to keep CI short: every CUDA file still compiles for sm_90a), all ctest tests;
#      GPU tests skip with their reason when there is no GPU;
#   2. a CPU-only build (FP4MOE_CUDA=OFF) with AddressSanitizer + UndefinedBehaviorSanitizer, all tests;
#   3. the safetensors header fuzzer for a bounded time, when clang is available;
#   4. the Python binding (docs/python.md): `pip install ./` into a venv (scikit-build-core driving this
#      CMake project, same CUDA setting and architectures as the default build; FP4MOE_TEST_PYTHON_CUDA=0
#      forces a CPU-only build), then pytest python/tests (GPU tests skip with their reason).
# Build folders: build-test/, build-test-asan/, build-test-fuzz/, build-test-python/ and the venv
# build-test-python-venv/ (ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
jobs=${FP4MOE_JOBS:-$(nproc)}
archs=${FP4MOE_TEST_CUDA_ARCHS:-90a}
fail=0
summary=()

run_suite() {  # name build_dir cmake-args...
  local name=$1 dir=$2; shift 2
  echo "=== [$name] configure + build ($dir)"
  cmake -S . -B "$dir" -G Ninja "$@" > "$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; return 1; }
  ninja -C "$dir" -j "$jobs" || return 1
  echo "=== [$name] ctest"
  (cd "$dir" && ctest --output-on-failure --timeout 900 -j "$jobs")
}

mkdir -p build-test build-test-asan
if run_suite "default" build-test -DCMAKE_BUILD_TYPE=Release -DFP4MOE_WERROR=ON -DFP4MOE_CUDA_ARCHS="$archs"; then
  summary+=("default build: passed"); else summary+=("default build: FAILED"); fail=1; fi
if run_suite "cpu-only asan+ubsan" build-test-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP4MOE_CUDA=OFF \
     -DFP4MOE_SANITIZE=ON -DFP4MOE_WERROR=ON; then
  summary+=("cpu-only asan+ubsan build: passed"); else summary+=("cpu-only asan+ubsan build: FAILED"); fail=1; fi

if [ -x tools/fuzz.sh ]; then
  if tools/fuzz.sh; then summary+=("fuzzers: passed"); else summary+=("fuzzers: FAILED"); fail=1; fi
fi

# The Python binding. The venv sees the system site-packages (numpy, ml_dtypes, nanobind,
# scikit-build-core, pytest from install_deps.sh), so the build needs no network (--no-build-isolation).
python_suite() {
  local venv=build-test-python-venv
  local cmake_args=(-C cmake.define.FP4MOE_WERROR=ON -C "cmake.define.FP4MOE_CUDA_ARCHS=$archs")
  if [ "${FP4MOE_TEST_PYTHON_CUDA:-1}" = 0 ]; then cmake_args+=(-C cmake.define.FP4MOE_CUDA=OFF); fi
  echo "=== [python] pip install ./ (build-test-python) + pytest python/tests"
  python3 -m venv --system-site-packages "$venv" || return 1
  CMAKE_BUILD_PARALLEL_LEVEL=$jobs "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    --no-build-isolation -C build-dir=build-test-python "${cmake_args[@]}" ./ || return 1
  "$venv/bin/python" -m pytest -q -rs python/tests
}
if python_suite; then summary+=("python binding: passed"); else summary+=("python binding: FAILED"); fail=1; fi

echo
echo "=== summary"
printf '  %s\n' "${summary[@]}"
exit $fail
