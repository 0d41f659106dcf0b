// E2M1 (FP4) and E4M3 "fn" (FP8) element codes: exact decode tables and round-to-nearest-even,
// saturating encoders (nvfp4-format.md sections 1 and 2; decisions in docs/format.md).
//
// E2M1: bit3 sign, bits2..0 index into {0, .5, 1, 1.5, 2, 3, 4, 6}. No Inf/NaN codes: |x| > 5
//       and +-Inf saturate to +-6. NaN encodes as +-6 by its sign bit (CUTLASS's choice; ml_dtypes
//       gives 0x8, ModelOpt 0x7; the NVFP4 quantizer never gets here, it refuses NaN input). The
//       sign follows IEEE signbit, so -0.0 and tiny negatives give 0x8 (as ml_dtypes does); the
//       NVFP4 block quantizer uses ModelOpt's `x < 0` sign instead (see nvfp4.h).
// E4M3fn: bias 7, max 448 (0x7E), min subnormal 2^-9 (0x01), NaN 0x7F/0xFF, no Inf. The encoder
//       is "satfinite" (as __nv_fp8_e4m3(float)): finite |x| > 448 and +-Inf give +-448; NaN
//       gives 0x7F/0xFF by its sign bit.
#pragma once
#include <cstdint>

namespace fp4moe {

inline constexpr float kE2m1Max = 6.0f;
inline constexpr float kE4m3Max = 448.0f;
inline constexpr float kE4m3MinSubnormal = 0x1p-9f;

// Magnitude code (0..7) of |x| = a >= 0: RNE with saturation. Each comparison adds one step past a
// midpoint; at the midpoints of an even code's upper side (0.25, 1.25, 2.5, 5) the strict `>` keeps
// the even code, at the others (0.75, 1.75, 3.5) `>=` moves up to the even code. This is ModelOpt's
// searchsorted-plus-odd-bound rule, written branch-free so the block quantizer vectorizes.
// NaN compares false everywhere and gives 0; callers handle NaN themselves.
inline uint8_t e2m1_magnitude_code(float a) {
  return static_cast<uint8_t>((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) +
                              (a > 5.0f));
}

float e2m1_decode(uint8_t code);  // code in [0, 15]; higher bits ignored
uint8_t e2m1_encode(float value);

float e4m3_decode(uint8_t code);  // 0x7F / 0xFF decode to NaN
uint8_t e4m3_encode_satfinite(float value);

}  // namespace fp4moe
