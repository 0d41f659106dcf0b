// The GEMM1 (SwiGLU) and GEMM2 (scaled fp32) arguments of the sm80 grouped GEMM for a W4A16 layer, as
// the pipeline backend fills them, for the tests that drive the kernels stage by stage (tile
// bit-identity, stage timing, tuning sweep).
#pragma once
#include <cstdint>

#include "backends/pipeline_parts.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm80.h"
#include "kernels/cuda/moe_route_permute.h"

namespace fp4moe::test {

struct Sm80GemmPair {
  GroupedGemmArgs gemm1, gemm2;
};

// rows: gathered BF16 [T*K, H]; h: BF16 [T*K, I]; o: fp32 [T*K, H]; split_k: false = one pass over K (else
// grouped_gemm_k_splits decides).
inline Sm80GemmPair sm80_w4a16_gemm_args(const DeviceExpertWeights& w, const MoeRouteBuffers& route, int64_t tokens,
                                         int64_t top_k, int64_t num_experts, int64_t hidden, int64_t inter,
                                         int tile_m, void* rows, void* h, void* o, bool split_k) {
  GroupedGemmArgs a1;
  a1.a = rows, a1.w_packed = w.w13.as<uint8_t>(), a1.w_scales = w.w13_scales.as<uint8_t>(), a1.n = 2 * inter;
  a1.scales_all_normal = w.w13_scales_all_normal;  // false unless the weights carry the flags
  a1.k = hidden, a1.scale_first = w.gate_scale2.as<float>(), a1.scale_second = w.up_scale2.as<float>();
  a1.out_scale = w.w2_input_scale.as<float>(), a1.route = route, a1.num_experts = static_cast<int>(num_experts);
  a1.max_tiles = moe_max_tiles(tokens, static_cast<int>(top_k), static_cast<int>(num_experts), tile_m);
  a1.rows = tokens * top_k, a1.k_splits = split_k ? 0 : 1, a1.out = h;
  int device = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device));
  a1.decode_residency = grouped_gemm_decode_residency(device);
  GroupedGemmArgs a2 = a1;
  a2.a = h, a2.w_packed = w.w2.as<uint8_t>(), a2.w_scales = w.w2_scales.as<uint8_t>(), a2.n = hidden, a2.k = inter;
  a2.scales_all_normal = w.w2_scales_all_normal;
  a2.scale_first = w.down_scale2.as<float>(), a2.scale_second = nullptr, a2.out = o;
  return {a1, a2};
}

}  // namespace fp4moe::test
