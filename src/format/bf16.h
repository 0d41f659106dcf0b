// BF16 <-> float, round-to-nearest-even, as PyTorch and the CUDA intrinsics (__float2bfloat16_rn) do.
// NaN stays NaN (quiet); overflow rounds to infinity as IEEE RNE demands.
#pragma once
#include <bit>
#include <cstdint>

namespace fp4moe {

inline float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

inline uint16_t float_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

// Round a float to the nearest BF16 value and return it as a float.
inline float round_to_bf16(float value) { return bf16_to_float(float_to_bf16(value)); }

}  // namespace fp4moe
