// cuda.sm80.fused_decode.v1: the low-latency decode MoE backend (SM80 and later; docs/fused-decode.md).
// Two launches per chunk of up to 64 tokens: (route + GEMM1 + SwiGLU) and (GEMM2 + combine), each
// streaming the touched experts' weights once over all SMs. Weights are repacked once at prepare()
// into the layout of kernels/cuda/nvfp4_decode_layout.h. Correct for any token count (larger batches
// run chunk after chunk), fast for small ones: dispatch picks it where it wins.
#pragma once
#include <memory>

#include "backends/moe_backend.h"

namespace fp4moe {

std::unique_ptr<MoeBackend> make_cuda_sm80_fused_decode_backend();

}  // namespace fp4moe
