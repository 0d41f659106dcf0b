// CPU routing reference (route_reference in moe_reference.h): logits [T, E] fp32 row-major ->
// topk_ids / topk_weights [T, K], slots in descending selection score, ties to the lower expert.
//
// Exact steps (GPU routing kernels mirror these; selection is what must match bit for bit):
//   softmax_topk(_renorm), topk_softmax: select on the raw fp32 logits (softmax is monotonic, so
//     this is the selection on probabilities without fp32-exp ties). Weights in double:
//     p_k = exp(l_k - max_all) / sum_all exp(l_j - max_all)          (softmax_topk)
//     p_k = exp(l_k - l_top1) / sum_selected exp(l_j - l_top1)        (renorm and topk_softmax: equal
//     in exact arithmetic), each rounded once to fp32.
//   sigmoid_grouped_topk (DeepSeek-V3): s_e = fp32(1 / (1 + exp(-l_e))) (double, rounded once);
//     b_e = fp32(s_e + bias_e) (an fp32 add, as HF); group score = fp32(top1 + top2) of b within the
//     group; keep topk_group groups (score desc, lower group first); top-k of b within the kept
//     groups (desc, lower expert first). Weights from the UN-biased s in double:
//     w_k = s_k / (sum_k s_k + 1e-20) * routed_scaling_factor (renormalize) or s_k * factor, rounded
//     once to fp32.
// Non-finite logits or bias are rejected (Error naming the token / expert).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/moe_reference.h"
#include "kernels/cpu/reference_detail.h"

namespace fp4moe {

namespace {

// Indices of the k largest scores: descending score, ties to the lower index. `candidates` lists
// the eligible indices (ascending); the result is written to `out` (size k).
void top_k_indices(const float* scores, std::vector<int32_t>& candidates, int k, int32_t* out) {
  auto before = [scores](int32_t a, int32_t b) {
    if (scores[a] != scores[b]) return scores[a] > scores[b];
    return a < b;
  };
  std::partial_sort(candidates.begin(), candidates.begin() + k, candidates.end(), before);
  std::copy(candidates.begin(), candidates.begin() + k, out);
}

void route_softmax(const RoutingConfig& config, const float* logits, int32_t* ids, float* weights,
                   std::vector<int32_t>& candidates) {
  const int E = config.num_experts, K = config.top_k;
  candidates.resize(static_cast<size_t>(E));
  std::iota(candidates.begin(), candidates.end(), 0);
  top_k_indices(logits, candidates, K, ids);
  const double top = logits[ids[0]];  // the maximum over all experts
  if (config.method == RoutingMethod::kSoftmaxTopk) {
    double total = 0.0;
    for (int e = 0; e < E; ++e) total += std::exp(static_cast<double>(logits[e]) - top);
    for (int k = 0; k < K; ++k) weights[k] = static_cast<float>(std::exp(logits[ids[k]] - top) / total);
    return;
  }
  // kSoftmaxTopkRenorm and kTopkSoftmax: the softmax over the selected k.
  double total = 0.0;
  for (int k = 0; k < K; ++k) total += std::exp(static_cast<double>(logits[ids[k]]) - top);
  for (int k = 0; k < K; ++k) weights[k] = static_cast<float>(std::exp(logits[ids[k]] - top) / total);
}

void route_sigmoid_grouped(const RoutingConfig& config, const float* logits, const float* bias, int32_t* ids,
                           float* weights, std::vector<float>& sig, std::vector<float>& biased,
                           std::vector<int32_t>& candidates) {
  const int E = config.num_experts, K = config.top_k;
  const int groups = config.n_group, group_size = E / groups;
  sig.resize(static_cast<size_t>(E));
  biased.resize(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) {
    sig[e] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(logits[e]))));
    biased[e] = sig[e] + (bias ? bias[e] : 0.0f);
  }
  // Group scores: the sum of the two largest biased scores of each group, in fp32.
  std::vector<float> group_score(static_cast<size_t>(groups));
  for (int g = 0; g < groups; ++g) {
    float first = -INFINITY, second = -INFINITY;
    for (int e = g * group_size; e < (g + 1) * group_size; ++e) {
      if (biased[e] > first) {
        second = first;
        first = biased[e];
      } else if (biased[e] > second) {
        second = biased[e];
      }
    }
    group_score[g] = first + second;
  }
  std::vector<int32_t> group_ids(static_cast<size_t>(groups));
  std::iota(group_ids.begin(), group_ids.end(), 0);
  std::vector<int32_t> kept(static_cast<size_t>(config.topk_group));
  top_k_indices(group_score.data(), group_ids, config.topk_group, kept.data());
  std::sort(kept.begin(), kept.end());
  candidates.clear();
  for (int32_t g : kept) {
    for (int e = g * group_size; e < (g + 1) * group_size; ++e) candidates.push_back(e);
  }
  top_k_indices(biased.data(), candidates, K, ids);
  double total = 0.0;
  for (int k = 0; k < K; ++k) total += sig[ids[k]];
  const double factor = config.routed_scaling_factor;
  for (int k = 0; k < K; ++k) {
    const double s = sig[ids[k]];
    weights[k] = static_cast<float>(config.renormalize ? s / (total + 1e-20) * factor : s * factor);
  }
}

