// Device ceilings (bench/ceilings.h): copy bandwidth and BF16 GEMM rate.
// Copy: cudaMemcpyAsync device-to-device of a buffer far larger than L2; bytes = read + written.
// GEMM: cublasGemmEx C = A * B, A/B/C BF16 column-major, CUBLAS_COMPUTE_32F, default algorithm
// (cuBLAS picks its tensor-core kernel), inputs uniform random in [-1, 1] filled on the device.
// Both: warm-up, then CUDA events around each call, median over the repeats.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backends/cublas_check.h"
#include "bench/ceilings.h"
#include "bench/device_fill.h"
#include "bench/timing.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_buffer.h"

namespace fp4moe::bench {

Ceilings measure_ceilings(const CeilingOptions& options) {
  FP4MOE_CHECK(options.copy_bytes >= (int64_t{1} << 20), "ceilings: copy_bytes must be at least 1 MiB");
  FP4MOE_CHECK(options.gemm_size >= 256 && options.gemm_size % 64 == 0,
               "ceilings: gemm_size must be a multiple of 64, at least 256 (got ", options.gemm_size, ")");
  FP4MOE_CUDA_CHECK(cudaSetDevice(options.device));
  cudaStream_t stream = nullptr;
  FP4MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Ceilings c;
  try {
    // Copy bandwidth.
    {
      const auto bytes = static_cast<size_t>(options.copy_bytes);
      DeviceBuffer src(bytes), dst(bytes);
      fill_random_f32(src.as<float>(), bytes / 4, 0xC0FFEEu, 1.0f, stream);
      fill_random_f32(dst.as<float>(), bytes / 4, 0xBEEFu, 1.0f, stream);
      TimingPlan plan{3, 10, 50, 200};
      auto times = time_region_ms(stream, plan, [&] {
        FP4MOE_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, stream));
      });
      c.copy_bytes = options.copy_bytes;
      c.copy_us = median(times) * 1e3;
      c.copy_gbps = 2.0 * static_cast<double>(bytes) / (c.copy_us * 1e-6) / 1e9;
      c.copy_repeats = static_cast<int>(times.size());
    }
    // BF16 GEMM rate.
    {
      const int64_t n = options.gemm_size;
      const auto elems = static_cast<size_t>(n * n);
      DeviceBuffer a(elems * 2), b(elems * 2), out(elems * 2);
      fill_random_bf16(a.get(), elems, 11, 1.0f, stream);
      fill_random_bf16(b.get(), elems, 12, 1.0f, stream);
      fill_random_bf16(out.get(), elems, 13, 1.0f, stream);
      cublasHandle_t handle = nullptr;
      FP4MOE_CUBLAS_CHECK(cublasCreate(&handle));
      try {
        FP4MOE_CUBLAS_CHECK(cublasSetStream(handle, stream));
        const float alpha = 1.0f, beta = 0.0f;
        const int ni = static_cast<int>(n);
        TimingPlan plan{3, 10, 50, 300};
        auto times = time_region_ms(stream, plan, [&] {
          FP4MOE_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha, a.get(), CUDA_R_16BF, ni,
                                           b.get(), CUDA_R_16BF, ni, &beta, out.get(), CUDA_R_16BF, ni,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        });
        c.gemm_size = n;
        c.gemm_us = median(times) * 1e3;
        c.bf16_tflops = 2.0 * static_cast<double>(n) * n * n / (c.gemm_us * 1e-6) / 1e12;
        c.gemm_repeats = static_cast<int>(times.size());
      } catch (...) {
        cublasDestroy(handle);
        throw;
      }
      FP4MOE_CUBLAS_CHECK(cublasDestroy(handle));
    }
  } catch (...) {
    cudaStreamDestroy(stream);
    throw;
  }
  FP4MOE_CUDA_CHECK(cudaStreamDestroy(stream));
  return c;
}

}  // namespace fp4moe::bench
