// Per-warp top-k routing of one token, shared by the routing kernel of the pipeline
// (moe_route_permute.cu) and the fused decode kernels (moe_fused_decode_sm80.cu). Selection on the
// pre-activation scores (raw logits, or fp32(sigmoid) + bias for sigmoid_grouped_topk), ties to the
// lower expert index, weights in double rounded once to fp32: the steps of routing_reference.cpp, so
// the ids match the CPU reference exactly. Requires E <= 1024 (32 lane-strided experts per lane) and
// K <= 32.
#pragma once
#include <cstdint>

#include "kernels/moe_problem.h"

namespace fp4moe {
namespace route_device {

inline constexpr int kMaxExperts = 1024;  // 32 lane-strided experts per lane (exclusion bit mask)
inline constexpr int kMaxTopK = 32;       // one selected expert per lane

struct RouteParams {  // logits/bias: device; ids/weights: the routing kernel's outputs
  const float* logits;
  const float* bias;
  int32_t* ids;
  float* weights;
  int64_t tokens;
  int num_experts;
  int top_k;
  int method;  // RoutingMethod
  int n_group;
  int topk_group;
  float scaling;
  bool renormalize;
};

// Candidate (score, index) is better than (best, best_index): higher score, ties to the lower index.
// An index of -1 is "none yet", beaten by anything (so NaN scores still yield a valid expert).
__device__ __forceinline__ bool better(float score, int index, float best, int best_index) {
  if (index < 0) return false;
  if (best_index < 0) return true;
  return score > best || (score == best && index < best_index);
}

__device__ __forceinline__ void warp_argmax(float& score, int& index) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other_score = __shfl_xor_sync(0xFFFFFFFFu, score, offset);
    const int other_index = __shfl_xor_sync(0xFFFFFFFFu, index, offset);
    if (better(other_score, other_index, score, index)) {
      score = other_score;
      index = other_index;
    }
  }
}

__device__ __forceinline__ double warp_sum(double value) {
  // Fixed butterfly order: deterministic.
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xFFFFFFFFu, value, offset);
  return value;
}

inline RouteParams make_route_params(const RoutingConfig& config, const float* logits, const float* bias,
                                     int64_t tokens, int32_t* ids, float* weights) {
  return RouteParams{logits, bias, ids, weights, tokens, config.num_experts, config.top_k,
                     static_cast<int>(config.method), config.n_group, config.topk_group,
                     config.routed_scaling_factor, config.renormalize};
}

// Routes one token with one warp (all 32 lanes call it). score/value: 2 * E floats of scratch owned by
// the warp (shared memory). Writes ids_out[k] and weights_out[k] for k < K (global or shared memory).
__device__ __forceinline__ void route_token_warp(const RouteParams& p, int64_t token, float* score, float* value,
                                                 int32_t* ids_out, float* weights_out) {
  const int lane = threadIdx.x % 32;
  const int E = p.num_experts;
  const float* row = p.logits + token * E;
  const bool sigmoid = p.method == static_cast<int>(RoutingMethod::kSigmoidGroupedTopk);
  for (int e = lane; e < E; e += 32) {
    const float l = row[e];
    if (sigmoid) {
      // Sigmoid in double, rounded once (as route_reference): identical selection scores.
      const float s = static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(l))));
      value[e] = s;
      score[e] = __fadd_rn(s, p.bias ? p.bias[e] : 0.0f);
    } else {
      value[e] = l;
      score[e] = l;
    }
  }
  __syncwarp();

  // Group restriction (sigmoid_grouped_topk): keep the topk_group groups with the largest sum of their
  // top-2 selection scores; experts of other groups are excluded (mask in `allowed`, lane-strided bits).
  uint32_t excluded = 0;  // bit j: expert lane + 32 j is out of the selection
  if (sigmoid && p.n_group > 1) {
    const int group_size = E / p.n_group;
    float group_score = 0.0f;
    int group_index = -1;
    if (lane < p.n_group) {
      float top1 = 0.0f, top2 = 0.0f;
      int i1 = -1, i2 = -1;
      for (int e = lane * group_size; e < (lane + 1) * group_size; ++e) {
        const float s = score[e];
        if (better(s, e, top1, i1)) {
          top2 = top1, i2 = i1;
          top1 = s, i1 = e;
        } else if (better(s, e, top2, i2)) {
          top2 = s, i2 = e;
        }
      }
      group_score = i2 >= 0 ? __fadd_rn(top1, top2) : top1;
      group_index = lane;
    }
    uint32_t kept_groups = 0;
    for (int round = 0; round < p.topk_group; ++round) {
      float best = group_score;
      int best_index = (kept_groups >> lane) & 1u ? -1 : group_index;
      warp_argmax(best, best_index);
      if (best_index >= 0) kept_groups |= 1u << best_index;
    }
    for (int j = 0; lane + 32 * j < E; ++j) {
      const int group = (lane + 32 * j) / group_size;
      if (!((kept_groups >> group) & 1u)) excluded |= 1u << j;
    }
  }

  // Top-k: K rounds of warp argmax over the lane-strided experts.
  int my_id = -1;  // lane k < K keeps slot k
  float my_value = 0.0f;
  float first_value = 0.0f;
  for (int k = 0; k < p.top_k; ++k) {
    float best = 0.0f;
    int best_index = -1;
    for (int j = 0; lane + 32 * j < E; ++j) {
      const int e = lane + 32 * j;
      if (!((excluded >> j) & 1u) && better(score[e], e, best, best_index)) {
        best = score[e];
        best_index = e;
      }
    }
    warp_argmax(best, best_index);
    if (best_index >= 0 && (best_index % 32) == lane) excluded |= 1u << (best_index / 32);
    const float v = best_index >= 0 ? value[best_index] : 0.0f;
    if (k == 0) first_value = v;
    if (lane == k) {
      my_id = best_index;
      my_value = v;
    }
  }

  // Weights, in double and rounded once to fp32, as route_reference computes them.
  float w = 0.0f;
  const bool mine = lane < p.top_k;
  switch (static_cast<RoutingMethod>(p.method)) {
    case RoutingMethod::kSoftmaxTopk: {
      // The maximum over all logits is the top-1 logit (selection is on the logits).
      double partial = 0.0;
      for (int e = lane; e < E; e += 32) partial += exp(static_cast<double>(value[e]) - first_value);
      const double total = warp_sum(partial);
      w = mine ? static_cast<float>(exp(static_cast<double>(my_value) - first_value) / total) : 0.0f;
      break;
    }
    case RoutingMethod::kSoftmaxTopkRenorm:
    case RoutingMethod::kTopkSoftmax: {  // equal in exact arithmetic: the softmax over the selected k
      const double ex = mine ? exp(static_cast<double>(my_value) - first_value) : 0.0;
      const double total = warp_sum(ex);
      w = mine ? static_cast<float>(ex / total) : 0.0f;
      break;
    }
    case RoutingMethod::kSigmoidGroupedTopk: {
      const double s = mine ? static_cast<double>(my_value) : 0.0;
      const double total = warp_sum(s);
      const double factor = p.scaling;
      w = mine ? static_cast<float>(p.renormalize ? s / (total + 1e-20) * factor : s * factor) : 0.0f;
      break;
    }
  }
  if (mine) {
    ids_out[lane] = my_id;
    weights_out[lane] = w;
  }
}

}  // namespace route_device
}  // namespace fp4moe
