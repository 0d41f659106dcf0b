// W4A4 activations of the fused decode's launch 1 (moe_fused_decode_sm80.cu): NVFP4 quantize-dequantize
// of one step's activations with the expert's static input scale, shared by the lanes that hold the
// same token row. Input: each lane (g = lane / 4, t = lane % 4) holds 32 BF16 activations (16 bf16x2
// words) of a 128-column chunk, its columns [32t, 32t + 32) = two whole NVFP4 blocks (the
// nvfp4_decode_layout.h permutation), of token row g % kRows, where kRows (1, 2, 4 or 8) is the item's
// token count rounded up to a power of two. Output: the same words quantize-dequantized without the
// tensor scale (the GEMM1 epilogue multiplies it), bit-identical to the CPU reference.
// Why shared: at decode most items hold one token, and every lane used to quantize its own 32 values,
// so 8 lanes (one per g) did the same work. Now the kShare = 8 / kRows lanes of a row each quantize
// 1/kShare of it (one reciprocal per block, nvfp4_qdq_fast.h), then exchange the words by shuffles.
// At one token of Qwen3.5-397B this was most of W4A4's 3x time over W4A16 (docs/perf/2026-12-01-h200-r24.md).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/nvfp4_device.cuh"
#include "kernels/cuda/nvfp4_qdq_fast.h"

namespace fp4moe::fused_decode {

// The token rows among a t's 8 lanes for an item of `tokens` (1..8) tokens: 1, 2, 4 or 8.
__device__ __forceinline__ int w4a4_rows(int tokens) { return tokens <= 1 ? 1 : tokens <= 2 ? 2 : tokens <= 4 ? 4 : 8; }

template <int kRows>
__device__ __forceinline__ void quantize_activations_w4a4(float tensor_scale, uint32_t (&b)[16], int g, int t) {
  static_assert(kRows == 1 || kRows == 2 || kRows == 4 || kRows == 8, "rows of a t's lanes: 1, 2, 4 or 8");
  constexpr int kShare = 8 / kRows;                      // lanes that quantize one row's 32 values together
  constexpr int kWords = 16 / kShare;                    // this lane's part: 2, 4, 8 or 16 words
  constexpr int kBlockWords = kWords < 8 ? kWords : 8;   // of its words inside one NVFP4 block (8 words)
  constexpr int kPartsPerBlock = 8 / kBlockWords;        // lanes whose amaxes make one block's
  const int part = g / kRows;  // words [part * kWords, (part + 1) * kWords) of the row
  // The part's words by a select tree on its bits, level by level (spans 8, 4, 2 words). Indexing b by
  // `part`, or a loop over the levels that nvcc does not unroll, puts the words in local memory.
  uint32_t w[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) w[i] = b[i];
  if constexpr (kShare >= 2) {
    const bool upper = (part & (kShare / 2)) != 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = upper ? w[i + 8] : w[i];
  }
  if constexpr (kShare >= 4) {
    const bool upper = (part & (kShare / 4)) != 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = upper ? w[i + 4] : w[i];
  }
  if constexpr (kShare >= 8) {
    const bool upper = (part & 1) != 0;
#pragma unroll
    for (int i = 0; i < 2; ++i) w[i] = upper ? w[i + 2] : w[i];
  }

  uint32_t mine[kWords];
#pragma unroll
  for (int blk = 0; blk < kWords / kBlockWords; ++blk) {
    float x[2 * kBlockWords], y[2 * kBlockWords];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < kBlockWords; ++i) {
      x[2 * i] = __uint_as_float(w[kBlockWords * blk + i] << 16);
      x[2 * i + 1] = __uint_as_float(w[kBlockWords * blk + i] & 0xFFFF0000u);
      amax = fmaxf(amax, fmaxf(fabsf(x[2 * i]), fabsf(x[2 * i + 1])));
    }
    // The block's other parts are on lanes g ^ kRows, g ^ 2 kRows (lane ^ 4 kRows, ...); max is exact in
    // any order, and fmaxf drops NaN as the CPU reference's scan does.
#pragma unroll
    for (int m = 1; m < kPartsPerBlock; m *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 4 * kRows * m));
    const float block_scale = nvfp4_block_scale(amax, tensor_scale);
    const float reciprocal = nvfp4_qdq_reciprocal(__fmul_rn(block_scale, tensor_scale));
    bool unsure = reciprocal == 0.0f || amax == 0.0f;  // no error bound / the all-zero block gives zeros
#pragma unroll
    for (int i = 0; i < 2 * kBlockWords; ++i)
      y[i] = __fmul_rn(e2m1_round_by_reciprocal(x[i], reciprocal, unsure), block_scale);
    if (unsure) {  // rare (nvfp4_qdq_fast.h): this lane's part by division, as the reference
#pragma unroll
      for (int i = 0; i < 2 * kBlockWords; ++i) y[i] = nvfp4_qdq_value(x[i], amax, block_scale, tensor_scale);
    }
#pragma unroll
    for (int i = 0; i < kBlockWords; ++i) {
      const __nv_bfloat162 pair = __floats2bfloat162_rn(y[2 * i], y[2 * i + 1]);  // exact: <= 5 significant bits
      mine[kBlockWords * blk + i] = *reinterpret_cast<const uint32_t*>(&pair);
    }
  }
  if constexpr (kShare == 1) {
#pragma unroll
    for (int i = 0; i < 16; ++i) b[i] = mine[i];
  } else {
    // Word i of row r is on lane g = (i / kWords) * kRows + r (same t), at mine[i % kWords].
    const int row = g % kRows;
#pragma unroll
    for (int i = 0; i < 16; ++i) b[i] = __shfl_sync(0xFFFFFFFFu, mine[i % kWords], 4 * ((i / kWords) * kRows + row) + t);
  }
}

// The same for the item's token count (warp-uniform).
__device__ __forceinline__ void quantize_activations_w4a4(float tensor_scale, uint32_t (&b)[16], int tokens, int g, int t) {
  switch (w4a4_rows(tokens)) {
    case 1: quantize_activations_w4a4<1>(tensor_scale, b, g, t); break;
    case 2: quantize_activations_w4a4<2>(tensor_scale, b, g, t); break;
    case 4: quantize_activations_w4a4<4>(tensor_scale, b, g, t); break;
    default: quantize_activations_w4a4<8>(tensor_scale, b, g, t); break;
  }
}

}  // namespace fp4moe::fused_decode
