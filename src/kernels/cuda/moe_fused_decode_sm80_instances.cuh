// The fused decode's kernel instances by shape, its problem checks and its slot capacity: what its plan
// (moe_fused_decode_sm80_plan.cu: shapes, grids, shared memory, register fit) and its kernels and launch
// (moe_fused_decode_sm80.cu, which defines the two accessors) share. Host code, for those two files.
#pragma once
#include "common/error.h"
#include "kernels/cuda/moe_fused_decode_sm80.h"
#include "kernels/cuda/moe_fused_decode_sm80_params.cuh"
#include "kernels/cuda/moe_route_permute.h"
#include "kernels/cuda/nvfp4_decode_layout.h"

namespace fp4moe::fused_decode {

using Gemm1Kernel = void (*)(Gemm1Params);
using Gemm2Kernel = void (*)(Gemm2Params);
// A launch-1 shape's instance with the scale table or table-free (BlockScales); an error for an unknown shape.
Gemm1Kernel gemm1_kernel(int shape, bool table_free);
// A launch-2 shape's instance for chunks of at most kTokenGroup tokens (one_tile) or for larger ones; an
// error for an unknown shape and for a 32-row shape's larger chunks (it has no such instance).
Gemm2Kernel gemm2_kernel(int shape, bool one_tile, bool table_free);

// The slots a chunk can have: kFusedDecodeMaxTokens x top_k.
inline int tk_capacity(const MoeProblem& problem) { return static_cast<int>(kFusedDecodeMaxTokens * problem.top_k); }

// What the fused decode supports, checked before planning and before sizing the workspace.
inline void check_problem(const MoeProblem& problem) {
  problem.validate();
  check_cuda_routing_config(problem.routing);
  FP4MOE_CHECK(problem.hidden % kDecodeChunkK == 0 && problem.inter % kDecodeChunkK == 0,
               "fused decode: H (", problem.hidden, ") and I (", problem.inter, ") must be multiples of ", kDecodeChunkK);
  FP4MOE_CHECK(problem.hidden <= 32768 && problem.inter <= 32768,
               "fused decode: H and I above 32768 are not supported (int16 row indices)");
}

}  // namespace fp4moe::fused_decode
