// Grouped GEMM over the experts of a MoE layer: out[rows of expert e] = A[rows, K] (BF16, sorted rows)
// x W_e[N, K]^T with W_e NVFP4 in the nvfp4_mma_layout.h layout, dequantized in registers to BF16
// and multiplied with mma.sync m16n8k16 (SM80 and later), fp32 accumulation, tensor scales in the
// fp32 epilogue. The M tiles come from launch_moe_align (moe_route_permute.h).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/grouped_gemm_operands.h"
#include "kernels/cuda/moe_route_permute.h"

namespace fp4moe {

// The operands in this kernel's terms: w_packed [E][N/8][K/128][512] (nvfp4_mma_layout.h), w_scales
// [E][N/8][K/128][64]; N and K multiples of 128.
struct GroupedGemmArgs : GroupedGemmOperands {
  MoeRouteBuffers route;                // tile list, expert offsets
  int num_experts = 0;
  int64_t max_tiles = 0;                // grid bound: moe_max_tiles(T, K, E, tile_m)
  int64_t rows = 0;                     // T*K (sorted rows; the row stride of split-K partials)
  float* split_workspace = nullptr;     // grouped_gemm_split_workspace_bytes(N); null disables split-K
  int k_splits = 0;                     // 0: grouped_gemm_k_splits decides; 1..kMaxKSplits forces (tuning, tests)
  int decode_wave_ctas = 0;             // grouped_gemm_decode_wave_ctas(device): needed when split-K decides
};

// Split-K (decode only): with few rows the N/32 x experts warps cannot fill the GPU, so K is split
// over up to kMaxKSplits CTAs whose fp32 partial sums are added in split order by a second kernel
// (deterministic). Used when tile_m == 16 and T*K <= kSplitMaxRows. The splits are the most that keep
// the decode CTAs within one wave of the device: wave_ctas = SMs x resident decode CTAs per SM
// (grouped_gemm_decode_wave_ctas; 132 x 16 on an H100/H200, fewer on smaller parts).
inline constexpr int kMaxKSplits = 4;
inline constexpr int64_t kSplitMaxRows = 256;
int grouped_gemm_k_splits(int64_t n, int64_t k, int64_t rows, int num_experts, int tile_m, int64_t wave_ctas);
// SMs x the decode configuration's resident CTAs per SM on `device` (an occupancy query; call at prepare).
int grouped_gemm_decode_wave_ctas(int device);
size_t grouped_gemm_split_workspace_bytes(int64_t max_n);

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
