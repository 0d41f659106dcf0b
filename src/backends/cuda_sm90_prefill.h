// cuda.sm90.prefill.v1: the Hopper prefill MoE backend (sm_90a only; docs/perf/2026-11-30-h200-sm90-prefill-r2.md).
// route -> align (M tiles of the GEMM's token tile) -> gather (W4A4: NVFP4 quantize-dequantize) ->
// grouped GEMM1 with the SwiGLU epilogue -> grouped GEMM2 -> combine, with the routing/permute
// kernels of moe_route_permute.h and a TMA + wgmma grouped GEMM of grouped_gemm_nvfp4w_bf16_sm90a.h:
// W4A16 runs the register-weight kernel (token tile 64/128/256 per call from T, K, E), W4A4 the
// shared-memory-weight kernel (FP4MOE_SM90_PREFILL_KERNEL selects one for measurements, see the .cpp).
// Weights are repacked once at prepare() for the chosen kernel. Same numerics as
// cuda.sm80.pipeline.v1 (docs/pipeline-backend.md "Numerics"); run() launches only, so it is
// CUDA-graph capturable.
#pragma once
#include <memory>

#include "backends/moe_backend.h"

namespace fp4moe {

// Only in builds with the sm_90a kernels (FP4MOE_HAVE_SM90A).
std::unique_ptr<MoeBackend> make_cuda_sm90_prefill_backend();

}  // namespace fp4moe
