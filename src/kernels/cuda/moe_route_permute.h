// Routing, permutation and combine for the CUDA MoE pipelines (cuda.sm80.pipeline.v1 and the cuBLAS
// baseline of `fp4moe bench moe`). Stable API: other code launches these directly.
//
// Data flow for T tokens, top-k K, E experts ("slot" = flat index t*K + k):
//   launch_moe_route    logits [T, E] fp32 -> topk_ids [T, K] int32, topk_weights [T, K] fp32
//   launch_moe_align    topk_ids -> per-expert counts and offsets, the slots sorted by expert (stable by
//                       slot, so by token), each slot's sorted row, and a list of M tiles (MTile, one
//                       expert per tile). Rows are stored compactly: expert e owns sorted rows
//                       [offsets[e], offsets[e+1]); a tile is (expert, first row) and ends at
//                       min(first + rows, offsets[e+1]), which is the "segment padded to the M tile" (or
//                       at offsets[e+1] when its last tile takes a tail, see MTile).
//   launch_moe_gather   hidden [T, H] BF16 -> rows [T*K, H] BF16 in sorted order; W4A4: each row is
//                       quantized to NVFP4 with its expert's input scale and dequantized (exact in BF16,
//                       the scale itself is NOT multiplied in: the GEMM epilogue does that)
//   launch_moe_combine  expert outputs [T*K, H] (fp32 or BF16, sorted order) -> out [T, H] BF16:
//                       y = sum over k = 0..K-1, in slot order, of weight_k * o_k in fp32, rounded once.
// Everything is deterministic (no atomics whose order affects a result), allocation-free, free of host
// synchronization and capturable in a CUDA graph. All pointers are device pointers.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/moe_problem.h"

