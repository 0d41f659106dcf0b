// Grouped GEMM over the experts of a MoE layer: out[rows of expert e] = A[rows, K] (BF16, sorted rows)
// x W_e[N, K]^T with W_e NVFP4 in the nvfp4_mma_layout.h layout, dequantized in registers to BF16
// and multiplied with mma.sync m16n8k16 (SM80 and later), fp32 accumulation, tensor scales in the
// fp32 epilogue. The M tiles come from launch_moe_align (moe_route_permute.h).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "kernels/cuda/grouped_gemm_operands.h"
#include "kernels/cuda/moe_route_permute.h"

namespace fp4moe {

// Split-K (decode only): with few rows the N/32 x experts warps cannot fill the GPU, so K may be split
// over up to kMaxKSplits warps of each decode CTA; warp 0 adds the others' fp32 sums in warp order
// (deterministic) from shared memory and runs the epilogue. The splits are the most whose CTAs are all
// resident at once on the device (grouped_gemm_decode_residency).
inline constexpr int kMaxKSplits = 4;
// The decode instances whose residency is counted separately, as their registers differ: one family per
// epilogue (both scale paths; kSwiglu's includes the self-routing instances, counted with the others: on
// their own, 93 registers against 108 on SM90, one token's GEMM1 of Qwen3.5-397B would split 4 ways on the
// H200, which measured slower than 3) and GEMM2's one-row instances (GroupedGemmArgs::one_row_tiles; capped
// so that 10 two-warp CTAs fit an SM: one token's GEMM2 of Qwen3.5-397B, 1280 CTAs, splits 2 ways).
inline constexpr int kDecodeFamilies = 4;
int decode_family(GemmEpilogue epilogue, bool one_row_tiles);
// [family][s]: resident decode CTAs of s warps (s K splits) per SM, the fewest over the family's instances.
struct DecodeResidency {
  int sms = 0;
  int ctas_per_sm[kDecodeFamilies][kMaxKSplits + 1] = {};
};
// Queries `device` (an occupancy query per instance and split count; call at prepare).
DecodeResidency grouped_gemm_decode_residency(int device);
int grouped_gemm_k_splits(int64_t n, int64_t k, int64_t rows, int num_experts, int tile_m,
                          const DecodeResidency& residency, GemmEpilogue epilogue, bool one_row_tiles);

// The 96-row tile's warp layout. kEight: 8 warps of 96 x 16 (48 x 32 for the NVFP4 SwiGLU epilogue, which
// quantizes 16-column blocks of h); two CTAs per SM give 16 warps to hide the dequantization's latency.
// kFour: 4 warps of 96 x 32; each A fragment a warp reads from shared memory feeds twice the mma.sync, so
// the ldmatrix traffic per mma halves (shared memory was the busiest unit, 79 %, under kEight at 4096
// tokens of Qwen3.5-397B on the H200). Since the copies' addresses are precomputed, kFour is the faster
// one at every measured size (the pipeline backend's choice; kEight stays for measurements).
enum class Tile96Warps { kEight, kFour };

// One token routed inside the W4A16 GEMM1 on the decode tile (one_token_self_route.cuh): every CTA routes
// the token itself and the grid's last row writes the route buffers as launch_moe_route_align would, so no
// route/align kernel runs before it. A is then the token's hidden row [1, K] (a_slots null), and the grid
// needs a row of CTAs past the top_k tiles (max_tiles > top_k; moe_max_tiles gives top_k + 1).
struct GemmSelfRouting {
  RoutingConfig config;
  const float* router_logits = nullptr;    // [1, E] fp32
  const float* correction_bias = nullptr;  // [E] or null
};

// The operands in this kernel's terms: w_packed [E][N/8][K/128][512] (nvfp4_mma_layout.h), w_scales
// [E][N/8][K/128][64]; N and K multiples of 128.
struct GroupedGemmArgs : GroupedGemmOperands {
  MoeRouteBuffers route;                // tile list, expert offsets
  int num_experts = 0;
  int64_t max_tiles = 0;                // grid bound: moe_max_tiles(T, K, E, tile_m)
  int64_t rows = 0;                     // T*K (sorted rows), for the split-K choice
  int k_splits = 0;                     // 0: grouped_gemm_k_splits decides; 1..kMaxKSplits forces (tuning, tests)
  DecodeResidency decode_residency;     // grouped_gemm_decode_residency(device): needed when split-K decides
  // The route buffers were final before this launch began (a launch lies between their writer and this
  // GEMM, as GEMM1 before GEMM2 in the pipeline): the decode tile's first wave then reads its tile entry
  // and starts its weight copies before its programmatic-launch wait (needs decode_residency). False
  // when the kernel before wrote them.
  bool route_final_at_launch = false;
  Tile96Warps tile96_warps = Tile96Warps::kEight;  // tile_m 96 only (kFour with another tile is an error)
  std::optional<GemmSelfRouting> self_routing;     // set: GEMM1 routes the one token itself (see above)
  // GEMM2 of one token (rows = top_k; top_k set): every M tile holds one row, as the token's slots went to
  // distinct experts. The decode tile's one-row instances then skip the row count and compile only the
  // narrow form, in fewer registers (more K splits fit one wave: at one token of Qwen3.5-397B on the H200,
  // 2 instead of 1, and 39.1 instead of 40.6 us for the layer; docs/perf/2026-12-01-h200-r16.md).
  bool one_row_tiles = false;
};

// M tiles with a kernel configuration: 16 (decode: 1 warp x 32 columns per CTA, so every SM streams
// weights), 64, 96 and 128 (prefill; 96 and 128 need more than 100 KB of shared memory per block).
inline constexpr int kGemmTileMs[] = {16, 64, 96, 128};
// Dynamic shared memory of the configuration for tile_m (to check against the device's opt-in limit).
size_t grouped_gemm_smem_bytes(int tile_m);
// Sets the kernels' shared-memory attributes (call once per device before capturing launches).
void configure_grouped_gemm_kernels();
void launch_grouped_gemm_nvfp4w_bf16(const GroupedGemmArgs& args, GemmEpilogue epilogue, int tile_m,
                                     cudaStream_t stream);

}  // namespace fp4moe
