#!/usr/bin/env bash
# Installs what fp4moe needs to build and test on Debian (as root): the C++ libraries from Debian's
# packages and the Python test oracles from PyPI. Idempotent. The CUDA toolkit is optional: with
# nvcc present the CUDA parts are built too.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
packages=(cmake ninja-build g++ make pkg-config git python3 python3-pip python3-venv
          nlohmann-json3-dev libcli11-dev googletest libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-dev)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: apt-get install ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Test oracles (independent implementations the tests compare against), and what the Python binding
# builds and tests with (nanobind, scikit-build-core, pytest; docs/python.md).
python3 -m pip install -q --disable-pip-version-check numpy ml_dtypes safetensors nanobind scikit-build-core pytest
# With the CUDA toolkit: cuobjdump and nvdisasm for the SASS check of the built kernels
# (tools/gpu/sass_odd_descriptors.py). Toolkits without them (nvcc only) get NVIDIA's PyPI packages of the
# same major version.
nvcc=$(command -v nvcc || true)
if [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ]; then nvcc=/usr/local/cuda/bin/nvcc; fi
if [ -n "$nvcc" ] && ! { [ -x "$(dirname "$nvcc")/cuobjdump" ] && [ -x "$(dirname "$nvcc")/nvdisasm" ]; }; then
  major=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
  [ -n "$major" ] || { echo "install_deps: cannot read the CUDA version from $nvcc --version" >&2; exit 1; }
  python3 -m pip install -q --disable-pip-version-check "nvidia-cuda-cuobjdump==$major.*" "nvidia-cuda-nvdisasm==$major.*"
fi
echo "install_deps: done"
