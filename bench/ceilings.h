// The two ceilings every benchmark number is compared with, measured in the same run on the same
// device (METHOD.md, "Two numbers first"): the device copy bandwidth (a large device-to-device copy,
// counting bytes read plus bytes written) and the BF16 matrix rate (cublasGemmEx, BF16 in and out,
// fp32 accumulation, M = N = K = 8192 by default, random data, never zeros).
#pragma once
#include <cstdint>

namespace fp4moe::bench {

struct CeilingOptions {
  int64_t copy_bytes = int64_t{2} << 30;  // size of the copied buffer (2 GiB: 35x the H200's L2)
  int64_t gemm_size = 8192;               // M = N = K
  int device = 0;
};

struct Ceilings {
  int64_t copy_bytes = 0;       // buffer size; each copy moves 2 * copy_bytes
  double copy_us = 0;           // median time of one copy
  double copy_gbps = 0;         // 2 * copy_bytes / copy_us, in GB/s (1e9 bytes)
  int copy_repeats = 0;
  int64_t gemm_size = 0;
  double gemm_us = 0;           // median time of one product
  double bf16_tflops = 0;       // 2 * n^3 / gemm_us, in TFLOP/s (1e12)
  int gemm_repeats = 0;
};

// Allocates the buffers (2 * copy_bytes and 3 * gemm_size^2 BF16 values), measures, frees them.
Ceilings measure_ceilings(const CeilingOptions& options = {});

}  // namespace fp4moe::bench
