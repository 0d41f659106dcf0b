// Per-warp top-k routing of one token, shared by the routing kernel of the pipeline
// (moe_route_permute.cu) and the fused decode kernels (moe_fused_decode_sm80.cu). Selection on the
// pre-activation scores (raw logits, or fp32(sigmoid) + bias for sigmoid_grouped_topk), ties to the
// lower expert index, weights in double rounded once to fp32: the steps of routing_reference.cpp, so
// the ids match the CPU reference exactly. Requires E <= 1024 (32 lane-strided experts per lane) and
// K <= 32. Each lane keeps its experts' ordered score bits in registers (4, 8, 16 or 32 of them, by E);
// a top-k round is a tree max over them and two warp reductions (redux.sync: the max bits, then the
// lowest expert index holding them). Why: one warp routes a token, with nothing to hide latency behind; the earlier rounds
// (a 64-bit key rebuilt from shared memory per expert, five 64-bit shuffle steps) took ~11 us of the
// ~14 us route kernel for one token of Qwen3.5-397B in Nsight Compute, ahead of every weight byte.
#pragma once
#include <cstdint>

#include "kernels/cuda/route_score_key.h"
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

inline constexpr int kExpertsPerLane = kMaxExperts / 32;

// ordered_score_bits (route_score_key.h): the key each round compares.

// Selection key of candidate (score, index): ordered bits, then the lower index. index < 2^31 - 1.
__device__ __forceinline__ uint64_t selection_key(float score, int index) {
  return (static_cast<uint64_t>(ordered_score_bits(score)) << 32) | (0xFFFFFFFEu - static_cast<uint32_t>(index));
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

// The parts of route_token_warp that only some callers' paths run, kept out of line (__noinline__, by
// value: no kernel-parameter copies): sigmoid_grouped_topk's scores and group restriction, and the
// weights (the fused decode's launch 1 at 1-3 tokens needs them in one CTA only). Inline, their code lies
// between the instructions every CTA runs, and the fused decode's launch 1 at one token pays for
// fetching code it skips (docs/perf/2026-12-01-h200-r22.md).

// Lane's experts e = lane, lane + 32, ...: value[e] = fp32(sigmoid(logit)) (in double, rounded once, as
// route_reference: identical selection scores); score[e] = value[e] + bias[e].
inline __device__ __noinline__ void sigmoid_scores(const float* bias, int E, int lane, float* score, float* value) {
  for (int e = lane; e < E; e += 32) {
    const float s = static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(value[e]))));
    value[e] = s;
    score[e] = __fadd_rn(s, bias ? bias[e] : 0.0f);
  }
}

