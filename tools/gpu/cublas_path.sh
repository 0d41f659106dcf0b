# shellcheck shell=bash
# Sourced by the GPU-machine scripts (bench/gpu_run.sh, tools/gpu/ab.sh): makes libcublas.so.13 loadable
# for `fp4moe bench` (its BF16 GEMM ceiling and the cuBLAS baseline): the CUDA toolkit's, else the one
# the PyTorch wheels carry.
if ! ldconfig -p | grep -q 'libcublas.so.13'; then
  fp4moe_cublas_pylib=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null || true)
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64${fp4moe_cublas_pylib:+:$fp4moe_cublas_pylib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
