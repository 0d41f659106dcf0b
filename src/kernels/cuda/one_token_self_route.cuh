// One token (decode) routed inside the W4A16 GEMM1 of the sm80 pipeline (grouped_gemm_nvfp4w_bf16_sm80_kernel.cuh,
// its SELF_ROUTE instances): no route/align kernel before it.
// Inputs: the token's router logits (and correction bias), the routing config, the route buffers.
// Warp 0 of every GEMM1 CTA routes the token with the routing kernel's code (moe_route_device.cuh,
// scratch in its own weight ring, before its first copy) and shares the slots with the CTA's other
// warps; each takes the expert of its M tile: with one token each routed expert holds one sorted row, so
// tile y is the y-th lowest routed expert and its row is y. The CTAs of the grid's last row (past every
// routed tile) write the route buffers exactly as launch_moe_route_align writes them for one token (ids,
// weights, per-expert counts and offsets, the sorted slots, each slot's row, the tile list and count), for
// GEMM2 and the combine after it.
// Why: at one token of Qwen3.5-397B on the H200 the route+align kernel added 6.0 of the layer's 43.3 us;
// routed in GEMM1's CTAs the layer takes 41.0 (docs/perf/2026-12-01-h200-r15.md).
// Requires E <= route_device::kMaxExperts and K <= 32 (check_cuda_routing_config), tokens = 1.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/moe_route_device.cuh"

namespace fp4moe {
namespace one_token {

// The routing of the token and the route buffers to write (device pointers).
struct SelfRouteParams {
  route_device::RouteParams route;  // tokens = 1; ids / weights: the route buffers' topk arrays
  int32_t* expert_counts;
  int32_t* expert_offsets;
  int32_t* sorted_slots;
  int32_t* slot_rows;
  int32_t* tile_expert;
  int32_t* tile_row_begin;
  int32_t* num_tiles;
};
// The kernel argument of the instances that read their tiles from the route buffers.
struct NoSelfRoute {};

// Shared-memory scratch of one warp's routing: score and value [E] (route_token_warp), ids and weights [K].
inline constexpr size_t kScratchBytes = (2 * route_device::kMaxExperts + 2 * route_device::kMaxTopK) * sizeof(float);

// Lane k < K: slot k of the token (expert, weight, sorted row = its rank among the routed experts).
struct TokenSlot {
  int expert;
  float weight;
  int rank;
  bool routed;  // expert in [0, E) (an id outside it is routed nowhere, as in the align)
};

// All 32 lanes of a warp. scratch: kScratchBytes of this warp's shared memory, free again on return.
// weights_needed false (warp-uniform): the selection only, every slot's weight 0 (a CTA holding a tile
// needs its expert, not the weights; only the route buffers' writers do).
__device__ __forceinline__ TokenSlot route_one_token(const SelfRouteParams& r, uint8_t* scratch, bool weights_needed) {
  const int lane = threadIdx.x % 32, E = r.route.num_experts, K = r.route.top_k;
  float* score = reinterpret_cast<float*>(scratch);
  float* value = score + E;
  int32_t* ids = reinterpret_cast<int32_t*>(value + E);
  float* weights = reinterpret_cast<float*>(ids + route_device::kMaxTopK);
  route_device::route_token_warp(r.route, 0, score, value, ids, weights, weights_needed);
  __syncwarp();
  TokenSlot s;
  s.expert = lane < K ? ids[lane] : -1;
  s.weight = weights_needed && lane < K ? weights[lane] : 0.0f;
  s.routed = s.expert >= 0 && s.expert < E;
  __syncwarp();  // the scratch is read
  // The routed experts are distinct (top-k), so a slot's sorted row is the count of routed experts below it.
  int rank = 0;
  for (int j = 0; j < K; ++j) {
    const int e = __shfl_sync(0xFFFFFFFFu, s.expert, j);
    rank += e >= 0 && e < E && e < s.expert;
  }
  s.rank = rank;
  return s;
}

// The expert of M tile `tile` (warp-uniform), or -1 past the routed experts.
__device__ __forceinline__ int tile_expert(const TokenSlot& s, int tile) {
  const unsigned hit = __ballot_sync(0xFFFFFFFFu, s.routed && s.rank == tile);
  const int expert = __shfl_sync(0xFFFFFFFFu, s.expert, hit ? __ffs(hit) - 1 : 0);
  return hit ? expert : -1;
}

// One warp of CTA `part` of `parts` (the GEMM grid's last row of CTAs, past every routed tile): its share
// of the route buffers, as launch_moe_route_align writes them for one token (tiles of one row). Part 0
// writes the slots, the tiles and the totals; every part writes the counts and offsets of its 32-expert
// chunks (spread so that no CTA holding a tile, and no single CTA, spends its start on them).
__device__ __forceinline__ void write_route_buffers(const SelfRouteParams& r, const TokenSlot& s, int part, int parts) {
  const int lane = threadIdx.x % 32, E = r.route.num_experts, K = r.route.top_k;
  if (part == 0) {
    const int routed = __popc(__ballot_sync(0xFFFFFFFFu, s.routed));
    if (lane < K) {
      r.route.ids[lane] = s.expert;
      r.route.weights[lane] = s.weight;
      r.slot_rows[lane] = s.routed ? s.rank : -1;
      if (s.routed) {
        r.sorted_slots[s.rank] = lane;
        r.tile_expert[s.rank] = s.expert;
        r.tile_row_begin[s.rank] = s.rank;
      }
    }
    if (lane == 0) *r.num_tiles = routed, r.expert_offsets[E] = routed;
  }
  // Expert x: its first sorted row is the number of routed experts below it; it holds one row or none.
  for (int x0 = 32 * part; x0 < E; x0 += 32 * parts) {
    const int x = x0 + lane;
    int below = 0, count = 0;
    for (int j = 0; j < K; ++j) {
      const int e = __shfl_sync(0xFFFFFFFFu, s.expert, j);
      below += e >= 0 && e < E && e < x;
      count += e == x;
    }
    if (x < E) r.expert_offsets[x] = below, r.expert_counts[x] = count;
  }
}

}  // namespace one_token
}  // namespace fp4moe
