// Routing reference: hand-computed cases for every method, ties, DeepSeek-V3 grouping, bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/moe_reference.h"

namespace fp4moe {
namespace {

RoutingConfig config(RoutingMethod method, int experts, int k) {
  RoutingConfig c;
  c.method = method;
  c.num_experts = experts;
  c.top_k = k;
  return c;
}

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routed route(const RoutingConfig& c, const std::vector<float>& logits, const float* bias = nullptr) {
  const int64_t tokens = static_cast<int64_t>(logits.size()) / c.num_experts;
  Routed r{std::vector<int32_t>(static_cast<size_t>(tokens * c.top_k), -1),
           std::vector<float>(static_cast<size_t>(tokens * c.top_k), -1.0f)};
  route_reference(c, logits, tokens, bias, r.ids, r.weights);
  return r;
}

TEST(RoutingReference, SoftmaxTopkWithoutRenormalization) {
  // logits ln(1), ln(2), ln(3), ln(4): probabilities 0.1, 0.2, 0.3, 0.4.
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  const Routed r = route(config(RoutingMethod::kSoftmaxTopk, 4, 2), logits);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{3, 2}));
  EXPECT_NEAR(r.weights[0], 0.4f, 1e-6f);
  EXPECT_NEAR(r.weights[1], 0.3f, 1e-6f);
}

TEST(RoutingReference, SoftmaxTopkRenormAndTopkSoftmaxAgree) {
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  for (RoutingMethod m : {RoutingMethod::kSoftmaxTopkRenorm, RoutingMethod::kTopkSoftmax}) {
    const Routed r = route(config(m, 4, 2), logits);
    EXPECT_EQ(r.ids, (std::vector<int32_t>{3, 2}));
    EXPECT_NEAR(r.weights[0], 4.0f / 7.0f, 1e-6f);  // 0.4 / (0.4 + 0.3)
    EXPECT_NEAR(r.weights[1], 3.0f / 7.0f, 1e-6f);
  }
}

TEST(RoutingReference, WeightsAreTheDoubleResultRoundedOnce) {
  const std::vector<float> logits = {0.25f, -1.5f, 2.0f, 0.75f, -0.125f};
  const Routed r = route(config(RoutingMethod::kSoftmaxTopk, 5, 3), logits);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 3, 0}));
  double total = 0.0;
  for (float l : logits) total += std::exp(static_cast<double>(l) - 2.0);
  EXPECT_EQ(r.weights[0], static_cast<float>(1.0 / total));
  EXPECT_EQ(r.weights[1], static_cast<float>(std::exp(0.75 - 2.0) / total));
  EXPECT_EQ(r.weights[2], static_cast<float>(std::exp(0.25 - 2.0) / total));
}

TEST(RoutingReference, TiesGoToTheLowerExpertIndex) {
  // Experts 1, 3 and 4 tie for the top; 0 and 2 tie below them.
  const std::vector<float> logits = {0.5f, 1.0f, 0.5f, 1.0f, 1.0f};
  for (RoutingMethod m : {RoutingMethod::kSoftmaxTopk, RoutingMethod::kSoftmaxTopkRenorm, RoutingMethod::kTopkSoftmax}) {
    const Routed r = route(config(m, 5, 4), logits);
    EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3, 4, 0}));
    EXPECT_EQ(r.weights[0], r.weights[1]);
    EXPECT_EQ(r.weights[1], r.weights[2]);
    EXPECT_GT(r.weights[2], r.weights[3]);
  }
  const std::vector<float> all_equal(8, 0.0f);
  const Routed r = route(config(RoutingMethod::kSoftmaxTopkRenorm, 8, 3), all_equal);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1, 2}));
  for (float w : r.weights) EXPECT_NEAR(w, 1.0f / 3.0f, 1e-7f);
}

TEST(RoutingReference, SeveralTokensAreIndependent) {
  const std::vector<float> logits = {3.0f, 1.0f, 2.0f, /*token 1*/ -1.0f, 5.0f, 4.0f};
  const Routed r = route(config(RoutingMethod::kSoftmaxTopkRenorm, 3, 2), logits);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 2, 1, 2}));
  const float w0 = static_cast<float>(1.0 / (1.0 + std::exp(-1.0)));
  EXPECT_EQ(r.weights[0], w0);
  EXPECT_EQ(r.weights[2], w0);
}

float sigmoid(float x) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x)))); }

RoutingConfig grouped(int experts, int k, int groups, int keep, float factor, bool renorm) {
  RoutingConfig c = config(RoutingMethod::kSigmoidGroupedTopk, experts, k);
  c.n_group = groups;
  c.topk_group = keep;
  c.routed_scaling_factor = factor;
  c.renormalize = renorm;
  return c;
}

TEST(RoutingReference, GroupedTopkGroupRankingChangesTheResult) {
  // 8 experts in 4 groups of 2; keep 2 groups, top-2. Plain top-2 would take experts 0 and 2
  // (scores 3, 2.5) but group 0 = {3, -4} and group 1 = {2.5, -4} sum low; group 2 = {2, 2} and
  // group 3 = {1.5, 1.5} win, so the result is experts 4 and 5.
  const std::vector<float> logits = {3.0f, -4.0f, 2.5f, -4.0f, 2.0f, 2.0f, 1.5f, 1.5f};
  const Routed r = route(grouped(8, 2, 4, 2, 1.0f, true), logits);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{4, 5}));
  EXPECT_NEAR(r.weights[0], 0.5f, 1e-7f);
  EXPECT_NEAR(r.weights[1], 0.5f, 1e-7f);
  // With all groups kept it is plain top-k on the scores.
  const Routed all = route(grouped(8, 2, 4, 4, 1.0f, true), logits);
  EXPECT_EQ(all.ids, (std::vector<int32_t>{0, 2}));
}

