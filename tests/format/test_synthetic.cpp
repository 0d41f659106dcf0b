// Synthetic weights and activations: determinism (same seed same bytes, whatever the thread
// count), seeds that differ give different data, realistic block-scale spread, and the
// gate/up tensor-scale option.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "format/bf16.h"
#include "format/fp_codes.h"
#include "format/nvfp4.h"
#include "format/synthetic.h"

namespace fp4moe {
namespace {

bool same_bytes(const MoeWeights& a, const MoeWeights& b) {
  return a.w13_packed == b.w13_packed && a.w13_scales == b.w13_scales && a.w2_packed == b.w2_packed &&
         a.w2_scales == b.w2_scales && a.gate_scale2 == b.gate_scale2 && a.up_scale2 == b.up_scale2 &&
         a.down_scale2 == b.down_scale2 && a.w13_input_scale == b.w13_input_scale &&
         a.w2_input_scale == b.w2_input_scale;
}

// Sets FP4MOE_NUM_THREADS for the scope (parallel_for reads it on every call).
class ThreadCount {
 public:
  explicit ThreadCount(int n) {
    if (const char* old = std::getenv("FP4MOE_NUM_THREADS")) old_ = old;
    setenv("FP4MOE_NUM_THREADS", std::to_string(n).c_str(), 1);
  }
  ~ThreadCount() {
    if (old_.empty()) unsetenv("FP4MOE_NUM_THREADS");
    else setenv("FP4MOE_NUM_THREADS", old_.c_str(), 1);
  }

