// E2M1 (FP4) and E4M3 "fn" (FP8) element codes: exact decode tables and round-to-nearest-even,
// saturating encoders (nvfp4-format.md sections 1 and 2).
//
// E2M1: bit3 sign, bits2..0 index into {0, .5, 1, 1.5, 2, 3, 4, 6}. No Inf/NaN codes: |x| > 6 and
//       +-Inf saturate to +-6; NaN encodes as +-6 by its sign bit (CUTLASS's choice). The sign
//       follows IEEE signbit, so -0.0 and tiny negatives give 0x8 (as ml_dtypes does).
// E4M3fn: bias 7, max 448 (0x7E), min subnormal 2^-9 (0x01), NaN 0x7F/0xFF, no Inf. The encoder
//       is "satfinite": finite |x| > 448 and +-Inf give +-448; NaN gives 0x7F/0xFF.
#pragma once
#include <cstdint>

namespace fp4moe {

inline constexpr float kE2m1Max = 6.0f;
inline constexpr float kE4m3Max = 448.0f;
inline constexpr float kE4m3MinSubnormal = 0x1p-9f;

float e2m1_decode(uint8_t code);  // code in [0, 15]; higher bits ignored
uint8_t e2m1_encode(float value);

float e4m3_decode(uint8_t code);  // 0x7F / 0xFF decode to NaN
uint8_t e4m3_encode_satfinite(float value);

}  // namespace fp4moe