namespace fp4moe {

// Device buffers of the routing and alignment stage (carved from one workspace).
struct MoeRouteBuffers {
  int32_t* topk_ids = nullptr;        // [T, K]
  float* topk_weights = nullptr;      // [T, K]
  int32_t* expert_counts = nullptr;   // [E] slots routed to each expert
  int32_t* expert_offsets = nullptr;  // [E + 1] exclusive prefix sum of expert_counts (offsets[E] = T*K)
  int32_t* sorted_slots = nullptr;    // [T*K] slot held by each sorted row
  int32_t* slot_rows = nullptr;       // [T*K] sorted row of each slot (inverse of sorted_slots)
  int32_t* tile_expert = nullptr;     // [max_tiles] expert of each M tile
  int32_t* tile_row_begin = nullptr;  // [max_tiles] first sorted row of each M tile
  int32_t* num_tiles = nullptr;       // [1] number of valid M tiles
  int32_t* chunk_rows = nullptr;      // [chunks, E] align scratch above 2048 slots (512-slot chunks)
};

// The M tiles launch_moe_align emits for each expert: tiles of `rows` rows, except that an expert's last
// tile also takes a tail of up to `tail_rows` rows past a full tile, so that an expert with k x rows + r
// rows (k >= 1, 1 <= r <= tail_rows) gets k tiles instead of k + 1, and a GEMM that can widen its last
// tile decodes the expert's weights k times instead of k + 1. A tile starting at row `first` of an expert
// ending at `end` then holds end - first rows when that is at most rows + tail_rows, else `rows` (every
// other tile has more than rows + tail_rows rows left). 0 <= tail_rows <= rows.
struct MTile {
  int rows = 0;
  int tail_rows = 0;
};

// Upper bound on the number of M tiles for any routing: ceil(T*K / tile_m) + min(E, T*K) (tails only
// lower the count).
int64_t moe_max_tiles(int64_t tokens, int top_k, int num_experts, int tile_m);

// Bytes of workspace for MoeRouteBuffers at max_tokens; tile_m = the smallest M tile that will be used.
size_t moe_route_workspace_bytes(int64_t max_tokens, int top_k, int num_experts, int tile_m);
// Carves the buffers from `workspace` (256-byte aligned pieces); same arguments as above.
MoeRouteBuffers carve_moe_route_workspace(void* workspace, int64_t max_tokens, int top_k, int num_experts,
                                          int tile_m);

// Top-k routing for every RoutingMethod (kernels/moe_problem.h): selection on the pre-activation
// scores (raw logits for the softmax methods; sigmoid + correction_bias for sigmoid_grouped_topk),
// ties to the lower expert index, slots in descending selection score; weights computed in double and
// rounded once to fp32, the steps of route_reference (kernels/cpu/routing_reference.cpp). correction_bias may be null (zeros). Requires K <= 32 and E <= 1024.
// Throws Error unless the CUDA routing supports `config` (E <= 1024, K <= 32, group settings valid).
void check_cuda_routing_config(const RoutingConfig& config);

void launch_moe_route(const RoutingConfig& config, const float* router_logits, const float* correction_bias,
                      int64_t tokens, int32_t* topk_ids, float* topk_weights, cudaStream_t stream);

// launch_moe_route then launch_moe_align, the same results; up to kFusedRouteAlignMaxTokens tokens
// (decode) as one kernel (one CTA routes and aligns: a launch and a global round trip less).
inline constexpr int64_t kFusedRouteAlignMaxTokens = 8;
void launch_moe_route_align(const RoutingConfig& config, const float* router_logits, const float* correction_bias,
                            const MoeRouteBuffers& buffers, int64_t tokens, MTile tile, cudaStream_t stream);

// Counting sort of the T*K slots by expert (stable by slot) and the M-tile list of `tile` (rows >= 1).
// Expert ids outside [0, E) are treated as routed nowhere (their slot gets sorted row -1 and the
// combine skips it); they cannot come from launch_moe_route.
void launch_moe_align(const MoeRouteBuffers& buffers, int64_t tokens, int top_k, int num_experts, MTile tile,
                      cudaStream_t stream);

// rows[r, :] = hidden[sorted_slots[r] / K, :] for r < T*K (rows past the routed count are zeroed).
// input_scales [E] (device) non-null selects W4A4: NVFP4 quantize-dequantize with
// input_scales[topk_ids[slot]] (ModelOpt rule: true division, RNE, block scale clamped to [2^-9, 448],
// all-zero block -> scale 1.0), bit-identical to quantize_dequantize_activations / input_scale.
// hidden_size % 16 == 0.
void launch_moe_gather(const void* hidden_bf16, const MoeRouteBuffers& buffers, int64_t tokens, int top_k,
                       int num_experts, int64_t hidden_size, const float* input_scales, void* rows_bf16,
                       cudaStream_t stream);

// out[t, :] = bf16(sum_k topk_weights[t, k] * expert_out[slot_rows[t*K + k], :]); fp32 or BF16 inputs.
// route_final_at_launch: the route buffers (weights, slot rows) were final before this launch began, a
// launch lying between their writer and it (the expert GEMMs): the combine then reads them before its
// programmatic-launch wait. False when the kernel right before wrote them.
void launch_moe_combine(const float* expert_out, const MoeRouteBuffers& buffers, int64_t tokens, int top_k,
                        int64_t hidden_size, void* out_bf16, bool route_final_at_launch, cudaStream_t stream);
void launch_moe_combine_bf16(const void* expert_out_bf16, const MoeRouteBuffers& buffers, int64_t tokens,
                             int top_k, int64_t hidden_size, void* out_bf16, bool route_final_at_launch,
                             cudaStream_t stream);

// SwiGLU for GEMM1 outputs kept as [rows, 2I] fp32 (gate columns [0, I), up [I, 2I)), as a library GEMM
// produces them: h = bf16(silu(gate) * up) with silu(g) = g / (1 + expf(-g)) in fp32. rows = T*K.
void launch_moe_swiglu(const float* gate_up, int64_t rows, int64_t inter, void* h_bf16, cudaStream_t stream);

}  // namespace fp4moe
