// cuda.sm80.pipeline.v1: the portable CUDA MoE backend (SM80 and later; docs/pipeline-backend.md).
// route -> align (counting sort by expert, M tiles) -> gather (W4A4: NVFP4 quantize-dequantize) ->
// grouped GEMM1 with the SwiGLU epilogue -> grouped GEMM2 -> combine. Weights are repacked once at
// prepare() into the layout of kernels/cuda/nvfp4_mma_layout.h.
#pragma once
#include <cstdint>
#include <memory>

#include "backends/moe_backend.h"

namespace fp4moe {

std::unique_ptr<MoeBackend> make_cuda_sm80_pipeline_backend();

// The M tile the backend uses for T tokens (16 for decode, 96 for prefill, 64 where 96 does not fit);
// exposed for tests and benchmarks. large_tile_ok: the device has the shared memory of the 96-row tile.
int sm80_pipeline_tile_m(int64_t tokens, int64_t top_k, int64_t num_experts, bool large_tile_ok);

}  // namespace fp4moe
