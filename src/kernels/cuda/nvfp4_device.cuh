// Device helpers for NVFP4 codes shared by the CUDA MoE kernels: exact E4M3 / E2M1 encode and decode
// (format/fp_codes.h rules, ModelOpt quantization of format/nvfp4.h), and the W4A4 activation block
// quantize-dequantize. Everything is exact integer/fp32 arithmetic with IEEE division (__fdiv_rn), so
// results are bit-identical to the CPU code; nothing here depends on -ftz or fast-math.
#pragma once
#include <cstdint>

namespace fp4moe {

// E4M3fn code -> fp32, exact for every code (subnormals 0x01..0x07 too); 0x7F/0xFF -> NaN.
__device__ __forceinline__ float e4m3_to_float(uint32_t code) {
  const uint32_t mag = code & 0x7Fu;
  float value;
  if (mag == 0x7Fu) {
    value = __uint_as_float(0x7FC00000u);
  } else if ((mag >> 3) == 0) {
    value = static_cast<float>(mag) * 0x1p-9f;  // subnormal: m * 2^-9 (exact)
  } else {
    value = __uint_as_float((((mag >> 3) + 120u) << 23) | ((mag & 7u) << 20));
  }
  return (code & 0x80u) ? -value : value;
}

// fp32 in [2^-9, 448] -> E4M3fn code, round to nearest even (callers clamp first).
__device__ __forceinline__ uint32_t e4m3_encode_clamped(float s) {
  if (s < 0x1p-6f) return static_cast<uint32_t>(__float2int_rn(s * 512.0f));  // subnormal grid 2^-9 (exact scaling)
  const uint32_t bits = __float_as_uint(s);
  // Keep 3 mantissa bits with RNE; a carry into the exponent is the correct rounding up.
  const uint32_t rounded = (bits + 0x7FFFFu + ((bits >> 20) & 1u)) >> 20;
  return rounded - (120u << 3);
}

// E2M1 RNE with saturation at 6 (nvfp4-format.md 1.2), returned as the signed value.
__device__ __forceinline__ float e2m1_round_value(float q) {
  const float a = fabsf(q);
  float m;
  if (a <= 0.25f) m = 0.0f;
  else if (a < 0.75f) m = 0.5f;
  else if (a <= 1.25f) m = 1.0f;
  else if (a < 1.75f) m = 1.5f;
  else if (a <= 2.5f) m = 2.0f;
  else if (a < 3.5f) m = 3.0f;
  else if (a <= 5.0f) m = 4.0f;
  else m = 6.0f;
  return q < 0.0f ? -m : m;
}

// ModelOpt block scale for a block amax and a static tensor scale, decoded to fp32:
// amax / (6 * tensor_scale) with IEEE division, 0 -> 1.0 (an all-zero block, or a quotient that
// underflows or divides by inf: the CPU reference's rule, nvfp4_block_scale_code), clamp to [2^-9, 448],
// RNE to E4M3.
__device__ __forceinline__ float nvfp4_block_scale(float amax, float tensor_scale) {
  float s = __fdiv_rn(amax, __fmul_rn(6.0f, tensor_scale));
  if (amax == 0.0f || s == 0.0f) s = 1.0f;
  s = fminf(fmaxf(s, 0x1p-9f), 448.0f);
  return e4m3_to_float(e4m3_encode_clamped(s));
}

// One element quantized and dequantized WITHOUT the tensor scale: e2m1(x / (block_scale * tensor_scale))
// * block_scale, exact in BF16 (the GEMM epilogue multiplies the tensor scale in fp32). An all-zero
// block gives zeros.
__device__ __forceinline__ float nvfp4_qdq_value(float x, float amax, float block_scale, float tensor_scale) {
  if (amax == 0.0f) return 0.0f;
  return __fmul_rn(e2m1_round_value(__fdiv_rn(x, __fmul_rn(block_scale, tensor_scale))), block_scale);
}

// The same for a whole 16-value block held by one thread.
__device__ __forceinline__ void nvfp4_qdq_block(const float (&x)[16], float tensor_scale, float (&out)[16]) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) amax = fmaxf(amax, fabsf(x[i]));
  const float block_scale = nvfp4_block_scale(amax, tensor_scale);
#pragma unroll
  for (int i = 0; i < 16; ++i) out[i] = nvfp4_qdq_value(x[i], amax, block_scale, tensor_scale);
}

// SwiGLU as the CPU reference computes it: silu(g) * u = (g / (1 + expf(-g))) * u in fp32, precise expf.
__device__ __forceinline__ float swiglu_fp32(float gate, float up) {
  const float silu = __fdiv_rn(gate, __fadd_rn(1.0f, expf(-gate)));
  return __fmul_rn(silu, up);
}

}  // namespace fp4moe
