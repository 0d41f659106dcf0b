// Kernels of the cuBLAS BF16 baseline (cublas_bf16_baseline_kernels.h).
// dequantize: one thread per 16-value NVFP4 block: 8 packed bytes and one E4M3 code in, 32 bytes of
//             BF16 out (two 16-byte stores); the ModelOpt formula e2m1 * fp32(scale * tensor_scale)
//             with IEEE products, then one rounding to BF16. Runs once per prepare.
// swiglu:     one thread per 8 outputs: 16-byte loads of gate and up, fp32 math, one 16-byte store.
// Both grid-stride, no shared memory, no atomics; deterministic.
#include <cuda_bf16.h>

#include "backends/cublas_bf16_baseline_kernels.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/nvfp4_device.cuh"

namespace fp4moe {
namespace {

__device__ __forceinline__ float e2m1_value(uint32_t code) {
  // 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (bit 3 = sign).
  const uint32_t mag = code & 7u;
  // mag >= 2: 2^((mag >> 1) - 1) * (1 or 1.5); mag 0, 1: 0, 0.5 (the subnormal).
  const float v = mag < 2u ? 0.5f * static_cast<float>(mag)
                           : static_cast<float>(1u << ((mag >> 1) - 1u)) * ((mag & 1u) ? 1.5f : 1.0f);
  return (code & 8u) ? -v : v;
}

__global__ void dequantize_kernel(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scales,
                                  int64_t blocks, int64_t blocks_per_row, int64_t first_expert,
                                  int64_t rows_per_expert, int64_t split, const float* __restrict__ scale_lo,
                                  const float* __restrict__ scale_hi, __nv_bfloat16* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += stride) {
    const int64_t row = b / blocks_per_row;
    const int64_t expert = first_expert + row / rows_per_expert;
    const float tensor_scale = (row % rows_per_expert) < split ? scale_lo[expert] : scale_hi[expert];
    const float scale = __fmul_rn(e4m3_to_float(scales[b]), tensor_scale);
    const uint2 q = *reinterpret_cast<const uint2*>(packed + b * 8);
    __align__(16) __nv_bfloat16 values[16];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t byte = ((i < 4 ? q.x : q.y) >> (8 * (i % 4))) & 0xFFu;
      values[2 * i] = __float2bfloat16_rn(__fmul_rn(e2m1_value(byte & 0xFu), scale));  // low nibble first
      values[2 * i + 1] = __float2bfloat16_rn(__fmul_rn(e2m1_value(byte >> 4), scale));
    }
    uint4* dst = reinterpret_cast<uint4*>(out + b * 16);
    dst[0] = reinterpret_cast<const uint4*>(values)[0];
    dst[1] = reinterpret_cast<const uint4*>(values)[1];
  }
}

__global__ void swiglu_kernel(const __nv_bfloat16* __restrict__ gate_up, int64_t rows, int64_t inter,
                              __nv_bfloat16* __restrict__ h) {
  const int64_t groups_per_row = inter / 8;
  const int64_t total = rows * groups_per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < total; g += stride) {
    const int64_t row = g / groups_per_row;
    const int64_t col = (g % groups_per_row) * 8;
    const uint4 gate_bits = *reinterpret_cast<const uint4*>(gate_up + row * 2 * inter + col);
    const uint4 up_bits = *reinterpret_cast<const uint4*>(gate_up + row * 2 * inter + inter + col);
    const __nv_bfloat16* gate = reinterpret_cast<const __nv_bfloat16*>(&gate_bits);
    const __nv_bfloat16* up = reinterpret_cast<const __nv_bfloat16*>(&up_bits);
    __align__(16) __nv_bfloat16 result[8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
      result[i] = __float2bfloat16_rn(swiglu_fp32(__bfloat162float(gate[i]), __bfloat162float(up[i])));
    *reinterpret_cast<uint4*>(h + row * inter + col) = *reinterpret_cast<const uint4*>(result);
  }
}

unsigned grid_for(int64_t items, int threads) {
  const int64_t wanted = (items + threads - 1) / threads;
  return static_cast<unsigned>(wanted < 65536 ? (wanted > 0 ? wanted : 1) : 65536);
}

}  // namespace

void launch_dequantize_nvfp4_bf16(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                                  int64_t first_expert, int64_t rows_per_expert, int64_t split,
                                  const float* scale_lo, const float* scale_hi, void* out_bf16, cudaStream_t stream) {
  FP4MOE_CHECK(cols % 16 == 0 && rows_per_expert > 0, "dequantize_nvfp4_bf16: cols must be a multiple of 16");
  const int64_t blocks = rows * (cols / 16);
  if (blocks == 0) return;
  dequantize_kernel<<<grid_for(blocks, 256), 256, 0, stream>>>(packed, scales, blocks, cols / 16, first_expert,
                                                               rows_per_expert, split, scale_lo, scale_hi,
                                                               static_cast<__nv_bfloat16*>(out_bf16));
  FP4MOE_CUDA_CHECK_LAUNCH();
}

void launch_swiglu_bf16(const void* gate_up_bf16, int64_t rows, int64_t inter, void* h_bf16, cudaStream_t stream) {
  FP4MOE_CHECK(inter % 8 == 0, "swiglu_bf16: inter must be a multiple of 8 (got ", inter, ")");
  const int64_t total = rows * (inter / 8);
  if (total == 0) return;
  swiglu_kernel<<<grid_for(total, 256), 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(gate_up_bf16), rows,
                                                         inter, static_cast<__nv_bfloat16*>(h_bf16));
  FP4MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace fp4moe
