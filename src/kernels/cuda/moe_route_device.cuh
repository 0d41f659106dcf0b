// Per-warp top-k routing of one token, shared by the routing kernel of the pipeline
// (moe_route_permute.cu) and the fused decode kernels (moe_fused_decode_sm80.cu). Selection on the
// pre-activation scores (raw logits, or fp32(sigmoid) + bias for sigmoid_grouped_topk), ties to the
// lower expert index, weights in double rounded once to fp32: the steps of routing_reference.cpp, so
// the ids match the CPU reference exactly. Requires E <= 1024 (32 lane-strided experts per lane) and
// K <= 32. The top-k rounds compare one 64-bit key per candidate (selection_key): branch-free, so a
// round costs a few instructions per expert and five shuffles (the compare-and-branch version took
// ~16 us for one token of Qwen3.5-397B in Nsight Compute, most of the pipeline's route stage).
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

// Selection key of candidate (score, index): a larger key is a better candidate, with the CPU
// reference's order on finite scores (higher score; equal scores, -0 == +0 included, to the lower index). NaN
// keys sort below every number but above 0, which means "no candidate". index < 2^31 - 1.
__device__ __forceinline__ uint64_t selection_key(float score, int index) {
  uint32_t bits = __float_as_uint(score);
  if (bits == 0x80000000u) bits = 0;                           // -0 ties with +0, as the float compare
  bits = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;     // unsigned order = float order
  if (score != score) bits = 0;                                 // NaN: below -inf
  return (static_cast<uint64_t>(bits) << 32) | (0xFFFFFFFEu - static_cast<uint32_t>(index));
}

__device__ __forceinline__ int selection_index(uint64_t key) {
  return key == 0 ? -1 : static_cast<int>(0xFFFFFFFEu - static_cast<uint32_t>(key));
}

__device__ __forceinline__ uint64_t warp_max_key(uint64_t key) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const uint64_t other = __shfl_xor_sync(0xFFFFFFFFu, key, offset);
    key = other > key ? other : key;
  }
  return key;
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
  // top-2 selection scores; experts of other groups are excluded (mask in `excluded`, lane-strided bits).
  uint32_t excluded = 0;  // bit j: expert lane + 32 j is out of the selection
  if (sigmoid && p.n_group > 1) {
    const int group_size = E / p.n_group;
    uint64_t group_key = 0;  // lane g < n_group: group g's (top-2 sum, g)
    if (lane < p.n_group) {
      uint64_t key1 = 0, key2 = 0;  // the group's best two experts
      for (int e = lane * group_size; e < (lane + 1) * group_size; ++e) {
        const uint64_t key = selection_key(score[e], e);
        key2 = key > key1 ? key1 : (key > key2 ? key : key2);
        key1 = key > key1 ? key : key1;
      }
      const int i1 = selection_index(key1), i2 = selection_index(key2);
      if (i1 >= 0) group_key = selection_key(i2 >= 0 ? __fadd_rn(score[i1], score[i2]) : score[i1], lane);
    }
    uint32_t kept_groups = 0;
    for (int round = 0; round < p.topk_group; ++round) {
      const int best_group = selection_index(warp_max_key((kept_groups >> lane) & 1u ? 0 : group_key));
      if (best_group >= 0) kept_groups |= 1u << best_group;
    }
    for (int j = 0; lane + 32 * j < E; ++j) {
      const int group = (lane + 32 * j) / group_size;
      if (!((kept_groups >> group) & 1u)) excluded |= 1u << j;
    }
  }

  // Top-k: K rounds of a warp max over the lane-strided experts' keys. Four running maxima per lane
  // keep the compares independent (the max of keys is associative: any order gives the same key).
  int my_id = -1;  // lane k < K keeps slot k
  const int per_lane = (E - lane + 31) / 32;  // experts lane, lane + 32, ... below E
  for (int k = 0; k < p.top_k; ++k) {
    uint64_t best[4] = {0, 0, 0, 0};
    for (int j0 = 0; j0 < per_lane; j0 += 4) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int j = j0 + q, e = lane + 32 * j;
        const uint64_t key = j < per_lane && !((excluded >> j) & 1u) ? selection_key(score[e], e) : 0;
        best[q] = key > best[q] ? key : best[q];
      }
    }
    best[0] = best[0] > best[1] ? best[0] : best[1];
    best[2] = best[2] > best[3] ? best[2] : best[3];
    const int best_index = selection_index(warp_max_key(best[0] > best[2] ? best[0] : best[2]));
    if (best_index >= 0 && (best_index % 32) == lane) excluded |= 1u << (best_index / 32);
    if (lane == k) my_id = best_index;
  }
  const float my_value = my_id >= 0 ? value[my_id] : 0.0f;
  const float first_value = __shfl_sync(0xFFFFFFFFu, my_value, 0);  // slot 0's value

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