// Group restriction (sigmoid_grouped_topk): keep the topk_group groups with the largest sum of their
// top-2 selection scores; the other groups' experts leave the selection. Bit j of the result: expert
// lane + 32 j has left it. All lanes call it (warp shuffles); `score` complete for every lane.
inline __device__ __noinline__ uint32_t grouped_exclusions(const float* score, int E, int n_group, int topk_group,
                                                          int lane) {
  const int group_size = E / n_group;
  uint64_t group_key = 0;  // lane g < n_group: group g's (top-2 sum, g)
  if (lane < n_group) {
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
  for (int round = 0; round < topk_group; ++round) {
    const int best_group = selection_index(warp_max_key((kept_groups >> lane) & 1u ? 0 : group_key));
    if (best_group >= 0) kept_groups |= 1u << best_group;
  }
  uint32_t out = 0;
  for (int j = 0; lane + 32 * j < E; ++j)
    if (!((kept_groups >> ((lane + 32 * j) / group_size)) & 1u)) out |= 1u << j;
  return out;
}

// Lane k < top_k: the weight of its selected expert my_id (-1: none), in double and rounded once to fp32,
// as route_reference computes it; 0 on the other lanes. All lanes call it (warp sums); `value` holds the
// logits (softmax methods) or fp32 sigmoids (sigmoid_grouped_topk) of all E experts.
inline __device__ __noinline__ float route_weight(int method, int top_k, int E, float scaling, bool renormalize,
                                                  const float* value, int my_id, int lane) {
  const float my_value = my_id >= 0 ? value[my_id] : 0.0f;
  const float first_value = __shfl_sync(0xFFFFFFFFu, my_value, 0);  // slot 0's value
  const bool mine = lane < top_k;
  switch (static_cast<RoutingMethod>(method)) {
    case RoutingMethod::kSoftmaxTopk: {
      // The maximum over all logits is the top-1 logit (selection is on the logits).
      double partial = 0.0;
      for (int e = lane; e < E; e += 32) partial += exp(static_cast<double>(value[e]) - first_value);
      const double total = warp_sum(partial);
      return mine ? static_cast<float>(exp(static_cast<double>(my_value) - first_value) / total) : 0.0f;
    }
    case RoutingMethod::kSoftmaxTopkRenorm:
    case RoutingMethod::kTopkSoftmax: {  // equal in exact arithmetic: the softmax over the selected k
      const double ex = mine ? exp(static_cast<double>(my_value) - first_value) : 0.0;
      const double total = warp_sum(ex);
      return mine ? static_cast<float>(ex / total) : 0.0f;
    }
    case RoutingMethod::kSigmoidGroupedTopk: {
      const double s = mine ? static_cast<double>(my_value) : 0.0;
      const double total = warp_sum(s);
      return mine ? static_cast<float>(renormalize ? s / (total + 1e-20) * scaling : s * scaling) : 0.0f;
    }
  }
  return 0.0f;
}

// select_top_k's hook after each round: all lanes call it with the round k and its winner (-1: none), so
// that a caller can start work that needs only the first winners (the fused decode's early ring prime at
// one token) while the rounds go on. The routing kernel and the pipeline pass none.
struct NoRoundHook {
  __device__ __forceinline__ void operator()(int /*round*/, int /*winner*/) const {}
};

// The selection of one token, for lanes holding kLaneExperts experts each (lane + 32 j, j < kLaneExperts;
// E <= 32 kLaneExperts): stages the logits in `value` (and sigmoid_grouped_topk's scores in `score`) and
// runs the top-k rounds on them in registers; returns lane k's selected expert for k < K (-1: none; -1 on
// the other lanes), calling `hook` after each round. Staging even where the caller needs the experts alone:
// skipping it (r38's patch) gave ptxas room to allocate the fused decode's launch 1 differently, and its
// 32-row K loops grew by 4 and 7 instructions (Qwen3-30B 1.2 % slower; docs/perf/2026-12-06-h200-r39.md).
// The keys without compares, the unbounded loads and the one-compare winner (r38-r40): the routing alone
// 17 % fewer cycles at E = 512 and 256 (r39); with the logits staged, the fused decode 0.996-1.000 at 1-8
// tokens on three models (H100), none slower (docs/perf/2026-12-06-h100-r40.md).
// One instance per size, so that a round's tree max and exclusion masks cover only the experts there are
// (E = 512: 16 per lane, half of kExpertsPerLane), and out of line, so that a kernel fetches the code of
// the one it runs. By value: no kernel-parameter copies. H200, one token, against one 32-expert instance
// for every E (docs/perf/2026-12-02-h200-r29.md): the fused decode 2.0 % faster at Qwen3.5-397B (E = 512),
// 3.5 % at Qwen3-235B (128), 5.8 % at Qwen3.5-35B (256); the pipeline 1.4 % at Qwen3.5-397B.
template <int kLaneExperts, class RoundHook = NoRoundHook>
__device__ __noinline__ int select_top_k(const float* row, const float* bias, int E, int K, bool sigmoid, int n_group,
                                         int topk_group, float* score, float* value, int lane, RoundHook hook = {}) {
  static_assert(kLaneExperts >= 1 && kLaneExperts <= kExpertsPerLane, "32 lane-strided experts at most");
  // The logits first, all loads in flight together (a load-use loop would wait one memory latency per
  // few experts). Where E fills every lane's experts (E = 32 kLaneExperts: every preset's E), the loads
  // need no bounds checks. The 32-expert instance (E above 512) keeps them: without, it took 121
  // registers and launch 1's one-token twin 124, past the fused decode's register fit (r38, sm_90a).
  float logits[kLaneExperts];
  if (kLaneExperts < kExpertsPerLane && E == 32 * kLaneExperts) {
#pragma unroll
    for (int j = 0; j < kLaneExperts; ++j) logits[j] = row[lane + 32 * j];
  } else {
#pragma unroll
    for (int j = 0; j < kLaneExperts; ++j) logits[j] = lane + 32 * j < E ? row[lane + 32 * j] : 0.0f;
  }
  // Staged in `value`: the weights read other lanes' experts there.
#pragma unroll
  for (int j = 0; j < kLaneExperts; ++j)
    if (lane + 32 * j < E) value[lane + 32 * j] = logits[j];
  // This lane's experts' ordered bits, in registers (fully unrolled: static indices): bits[j] is
  // expert lane + 32 j, 0 past E (an arithmetic mask, no predicate). Softmax methods select on the logits
  // themselves (no shared-memory round trip); sigmoid_grouped_topk on fp32(sigmoid) + bias, also kept in
  // `score` for the group sums.
  uint32_t bits[kLaneExperts];
  if (sigmoid) {
    sigmoid_scores(bias, E, lane, score, value);
#pragma unroll
    for (int j = 0; j < kLaneExperts; ++j) bits[j] = lane + 32 * j < E ? ordered_score_bits(score[lane + 32 * j]) : 0u;
  } else {
#pragma unroll
    for (int j = 0; j < kLaneExperts; ++j)
      bits[j] = ordered_score_bits(logits[j]) & static_cast<uint32_t>((lane + 32 * j - E) >> 31);
  }
  __syncwarp();  // `value` (and `score`) complete before any lane reads another lane's experts

  // Bit j of `out`: expert lane + 32 j has left the selection (a group not kept, or already selected).
  // A mask rather than zeroing bits[j]: the compiler turns a store at the winner's j into a dynamically
  // indexed store and moves bits[] to local memory.
  uint32_t out = sigmoid && n_group > 1 ? grouped_exclusions(score, E, n_group, topk_group, lane) : 0u;

  // Top-k: K rounds. A lane's best is a tree max over its bits (lower j, the lower expert, wins ties);
  // the warp's is the max bits, then the lowest expert index among the lanes holding them. The winner is
  // the lane whose own candidate index is that minimum (indices are distinct): one compare.
  int my_id = -1;  // lane k < K keeps slot k
  for (int k = 0; k < K; ++k) {
    uint32_t best_bits[kLaneExperts];
    int best_j[kLaneExperts];
#pragma unroll
    for (int j = 0; j < kLaneExperts; ++j) best_bits[j] = (out >> j) & 1u ? 0u : bits[j], best_j[j] = j;
    // Level `stride`: slot j (a multiple of 2 stride) takes the better of j and j + stride, so slot j
    // always stands for j's experts [j, j + 2 stride), and a strict compare keeps the lower j on ties.
#pragma unroll
    for (int stride = 1; stride < kLaneExperts; stride *= 2) {
#pragma unroll
      for (int j = 0; j + stride < kLaneExperts; j += 2 * stride) {
        const bool upper = best_bits[j + stride] > best_bits[j];
        best_bits[j] = upper ? best_bits[j + stride] : best_bits[j];
        best_j[j] = upper ? best_j[j + stride] : best_j[j];
      }
    }
    const uint32_t top = __reduce_max_sync(0xFFFFFFFFu, best_bits[0]);
    const uint32_t candidate = best_bits[0] == top ? static_cast<uint32_t>(lane + 32 * best_j[0]) : 0xFFFFFFFFu;
    const uint32_t index = __reduce_min_sync(0xFFFFFFFFu, candidate);
    if (lane == k) my_id = top == 0 ? -1 : static_cast<int>(index);
    if (top != 0 && candidate == index) out |= 1u << best_j[0];
    hook(k, top == 0 ? -1 : static_cast<int>(index));
  }
  return my_id;
}

// select_top_k's instances, by E: the smallest that holds every expert.
inline constexpr int kLaneExpertCounts[] = {4, 8, 16, kExpertsPerLane};
static_assert(kLaneExpertCounts[3] * 32 == kMaxExperts, "the largest instance holds kMaxExperts");

// Routes one token with one warp (all 32 lanes call it). score/value: 2 * E floats of scratch owned by
// the warp (shared memory; `score` is used by sigmoid_grouped_topk only). Writes ids_out[k] and weights_out[k] for k < K (global or shared memory).
// weights_needed false (warp-uniform): the selection only; ids_out is written, weights_out is not (a caller
// that needs the experts but not their weights skips the double-precision weights on its critical path).
template <class RoundHook = NoRoundHook>
__device__ __forceinline__ void route_token_warp(const RouteParams& p, int64_t token, float* score, float* value,
                                                 int32_t* ids_out, float* weights_out, bool weights_needed = true,
                                                 RoundHook hook = {}) {
  const int lane = threadIdx.x % 32;
  const int E = p.num_experts;
  const float* row = p.logits + token * E;
  const bool sigmoid = p.method == static_cast<int>(RoutingMethod::kSigmoidGroupedTopk);
  constexpr int k0 = kLaneExpertCounts[0], k1 = kLaneExpertCounts[1], k2 = kLaneExpertCounts[2],
                k3 = kLaneExpertCounts[3];
  const int K = p.top_k, groups = p.n_group, kept = p.topk_group;
  int my_id;
  if (E <= 32 * k0) my_id = select_top_k<k0>(row, p.bias, E, K, sigmoid, groups, kept, score, value, lane, hook);
  else if (E <= 32 * k1) my_id = select_top_k<k1>(row, p.bias, E, K, sigmoid, groups, kept, score, value, lane, hook);
  else if (E <= 32 * k2) my_id = select_top_k<k2>(row, p.bias, E, K, sigmoid, groups, kept, score, value, lane, hook);
  else my_id = select_top_k<k3>(row, p.bias, E, K, sigmoid, groups, kept, score, value, lane, hook);
  if (!weights_needed) {
    if (lane < p.top_k) ids_out[lane] = my_id;
    return;
  }
  const float w = route_weight(p.method, p.top_k, E, p.scaling, p.renormalize, value, my_id, lane);
  const bool mine = lane < p.top_k;
  if (mine) {
    ids_out[lane] = my_id;
    weights_out[lane] = w;
  }
}

}  // namespace route_device
}  // namespace fp4moe
