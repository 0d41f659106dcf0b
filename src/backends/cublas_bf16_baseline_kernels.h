// Kernels of the cuBLAS BF16 baseline (cublas_bf16_baseline.h): NVFP4 -> BF16 dequantization at
// prepare time and SwiGLU on BF16 GEMM1 outputs. All pointers are device pointers.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp4moe {

// out[r, c] = bf16(e2m1(q[r, c]) * fp32(e4m3(scale[r, c / 16]) * tensor_scale)) for `rows` rows of
// `cols` values (cols % 16 == 0), packed / scales in the linear layout of format/nvfp4.h. Row r belongs
// to expert first_expert + r / rows_per_expert; its tensor scale is scale_lo[e] for
// r % rows_per_expert < split, else scale_hi[e] (gate/up of w13; split = rows_per_expert for w2).
void launch_dequantize_nvfp4_bf16(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                                  int64_t first_expert, int64_t rows_per_expert, int64_t split,
                                  const float* scale_lo, const float* scale_hi, void* out_bf16, cudaStream_t stream);

// h[r, i] = bf16(silu(g) * u) for g = gate_up[r, i], u = gate_up[r, inter + i] (BF16 in, fp32 math,
// silu(g) = g / (1 + expf(-g))); rows x inter, inter % 8 == 0.
void launch_swiglu_bf16(const void* gate_up_bf16, int64_t rows, int64_t inter, void* h_bf16, cudaStream_t stream);

}  // namespace fp4moe