void check_config(const RoutingConfig& c) {
  FP4MOE_CHECK(c.num_experts >= 1 && c.top_k >= 1 && c.top_k <= c.num_experts, "route_reference: top_k ", c.top_k,
               " must be in [1, num_experts=", c.num_experts, "]");
  switch (c.method) {
    case RoutingMethod::kSoftmaxTopk:
    case RoutingMethod::kSoftmaxTopkRenorm:
    case RoutingMethod::kTopkSoftmax:
      return;
    case RoutingMethod::kSigmoidGroupedTopk:
      FP4MOE_CHECK(c.n_group >= 1 && c.num_experts % c.n_group == 0 && c.num_experts / c.n_group >= 2,
                   "route_reference: n_group ", c.n_group, " must divide num_experts ", c.num_experts,
                   " into groups of at least 2 experts");
      FP4MOE_CHECK(c.topk_group >= 1 && c.topk_group <= c.n_group, "route_reference: topk_group ", c.topk_group,
                   " must be in [1, n_group=", c.n_group, "]");
      FP4MOE_CHECK(static_cast<int64_t>(c.topk_group) * (c.num_experts / c.n_group) >= c.top_k,
                   "route_reference: topk_group=", c.topk_group, " groups of ", c.num_experts / c.n_group,
                   " experts cannot hold top_k=", c.top_k);
      FP4MOE_CHECK(std::isfinite(c.routed_scaling_factor) && c.routed_scaling_factor > 0.0f,
                   "route_reference: routed_scaling_factor must be finite and > 0, got ", c.routed_scaling_factor);
      return;
  }
  fail("route_reference: unknown routing method value ", static_cast<int>(c.method));
}

}  // namespace

namespace detail {

void route_rows(const RoutingConfig& config, std::span<const float> logits, int64_t tokens,
                const float* correction_bias, std::span<const int64_t> rows, std::span<int32_t> topk_ids,
                std::span<float> topk_weights) {
  check_config(config);
  const int64_t E = config.num_experts, K = config.top_k;
  FP4MOE_CHECK(tokens >= 0, "route_reference: negative token count ", tokens);
  FP4MOE_CHECK(static_cast<int64_t>(logits.size()) == tokens * E, "route_reference: router logits have ",
               logits.size(), " values, expected tokens (", tokens, ") x experts (", E, ") = ", tokens * E);
  FP4MOE_CHECK(static_cast<int64_t>(topk_ids.size()) == tokens * K, "route_reference: topk_ids has ", topk_ids.size(),
               " entries, expected tokens (", tokens, ") x top_k (", K, ") = ", tokens * K);
  FP4MOE_CHECK(static_cast<int64_t>(topk_weights.size()) == tokens * K, "route_reference: topk_weights has ",
               topk_weights.size(), " entries, expected ", tokens * K);
  const bool grouped = config.method == RoutingMethod::kSigmoidGroupedTopk;
  if (grouped && correction_bias) {
    for (int64_t e = 0; e < E; ++e) {
      FP4MOE_CHECK(std::isfinite(correction_bias[e]), "route_reference: correction bias of expert ", e, " is ",
                   correction_bias[e], "; it must be finite");
    }
  }
  std::vector<int32_t> candidates;
  std::vector<float> sig, biased;
  const int64_t n = rows.empty() ? tokens : static_cast<int64_t>(rows.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = rows.empty() ? i : rows[i];
    FP4MOE_CHECK(t >= 0 && t < tokens, "route_reference: row ", t, " is outside [0, ", tokens, ")");
    const float* row = logits.data() + t * E;
    for (int64_t e = 0; e < E; ++e) {
      FP4MOE_CHECK(std::isfinite(row[e]), "route_reference: router logit of token ", t, ", expert ", e, " is ", row[e],
                   "; logits must be finite");
    }
    int32_t* ids = topk_ids.data() + t * K;
    float* weights = topk_weights.data() + t * K;
    if (grouped) {
      route_sigmoid_grouped(config, row, correction_bias, ids, weights, sig, biased, candidates);
    } else {
      route_softmax(config, row, ids, weights, candidates);
    }
  }
}

}  // namespace detail

void route_reference(const RoutingConfig& config, std::span<const float> logits, int64_t tokens,
                     const float* correction_bias, std::span<int32_t> topk_ids, std::span<float> topk_weights) {
  detail::route_rows(config, logits, tokens, correction_bias, {}, topk_ids, topk_weights);
}

}  // namespace fp4moe
