// BF16 rounding: RNE on the bit pattern, NaN kept quiet with its sign, overflow to infinity.
// The dense sweep against ml_dtypes.bfloat16 is in check_against_ml_dtypes.py.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "format/bf16.h"

namespace fp4moe {
namespace {

uint16_t from_bits(uint32_t bits) { return float_to_bf16(std::bit_cast<float>(bits)); }

TEST(Bf16, ExactValuesAndDecode) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);
  EXPECT_EQ(round_to_bf16(3.14159265f), 3.140625f);
}

TEST(Bf16, TiesToEven) {
  EXPECT_EQ(from_bits(0x3F808000u), 0x3F80);  // tie, lower is even
  EXPECT_EQ(from_bits(0x3F818000u), 0x3F82);  // tie, upper is even
  EXPECT_EQ(from_bits(0x3F808001u), 0x3F81);  // just above the tie
  EXPECT_EQ(from_bits(0x3F817FFFu), 0x3F81);  // just below the tie
  EXPECT_EQ(from_bits(0xBF818000u), 0xBF82);  // negative ties mirror
  EXPECT_EQ(from_bits(0x3F7F8000u), 0x3F80);  // tie with carry into the exponent
}

TEST(Bf16, NanStaysNanWithSign) {
  const uint16_t q = float_to_bf16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(bf16_to_float(q)));
  EXPECT_EQ(q & 0x8000, 0);
  // A signalling NaN whose payload lives only in the low 16 bits must not become infinity.
  EXPECT_EQ(from_bits(0x7F800001u), 0x7FC0);
  EXPECT_EQ(from_bits(0xFF800001u), 0xFFC0);
  EXPECT_TRUE(std::isnan(bf16_to_float(from_bits(0x7FFFFFFFu))));
}

TEST(Bf16, OverflowRoundsToInfinity) {
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::max()), 0xFF80);
  EXPECT_EQ(from_bits(0x7F7F7FFFu), 0x7F7F);  // below the tie: largest finite bf16
  EXPECT_EQ(from_bits(0x7F7F8000u), 0x7F80);  // tie, the even neighbour is infinity
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
}

TEST(Bf16, Subnormals) {
  EXPECT_EQ(from_bits(0x00008000u), 0x0000);  // tie to even (0)
  EXPECT_EQ(from_bits(0x00018000u), 0x0002);
  EXPECT_EQ(from_bits(0x00010000u), 0x0001);
}

}  // namespace
}  // namespace fp4moe
