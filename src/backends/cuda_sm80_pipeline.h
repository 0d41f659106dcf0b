// cuda.sm80.pipeline.v1: the portable CUDA MoE backend (SM80 and later; docs/pipeline-backend.md).
// route -> align (counting sort by expert, M tiles) -> gather (W4A4: NVFP4 quantize-dequantize) ->
// grouped GEMM1 with the SwiGLU epilogue -> grouped GEMM2 -> combine (one W4A16 token: GEMM1 routes it
// itself, no route/align kernel). Weights are repacked once at prepare() into the layout of
// kernels/cuda/nvfp4_mma_layout.h.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>

#include "backends/moe_backend.h"
#include "kernels/moe_problem.h"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm80.h"

namespace fp4moe {

std::unique_ptr<MoeBackend> make_cuda_sm80_pipeline_backend();

// The grouped GEMMs' tile for T tokens: M rows (16 for decode, 96 for prefill, 64 where 96 does not fit)
// and, for 96, the warp layout (four warps unless forced). Exposed for tests and benchmarks. large_tile_ok:
// the device has the shared memory of the 96-row tile. force_tile96_warps: a forced layout for the 96-row
// tile (measurements).
struct Sm80PipelineTile {
  int m = 0;
  Tile96Warps tile96_warps = Tile96Warps::kEight;
  bool operator==(const Sm80PipelineTile&) const = default;
};
Sm80PipelineTile sm80_pipeline_tile(int64_t tokens, int64_t top_k, int64_t num_experts, bool large_tile_ok,
                                    std::optional<Tile96Warps> force_tile96_warps = std::nullopt);
// FP4MOE_SM80_TILE96_WARPS=4|8 forces the 96-row tile's layout (a measurement knob; unset: four warps).
// Any other value is an error.
std::optional<Tile96Warps> sm80_pipeline_forced_tile96_warps();
// FP4MOE_SM80_TABLE_SCALES=1 makes the decode tiles take the scale table even where every expert's block
// scales are positive normal (a measurement knob; unset or 0: the table-free path where it applies). Any
// other value is an error.
bool sm80_pipeline_forced_table_scales();
// Whether a one-token run's GEMM1 routes the token itself (W4A16: no route/align kernel; the GEMM writes
// the route buffers; kernels/cuda/one_token_self_route.cuh). FP4MOE_SM80_SELF_ROUTE=0 turns it off (a
// measurement knob and escape hatch; unset or 1: on). Any other value is an error.
bool sm80_pipeline_self_route_enabled();
// The pipeline's GEMM1 routes a run of `tokens` itself (enabled: the knob's value).
bool sm80_pipeline_gemm1_routes(int64_t tokens, int tile_m, bool w4a4, bool enabled);
// Whether the pipeline's GEMM2 of a run of `tokens` on `tile_m`-row tiles takes the one-row instances
// (GroupedGemmArgs::one_row_tiles): one token's, where their residency gives more K splits than the general
// instances' (each count from grouped_gemm_k_splits).
bool sm80_pipeline_gemm2_one_row(int64_t tokens, int tile_m, int general_splits, int one_row_splits);

}  // namespace fp4moe
