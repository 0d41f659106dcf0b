// cuda.sm90.prefill.v1: the Hopper prefill MoE backend (sm_90a only; docs/perf/2026-11-30-h200-sm90-prefill.md).
// route -> align (128-row M tiles) -> gather (W4A4: NVFP4 quantize-dequantize) -> grouped GEMM1 with
// the SwiGLU epilogue -> grouped GEMM2 -> combine, the routing/permute kernels of moe_route_permute.h
// and the TMA + wgmma grouped GEMM of kernels/cuda/grouped_gemm_nvfp4w_bf16_sm90a.h. Weights are
// repacked once at prepare() (repack_nvfp4_for_sm90). Same numerics as cuda.sm80.pipeline.v1
// (docs/pipeline-backend.md "Numerics"); run() launches only, so it is CUDA-graph capturable.
#pragma once
#include <memory>

#include "backends/moe_backend.h"

namespace fp4moe {

// Only in builds with the sm_90a kernels (FP4MOE_HAVE_SM90A).
std::unique_ptr<MoeBackend> make_cuda_sm90_prefill_backend();

}  // namespace fp4moe