 private:
  std::string old_;
};

TEST(Synthetic, MoeWeightsAreDeterministicAcrossThreadCounts) {
  MoeWeights one, three;
  {
    ThreadCount t(1);
    one = synthetic_moe_weights(5, 64, 32, 7);
  }
  {
    ThreadCount t(3);
    three = synthetic_moe_weights(5, 64, 32, 7);
  }
  EXPECT_TRUE(same_bytes(one, three));
  EXPECT_TRUE(same_bytes(one, synthetic_moe_weights(5, 64, 32, 7)));
  EXPECT_NO_THROW(one.validate());
}

TEST(Synthetic, DifferentSeedsAndExpertsDiffer) {
  const MoeWeights a = synthetic_moe_weights(2, 64, 32, 7), b = synthetic_moe_weights(2, 64, 32, 8);
  EXPECT_NE(a.w13_packed, b.w13_packed);
  EXPECT_NE(a.w2_packed, b.w2_packed);
  EXPECT_NE(a.gate_scale2, b.gate_scale2);
  // Experts of one layer differ from each other, and gate differs from up.
  const size_t proj = 32 * 64 / 2;
  EXPECT_NE(std::vector<uint8_t>(a.w13_packed.begin(), a.w13_packed.begin() + proj),
            std::vector<uint8_t>(a.w13_packed.begin() + 2 * proj, a.w13_packed.begin() + 3 * proj));
  EXPECT_NE(std::vector<uint8_t>(a.w13_packed.begin(), a.w13_packed.begin() + proj),
            std::vector<uint8_t>(a.w13_packed.begin() + proj, a.w13_packed.begin() + 2 * proj));
}

TEST(Synthetic, BlockScalesSpanARealisticRange) {
  const MoeWeights w = synthetic_moe_weights(1, 256, 128, 3);
  std::set<uint8_t> w13_codes(w.w13_scales.begin(), w.w13_scales.end());
  std::set<uint8_t> w2_codes(w.w2_scales.begin(), w.w2_scales.end());
  EXPECT_GE(w13_codes.size(), 20u);
  EXPECT_GE(w2_codes.size(), 20u);
  for (uint8_t c : w13_codes) {
    EXPECT_NE(c & 0x7F, 0x7F) << "NaN scale";
    EXPECT_EQ(c & 0x80, 0) << "negative scale";
  }
  for (uint8_t c : w2_codes) EXPECT_NE(c & 0x7F, 0x7F) << "NaN scale";
  // The largest block of each tensor uses (close to) the top of the E4M3 range.
  EXPECT_EQ(*w2_codes.rbegin(), 0x7E);
  // Codes are mostly non-zero, and the data has sensible magnitude: stddev ~ 1/sqrt(fan_in).
  int zero_nibbles = 0;
  for (uint8_t byte : w.w2_packed) zero_nibbles += ((byte & 0x7) == 0) + (((byte >> 4) & 0x7) == 0);
  EXPECT_LT(zero_nibbles, static_cast<int>(w.w2_packed.size()));  // fewer than half the elements
  std::vector<float> down(256 * 128);
  dequantize_nvfp4(w.down(0), down);
  double sum_sq = 0;
  for (float v : down) sum_sq += static_cast<double>(v) * v;
  const double rms = std::sqrt(sum_sq / static_cast<double>(down.size()));
  EXPECT_GT(rms, 0.3 / std::sqrt(128.0));
  EXPECT_LT(rms, 3.0 / std::sqrt(128.0));
}

TEST(Synthetic, GateUpScalesOption) {
  SyntheticMoeOptions options;
  options.distinct_gate_up_scales = true;
  const MoeWeights distinct = synthetic_moe_weights(3, 64, 32, 11, options);
  options.distinct_gate_up_scales = false;
  const MoeWeights shared = synthetic_moe_weights(3, 64, 32, 11, options);
  for (int64_t e = 0; e < 3; ++e) {
    EXPECT_NE(distinct.gate_scale2[e], distinct.up_scale2[e]);
    EXPECT_GT(std::fabs(distinct.up_scale2[e] / distinct.gate_scale2[e] - 1.0f), 0.1f);
    EXPECT_EQ(shared.gate_scale2[e], shared.up_scale2[e]);
    // The shared scale comes from the larger of the two amaxes: no block scale exceeds 448 and
    // at least one of gate/up reaches the top code.
    std::set<uint8_t> codes(shared.w13_scales.begin() + e * 2 * 32 * 4, shared.w13_scales.begin() + (e + 1) * 2 * 32 * 4);
    EXPECT_EQ(*codes.rbegin(), 0x7E);
  }
  EXPECT_NO_THROW(distinct.validate());
  EXPECT_NO_THROW(shared.validate());
}

TEST(Synthetic, InputScalesComeFromTheCalibratedAmax) {
  SyntheticMoeOptions options;
  options.activation_amax = 12.0f;
  options.intermediate_amax = 3.0f;
  const MoeWeights w = synthetic_moe_weights(2, 32, 16, 1, options);
  for (int64_t e = 0; e < 2; ++e) {
    EXPECT_EQ(w.w13_input_scale[e], 12.0f / 2688.0f);
    EXPECT_EQ(w.w2_input_scale[e], 3.0f / 2688.0f);
  }
}

TEST(Synthetic, WeightMatrixDeterministicAndNonDegenerate) {
  std::vector<float> a, b;
  {
    ThreadCount t(1);
    a = synthetic_weight_matrix(48, 64, 5);
  }
  {
    ThreadCount t(4);
    b = synthetic_weight_matrix(48, 64, 5);
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, synthetic_weight_matrix(48, 64, 6));
  double sum = 0, sum_sq = 0;
  for (float v : a) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(a.size());
  EXPECT_LT(std::fabs(sum / n), 0.01);
  const double rms = std::sqrt(sum_sq / n);
  EXPECT_GT(rms, 0.01);  // stddev 0.02 times a log-normal block factor
  EXPECT_LT(rms, 0.05);
}

TEST(Synthetic, ActivationsAreBf16Values) {
  const std::vector<float> x = synthetic_activations(8, 32, 9, 2.0);
  EXPECT_EQ(x, synthetic_activations(8, 32, 9, 2.0));
  EXPECT_NE(x, synthetic_activations(8, 32, 10, 2.0));
  std::set<float> distinct(x.begin(), x.end());
  EXPECT_GT(distinct.size(), 100u);
  for (float v : x) EXPECT_EQ(round_to_bf16(v), v);
}

}  // namespace
}  // namespace fp4moe
