// PTX wrappers and NVFP4 helpers shared by the SM80+ mma.sync kernels (the pipeline's grouped GEMM and
// the fused decode kernels): cp.async, mma.sync m16n8k16 BF16 with fp32 accumulation, the bf16x2
// multiply that applies block scales, and the E4M3 -> bf16x2(scale * 2^117) table entry. Why the
// 2^117: a weight decoded as bf16 bits is e2m1 * 2^-126, so one exact bf16 multiply gives
// e2m1 * scale * 2^-9; the fp32 epilogue multiplies 2^9 back with the tensor scale.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/e4m3_scale_bits.h"
#include "kernels/cuda/nvfp4_decode_layout.h"
#include "kernels/cuda/nvfp4_device.cuh"

namespace fp4moe {
namespace sm80 {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16-byte async copy global -> shared; src_bytes < 16 zero-fills the rest (0: all zeros).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
// The same with a shared-memory byte address computed once (no generic-to-shared conversion per copy),
// issued only where `issue` holds (a predicate in the instruction, no branch around it).
__device__ __forceinline__ void cp_async16_if(bool issue, uint32_t dst, const void* src, int src_bytes) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %0, 0;\n @p cp.async.cg.shared.global [%1], [%2], 16, %3;\n}\n" ::"r"(
          static_cast<int>(issue)),
      "r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  __nv_bfloat162 r = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&a), *reinterpret_cast<__nv_bfloat162*>(&b));
  return *reinterpret_cast<uint32_t*>(&r);
}
// Both halves of a times one half of b (kHigh: b's high half): ptxas folds the half's broadcast into the
// multiply's operand (HMUL2 ... R.H0_H0 / R.H1_H1 on sm_90a), so two multipliers can share a register.
template <bool kHigh>
__device__ __forceinline__ uint32_t bf16x2_mul_by_half(uint32_t a, uint32_t b) {
  const __nv_bfloat162 pair = *reinterpret_cast<__nv_bfloat162*>(&b);
  const __nv_bfloat162 half = kHigh ? __high2bfloat162(pair) : __low2bfloat162(pair);
  __nv_bfloat162 r = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&a), half);
  return *reinterpret_cast<uint32_t*>(&r);
}
// E4M3 codes kFirst and kFirst + 1 of the word `codes` (positive normal codes only: e4m3_scale_bits.h)
// as bf16(scale * 2^117) in the low and the high half: a byte permute placing each code in its half's low
// byte, then (code << 4) + bias, one multiply-add for both. Each half is taken with bf16x2_mul_by_half.
template <int kFirst>
__device__ __forceinline__ uint32_t normal_scale_pair_bf16x2(uint32_t codes) {
  static_assert(kFirst == 0 || kFirst == 2, "the word's codes 0 and 1, or 2 and 3");
  constexpr uint32_t kSelector = 0x4040u + 0x0100u * (kFirst + 1) + kFirst;  // 0x4140 or 0x4342
  return __byte_perm(codes, 0u, kSelector) * 16u + kNormalScaleBf16Bias * 0x10001u;
}
// E4M3 code -> bf16x2(scale * 2^117); exact for all codes (scale * 2^117 is in [2^108, 2^126)).
__device__ __forceinline__ uint32_t scale_lut_entry(uint32_t code) {
  const __nv_bfloat16 v = __float2bfloat16_rn(e4m3_to_float(code) * 0x1p117f);
  const uint32_t bits = *reinterpret_cast<const uint16_t*>(&v);
  return bits | (bits << 16);
}
// The factor the fp32 epilogue applies for the table's 2^-9: 2^9.
inline constexpr float kScaleLutCompensation = 512.0f;

// Nibble pair P of a word holding 8 FP4 codes (nibble P = element 2P, nibble P+4 = element 2P+1) as
// bf16x2 bits of e2m1 * 2^-126: magnitudes to bits [8:6] / [24:22], signs to 15 / 31 (the layouts of
// nvfp4_mma_layout.h and of the sm_90a GEMM store pairs this way). Pairs 0 and 1 shift both left: one
// multiply (shifted_fields_by_multiply; the shifted copies do not overlap: bits 6-9 / 22-25 and 12-15 /
// 28-31). Pairs 2 and 3 shift the magnitudes right.
template <int P>
__device__ __forceinline__ uint32_t nibble_pair(uint32_t word) {
  constexpr int kMag = 6 - 4 * P, kSign = 12 - 4 * P;
  if constexpr (kMag >= 0) {  // (the branch not taken is not instantiated: no negative shift counts)
    return shifted_fields_by_multiply<kMag, kSign>(word);
  } else {
    return ((word >> -kMag) & 0x01C001C0u) | ((word << kSign) & 0x80008000u);
  }
}

// W4A4 epilogue of GEMM1 for mma accumulator layouts: h[q][i] holds h column 8q + 2t + i%2 of row
// half i/2 (t = lane % 4), so one 16-column NVFP4 block of h is the column-tile pair (q, q + 1), q
// even, spread over a lane quad. Each block is quantized with the static tensor scale and stored
// dequantized without it (nvfp4_qdq_value), exactly as the CPU reference.
template <int NQ>
__device__ __forceinline__ void nvfp4_qdq_h_quad_blocks(float (&h)[NQ][4], float quant_scale) {
  static_assert(NQ % 2 == 0, "16-column blocks are pairs of 8-column tiles");
#pragma unroll
  for (int q = 0; q < NQ; q += 2) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float amax = fmaxf(fmaxf(fabsf(h[q][2 * half]), fabsf(h[q][2 * half + 1])),
                         fmaxf(fabsf(h[q + 1][2 * half]), fabsf(h[q + 1][2 * half + 1])));
      amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
      amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
      const float bs = nvfp4_block_scale(amax, quant_scale);
#pragma unroll
      for (int d = 0; d < 2; ++d)
#pragma unroll
        for (int i = 0; i < 2; ++i) h[q + d][2 * half + i] = nvfp4_qdq_value(h[q + d][2 * half + i], amax, bs, quant_scale);
    }
  }
}

}  // namespace sm80
}  // namespace fp4moe
