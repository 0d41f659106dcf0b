// nvfp4_qdq_fast.h on the host (the same code launch 1's W4A4 activations run on the GPU): for every
// BF16 value x and every E4M3 block scale, with tensor scales from typical (amax / 2688) to extreme,
// the E2M1 value from the reciprocal must be the division's (the CPU reference's rounding rule) wherever
// it does not report `unsure`; exact rounding midpoints must be reported; `unsure` must be rare; the
// reciprocal must be refused (0) exactly where the divisor or its reciprocal is not a normal float.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/rng.h"
#include "format/bf16.h"
#include "format/fp_codes.h"
#include "format/nvfp4.h"
#include "kernels/cuda/nvfp4_qdq_fast.h"

namespace fp4moe {
namespace {

// The CPU reference's rounding of x / divisor (nvfp4_quantize_block): IEEE quotient, ModelOpt sign.
float e2m1_by_division(float x, float divisor) {
  const float q = x / divisor;
  return e2m1_decode(static_cast<uint8_t>((q < 0.0f ? 0x8 : 0x0) | e2m1_magnitude_code(std::fabs(q))));
}

std::vector<float> tensor_scales() {
  std::vector<float> scales = {1.0f, 0.75f, 1.0f / 2688.0f, nvfp4_tensor_scale_for_amax(3.7f),
                               nvfp4_tensor_scale_for_amax(17.3f), nvfp4_tensor_scale_for_amax(0.013f),
                               nvfp4_tensor_scale_for_amax(900.0f)};
  Rng rng(24);
  for (int i = 0; i < 6; ++i) scales.push_back(static_cast<float>(std::ldexp(rng.uniform(1.0, 2.0), -20 + 4 * i)));
  // Extremes: divisors below 2^-125 or above 2^125 for some block scales (no reciprocal there).
  for (float s : {1e-30f, 3e-36f, 1e-39f, 1e30f, 3e38f}) scales.push_back(s);
  return scales;
}

TEST(Nvfp4QdqFast, ReciprocalRoundsAsTheDivisionOrSaysUnsure) {
  int64_t checked = 0, unsure_count = 0, wrong = 0, refused = 0;
  for (float tensor_scale : tensor_scales()) {
    for (int code = 0x01; code <= 0x7E; ++code) {  // every positive finite E4M3 block scale
      const float divisor = e4m3_decode(static_cast<uint8_t>(code)) * tensor_scale;
      const float reciprocal = nvfp4_qdq_reciprocal(divisor);
      const bool normal = divisor >= 0x1p-125f && divisor <= 0x1p125f;
      ASSERT_EQ(reciprocal != 0.0f, normal) << "divisor " << divisor;
      if (!normal) {
        ++refused;
        continue;
      }
      for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
        const float x = bf16_to_float(static_cast<uint16_t>(bits));
        if (std::isnan(x)) continue;  // below (the CPU reference refuses NaN)
        bool unsure = false;
        const float got = e2m1_round_by_reciprocal(x, reciprocal, unsure);
        ++checked;
        if (unsure) {
          ++unsure_count;
        } else if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(e2m1_by_division(x, divisor))) {
          if (++wrong <= 5)
            ADD_FAILURE() << "x " << x << " divisor " << divisor << ": " << got << ", the division gives "
                          << e2m1_by_division(x, divisor);
        }
      }
    }
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(refused, 0) << "the extreme tensor scales should leave some divisors without a reciprocal";
  EXPECT_GT(checked, 100'000'000);
  // Exact midpoints are the bulk of it (x = midpoint * divisor with nice scales): rare, or the GPU
  // would divide after all.
  EXPECT_LT(unsure_count * 10'000, checked) << unsure_count << " unsure of " << checked;
  std::printf("[ info ] %lld values checked, %lld unsure (%.2g), %lld divisors without a reciprocal\n",
              static_cast<long long>(checked), static_cast<long long>(unsure_count),
              static_cast<double>(unsure_count) / static_cast<double>(checked), static_cast<long long>(refused));
}

TEST(Nvfp4QdqFast, MidpointsAreUnsureAndSpecialValuesRoundAsTheDivision) {
  for (float divisor : {1.0f, 0.375f, 0x1p-9f, 448.0f}) {
    const float reciprocal = nvfp4_qdq_reciprocal(divisor);
    for (float midpoint : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f}) {
      for (float sign : {1.0f, -1.0f}) {
        bool unsure = false;
        e2m1_round_by_reciprocal(sign * midpoint * divisor, reciprocal, unsure);
        EXPECT_TRUE(unsure) << "midpoint " << sign * midpoint << " x divisor " << divisor;
      }
    }
    for (float x : {0.0f, -0.0f, -1e-30f, 6.5f * divisor, 1e30f, INFINITY, -INFINITY}) {
      bool unsure = false;
      const float got = e2m1_round_by_reciprocal(x, reciprocal, unsure);
      EXPECT_FALSE(unsure) << x;
      EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(e2m1_by_division(x, divisor))) << x;
    }
    bool unsure = false;  // NaN: +6, as the GPU's division path (e2m1_round_value) gives
    EXPECT_EQ(e2m1_round_by_reciprocal(NAN, reciprocal, unsure), 6.0f);
    EXPECT_FALSE(unsure);
  }
}

}  // namespace
}  // namespace fp4moe
