// E2M1 / E4M3 codes: the tables and rounding rules of nvfp4-format.md sections 1-2, written out
// by hand here. The dense sweep against ml_dtypes is in check_against_ml_dtypes.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "format/fp_codes.h"

namespace fp4moe {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(E2m1, DecodeTableMatchesSpec) {
  const float expected[16] = {0.0f, 0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                              -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (int c = 0; c < 16; ++c) {
    const float v = e2m1_decode(static_cast<uint8_t>(c));
    EXPECT_EQ(v, expected[c]) << "code " << c;
    EXPECT_EQ(std::signbit(v), c >= 8) << "code " << c;
  }
  EXPECT_EQ(e2m1_decode(0xF7), 6.0f) << "bits above the nibble are ignored";
}

TEST(E2m1, EveryCodeRoundTrips) {
  for (int c = 0; c < 16; ++c) EXPECT_EQ(e2m1_encode(e2m1_decode(static_cast<uint8_t>(c))), c) << "code " << c;
}

TEST(E2m1, TiesGoToEvenCode) {
  // nvfp4-format.md 1.2: |x| exactly on a midpoint -> the even code (mantissa bit 0).
  const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const uint8_t expected[] = {0x0, 0x2, 0x2, 0x4, 0x4, 0x6, 0x6};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(e2m1_encode(ties[i]), expected[i]) << ties[i];
    EXPECT_EQ(e2m1_encode(-ties[i]), expected[i] | 0x8) << -ties[i];
    // One ulp either side leaves the tie: below goes to the lower code, above to the upper one.
    EXPECT_EQ(e2m1_encode(std::nextafter(ties[i], 0.0f)), i == 0 ? 0x0 : expected[i] - (i % 2 == 1 ? 1 : 0))
        << "just below " << ties[i];
    EXPECT_EQ(e2m1_encode(std::nextafter(ties[i], kInf)), i % 2 == 0 ? expected[i] + 1 : expected[i])
        << "just above " << ties[i];
  }
}

TEST(E2m1, SaturatesAndHandlesSpecials) {
  EXPECT_EQ(e2m1_encode(5.0001f), 0x7);
  EXPECT_EQ(e2m1_encode(7.0f), 0x7);
  EXPECT_EQ(e2m1_encode(1e30f), 0x7);
  EXPECT_EQ(e2m1_encode(kInf), 0x7);
  EXPECT_EQ(e2m1_encode(-kInf), 0xF);
  EXPECT_EQ(e2m1_encode(-7.0f), 0xF);
  // fp4moe's decision (docs/format.md): NaN -> +-6 by the sign bit, as CUTLASS.
  EXPECT_EQ(e2m1_encode(kNan), 0x7);
  EXPECT_EQ(e2m1_encode(-kNan), 0xF);
  // The raw encoder follows IEEE signbit (as ml_dtypes): -0 and tiny negatives keep the sign.
  EXPECT_EQ(e2m1_encode(0.0f), 0x0);
  EXPECT_EQ(e2m1_encode(-0.0f), 0x8);
  EXPECT_EQ(e2m1_encode(-0.1f), 0x8);
  EXPECT_EQ(e2m1_encode(std::numeric_limits<float>::denorm_min()), 0x0);
}

TEST(E2m1, MagnitudeCodeIsMonotoneAndExhaustiveOnAGrid) {
  // Every multiple of 1/64 in [0, 8]: the code is non-decreasing and hits all 8 magnitudes.
  int previous = 0, seen = 0;
  for (int i = 0; i <= 512; ++i) {
    const int code = e2m1_magnitude_code(static_cast<float>(i) / 64.0f);
    EXPECT_GE(code, previous);
    EXPECT_LE(code, 7);
    seen |= 1 << code;
    previous = code;
  }
  EXPECT_EQ(seen, 0xFF);
}

TEST(E4m3, DecodeKeyValues) {
  EXPECT_EQ(e4m3_decode(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3_decode(0x80)));
  EXPECT_EQ(e4m3_decode(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_decode(0x07), 7.0f * 0x1p-9f);
  EXPECT_EQ(e4m3_decode(0x08), 0x1p-6f);
  EXPECT_EQ(e4m3_decode(0x38), 1.0f);
  EXPECT_EQ(e4m3_decode(0x39), 1.125f);
  EXPECT_EQ(e4m3_decode(0x79), 288.0f);
  EXPECT_EQ(e4m3_decode(0x7E), 448.0f);
  EXPECT_EQ(e4m3_decode(0xFE), -448.0f);
  EXPECT_EQ(e4m3_decode(0x03), 0.005859375f);
  EXPECT_TRUE(std::isnan(e4m3_decode(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_decode(0xFF)));
}

TEST(E4m3, PositiveCodesAreStrictlyIncreasingAndNegativesMirror) {
  for (int c = 1; c <= 0x7E; ++c) {
    EXPECT_LT(e4m3_decode(static_cast<uint8_t>(c - 1)), e4m3_decode(static_cast<uint8_t>(c))) << "code " << c;
    EXPECT_EQ(e4m3_decode(static_cast<uint8_t>(c | 0x80)), -e4m3_decode(static_cast<uint8_t>(c))) << "code " << c;
  }
}

TEST(E4m3, EveryCodeRoundTripsIncludingNan) {
  for (int c = 0; c < 256; ++c) {
    EXPECT_EQ(e4m3_encode_satfinite(e4m3_decode(static_cast<uint8_t>(c))), c) << "code " << c;
  }
  EXPECT_EQ(e4m3_encode_satfinite(kNan), 0x7F);
  EXPECT_EQ(e4m3_encode_satfinite(-kNan), 0xFF);
}

TEST(E4m3, SaturationBoundaries) {
  EXPECT_EQ(e4m3_encode_satfinite(448.0f), 0x7E);
  EXPECT_EQ(e4m3_encode_satfinite(464.0f), 0x7E);  // tie between 448 and 480: 448 is even
  EXPECT_EQ(e4m3_encode_satfinite(465.0f), 0x7E);  // satfinite (a non-saturating cast gives NaN)
  EXPECT_EQ(e4m3_encode_satfinite(480.0f), 0x7E);
  EXPECT_EQ(e4m3_encode_satfinite(1e30f), 0x7E);
  EXPECT_EQ(e4m3_encode_satfinite(kInf), 0x7E);
  EXPECT_EQ(e4m3_encode_satfinite(-kInf), 0xFE);
  EXPECT_EQ(e4m3_encode_satfinite(-465.0f), 0xFE);
  EXPECT_EQ(e4m3_encode_satfinite(432.0f), 0x7E);  // tie between 416 (m=5) and 448 (m=6): even is 448
  EXPECT_EQ(e4m3_encode_satfinite(431.99997f), 0x7D);
}

TEST(E4m3, RoundingNearZeroAndTies) {
  EXPECT_EQ(e4m3_encode_satfinite(0x1p-10f), 0x00);                            // tie to 0 (even)
  EXPECT_EQ(e4m3_encode_satfinite(std::nextafter(0x1p-10f, 1.0f)), 0x01);      // just above the tie
  EXPECT_EQ(e4m3_encode_satfinite(1.5f * 0x1p-10f), 0x01);
  EXPECT_EQ(e4m3_encode_satfinite(2.5f * 0x1p-9f), 0x02);                      // tie 2|3 -> 2
  EXPECT_EQ(e4m3_encode_satfinite(3.5f * 0x1p-9f), 0x04);                      // tie 3|4 -> 4
  EXPECT_EQ(e4m3_encode_satfinite(7.5f * 0x1p-9f), 0x08);                      // tie 7|8 -> min normal
  EXPECT_EQ(e4m3_encode_satfinite(1.0625f), 0x38);                             // tie 1|1.125 -> 1
  EXPECT_EQ(e4m3_encode_satfinite(1.1875f), 0x3A);                             // tie 1.125|1.25 -> 1.25
  EXPECT_EQ(e4m3_encode_satfinite(1.9375f), 0x40);                             // tie 1.875|2 -> 2 (carry)
  EXPECT_EQ(e4m3_encode_satfinite(273.28f), 0x79);                             // example A: up to 288
  EXPECT_EQ(e4m3_encode_satfinite(0.005f), 0x03);                              // example F: subnormal
  EXPECT_EQ(e4m3_encode_satfinite(-0.0f), 0x80);
  EXPECT_EQ(e4m3_encode_satfinite(-1e-10f), 0x80);
  EXPECT_EQ(e4m3_encode_satfinite(std::numeric_limits<float>::denorm_min()), 0x00);
}

}  // namespace
}  // namespace fp4moe
