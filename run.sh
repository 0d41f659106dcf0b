#!/usr/bin/env bash
# The main job (README): installs the dependencies, builds fp4moe (build/), then
#   - on a machine with a GPU: qualifies every MoE backend for a model preset on it
#     (fp4moe qualify --preset $FP4MOE_PRESET, default qwen3.5-397b-a17b; synthetic weights with the
#     model's exact shapes), prints the table and writes out/qualify.{json,svg};
#   - without a GPU: says so, then writes a synthetic NVFP4 checkpoint of the tiny preset
#     (out/tiny) and inspects it.
# Extra arguments are passed to `fp4moe qualify`.
set -euo pipefail
cd "$(dirname "$0")"
bash tools/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > build.configure.log 2>&1 || { cat build.configure.log; exit 1; }
ninja -C build fp4moe
mkdir -p out
./build/tools/fp4moe info
preset=${FP4MOE_PRESET:-qwen3.5-397b-a17b}
set +e
./build/tools/fp4moe qualify --preset "$preset" --json out/qualify.json --plot out/qualify.svg "$@"
status=$?
set -e
if [ $status -eq 2 ]; then
  echo
  echo "No GPU here: writing and inspecting a synthetic NVFP4 checkpoint of the tiny preset instead."
  rm -rf out/tiny
  ./build/tools/fp4moe synth --preset tiny --seed 1 --out out/tiny
  ./build/tools/fp4moe inspect out/tiny
  exit 0
fi
exit $status