TEST(RoutingReference, GroupedTopkBiasSelectsButDoesNotWeight) {
  // One group (plain top-k on biased scores). Bias moves expert 3 to the top and expert 1 out.
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -1.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 2.0f};
  const Routed r = route(grouped(4, 2, 1, 1, 2.5f, true), logits, bias.data());
  EXPECT_EQ(r.ids, (std::vector<int32_t>{3, 0}));  // biased: 0.269+2 > 0.731
  const double s3 = sigmoid(-1.0f), s0 = sigmoid(1.0f);
  EXPECT_EQ(r.weights[0], static_cast<float>(s3 / (s3 + s0 + 1e-20) * 2.5));
  EXPECT_EQ(r.weights[1], static_cast<float>(s0 / (s3 + s0 + 1e-20) * 2.5));
  EXPECT_NEAR(r.weights[0] + r.weights[1], 2.5f, 1e-6f);  // renormalized, then scaled
  // Without renormalization: the raw sigmoid scores times the factor.
  const Routed raw = route(grouped(4, 2, 1, 1, 2.5f, false), logits, bias.data());
  EXPECT_EQ(raw.ids, r.ids);
  EXPECT_EQ(raw.weights[0], static_cast<float>(s3 * 2.5));
  EXPECT_EQ(raw.weights[1], static_cast<float>(s0 * 2.5));
  // No bias: plain order.
  const Routed nobias = route(grouped(4, 2, 1, 1, 1.0f, false), logits);
  EXPECT_EQ(nobias.ids, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(nobias.weights[0], sigmoid(1.0f));
}

TEST(RoutingReference, GroupedTopkGroupScoreUsesTopTwoBiasedScores) {
  // Groups of 4. Group 0 has the single best expert but a weak second; group 1 has two good ones.
  // Biased: group 0 top-2 = 0.9 + 0.1, group 1 = 0.6 + 0.6. Keep 1 group, top-2.
  const std::vector<float> logits(8, 0.0f);  // sigmoid 0.5 everywhere
  const std::vector<float> bias = {0.4f, -0.4f, -0.45f, -0.5f, 0.1f, 0.1f, -0.5f, -0.5f};
  const Routed r = route(grouped(8, 2, 2, 1, 1.0f, true), logits, bias.data());
  EXPECT_EQ(r.ids, (std::vector<int32_t>{4, 5}));
  EXPECT_NEAR(r.weights[0], 0.5f, 1e-7f);  // un-biased scores 0.5, 0.5, renormalized
  // Ties inside a group and between groups: lower index first.
  const std::vector<float> flat_bias(8, 0.0f);
  const Routed tie = route(grouped(8, 3, 2, 1, 1.0f, true), logits, flat_bias.data());
  EXPECT_EQ(tie.ids, (std::vector<int32_t>{0, 1, 2}));
}

TEST(RoutingReference, BadInputsAreErrors) {
  std::vector<float> logits = {0.0f, 1.0f, 2.0f, 3.0f, 0.0f, 1.0f, 2.0f, 3.0f};
  std::vector<int32_t> ids(4);
  std::vector<float> weights(4);
  const RoutingConfig c = config(RoutingMethod::kSoftmaxTopkRenorm, 4, 2);
  logits[5] = std::numeric_limits<float>::quiet_NaN();
  try {
    route_reference(c, logits, 2, nullptr, ids, weights);
    FAIL() << "NaN logit accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 1"), std::string::npos) << e.what();
  }
  logits[5] = INFINITY;
  EXPECT_THROW(route_reference(c, logits, 2, nullptr, ids, weights), Error);
  logits[5] = 1.0f;
  EXPECT_THROW(route_reference(c, logits, 3, nullptr, ids, weights), Error);              // logits size
  EXPECT_THROW(route_reference(c, logits, 2, nullptr, std::span<int32_t>(ids).first(3), weights), Error);
  EXPECT_THROW(route_reference(config(RoutingMethod::kSoftmaxTopk, 4, 5), logits, 2, nullptr, ids, weights), Error);
  EXPECT_THROW(route_reference(grouped(4, 2, 3, 1, 1.0f, true), logits, 2, nullptr, ids, weights), Error);
  EXPECT_THROW(route_reference(grouped(4, 3, 2, 1, 1.0f, true), logits, 2, nullptr, ids, weights), Error);
  EXPECT_THROW(route_reference(grouped(4, 2, 2, 1, 0.0f, true), logits, 2, nullptr, ids, weights), Error);
  const std::vector<float> bad_bias = {0.0f, NAN, 0.0f, 0.0f};
  EXPECT_THROW(route_reference(grouped(4, 2, 2, 1, 1.0f, true), logits, 2, bad_bias.data(), ids, weights), Error);
  EXPECT_NO_THROW(route_reference(c, logits, 2, nullptr, ids, weights));
}

}  // namespace
}  // namespace fp4moe
