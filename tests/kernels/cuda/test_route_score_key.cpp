// route_score_key.h on the host (the key the GPU top-k of moe_route_device.cuh compares): over float bit
// patterns of every sign and exponent with mantissas at both ends and in between, plus zeros, infinities
// and NaNs of both signs, the keys order exactly as the CPU reference orders the scores
// (routing_reference.cpp: larger first, -0 == +0), every NaN's key is 1 (below every number, still a
// candidate) and no key is 0 (left for "no candidate").
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cuda/route_score_key.h"

namespace fp4moe {
namespace {

using route_device::ordered_score_bits;

std::vector<float> sample_scores() {
  std::vector<float> values;
  const uint32_t mantissas[] = {0x000000u, 0x000001u, 0x000002u, 0x3FFFFFu, 0x400000u, 0x5A5A5Au, 0x7FFFFEu, 0x7FFFFFu};
  for (uint32_t sign = 0; sign < 2; ++sign)
    for (uint32_t exponent = 0; exponent < 256; ++exponent)
      for (uint32_t mantissa : mantissas)
        values.push_back(std::bit_cast<float>(sign << 31 | exponent << 23 | mantissa));
  // Every BF16 value (the high halves), with a low half of 0 and of 0x8001.
  for (uint32_t high = 0; high < 0x10000u; ++high) {
    values.push_back(std::bit_cast<float>(high << 16));
    values.push_back(std::bit_cast<float>(high << 16 | 0x8001u));
  }
  return values;
}

TEST(RouteScoreKey, OrdersAsTheReferenceAndNaNLowest) {
  const std::vector<float> values = sample_scores();
  std::vector<float> numbers;
  int nans = 0;
  for (float v : values) {
    ASSERT_NE(ordered_score_bits(v), 0u) << "bits " << std::hex << std::bit_cast<uint32_t>(v);
    if (std::isnan(v)) {
      ++nans;
      EXPECT_EQ(ordered_score_bits(v), 1u) << "NaN bits " << std::hex << std::bit_cast<uint32_t>(v);
    } else {
      numbers.push_back(v);
    }
  }
  ASSERT_GT(nans, 500);  // both signs, quiet and signalling (524 in this sample)
  // Sorted by value (the reference's compare; -0 and +0 compare equal), the keys rise exactly where the
  // values do and stay where they tie; the lowest number still lies above NaN's key.
  std::sort(numbers.begin(), numbers.end());
  ASSERT_GT(ordered_score_bits(numbers.front()), 1u);
  int ties = 0;
  for (size_t i = 1; i < numbers.size(); ++i) {
    const float a = numbers[i - 1], b = numbers[i];
    const uint32_t ka = ordered_score_bits(a), kb = ordered_score_bits(b);
    if (a == b) {
      ++ties;
      EXPECT_EQ(ka, kb) << a << " and " << b << " tie (bits " << std::hex << std::bit_cast<uint32_t>(a) << ", "
                        << std::bit_cast<uint32_t>(b) << ")";
    } else {
      EXPECT_LT(ka, kb) << a << " < " << b;
    }
  }
  EXPECT_GT(ties, 0);  // the sample holds -0 and +0, and repeated values
  EXPECT_EQ(ordered_score_bits(-0.0f), ordered_score_bits(0.0f));
  EXPECT_LT(ordered_score_bits(-std::numeric_limits<float>::infinity()), ordered_score_bits(-std::numeric_limits<float>::max()));
  EXPECT_LT(ordered_score_bits(std::numeric_limits<float>::max()), ordered_score_bits(std::numeric_limits<float>::infinity()));
}

}  // namespace
}  // namespace fp4moe
