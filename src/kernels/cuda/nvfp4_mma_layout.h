// The weight layout of the sm80 grouped GEMM (grouped_gemm_nvfp4w_bf16_sm80_kernel.cuh), produced once at
// prepare() from the checkpoint's row-major NVFP4 [N, K] (format/nvfp4.h). Why: in mma.sync
// m16n8k16 a lane (g = lane/4, t = lane%4) needs W[n = g][k = 2t, 2t+1, 2t+8, 2t+9] per 16-wide k step,
// and one k step is exactly one NVFP4 block, so one 16-byte load per lane should deliver 8 k steps.
//
// packed: [N/8][K/128][32 lanes][4 words]; lane = 4g + t holds row n = 8*nb + g; word j covers the k
//   steps 2j and 2j+1 of the 128-wide chunk, as the 4 bf16x2 outputs of decode_word
//   (nvfp4_decode_layout.h: the codes placed so that they come out in 10 integer operations):
//     out0 = W[n][32j + 2t],      W[n][32j + 2t + 1]       (b0 of step 2j)
//     out1 = W[n][32j + 2t + 8],  W[n][32j + 2t + 9]       (b1 of step 2j)
//     out2 = W[n][32j+16 + 2t],   W[n][32j+16 + 2t + 1]    (b0 of step 2j+1)
//     out3 = W[n][32j+16 + 2t+8], W[n][32j+16 + 2t + 9]    (b1 of step 2j+1)
//   each half the bf16 pattern of e2m1 * 2^-126 (the scale table folds 2^126 back).
//   One (nb, chunk) is 512 contiguous bytes: a warp's 16-byte loads are perfectly coalesced.
// scales: [N/8][K/128][8 rows g][8 steps] E4M3 codes (64 bytes per (nb, chunk)).
// rows: an optional row order; GEMM1 interleaves gate and up by 8 rows ([gate 8j..8j+7, up 8j..8j+7])
//   so that each n8 pair of tiles holds matching gate and up columns for the SwiGLU epilogue.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "format/moe_weights.h"
#include "kernels/cuda/e4m3_scale_bits.h"

namespace fp4moe {

inline constexpr int kMmaChunkK = 128;  // K granularity of the layout
inline constexpr int kMmaRowGroup = 8;  // N granularity of the layout

// Bytes of one repacked [N, K] matrix: packed N*K/2, scales N*K/16 (same as the input).
// Repacks matrix `m` (rows in the order given by source_rows: repacked row r <- m's row source_rows[r],
// all rows when empty) into packed_out / scales_out. Throws Error when K % 128 or N % 8 is not 0.
void repack_nvfp4_for_mma(const Nvfp4View& m, std::span<const int64_t> source_rows, uint8_t* packed_out,
                          uint8_t* scales_out);

// Row order of GEMM1: w13 = [gate; up] with I rows each -> [g 0..7, u 0..7, g 8..15, u 8..15, ...].
std::vector<int64_t> gate_up_interleaved_rows(int64_t inter);

// One flag per expert: 1 when every block scale of its matrix (`per_expert` codes each) is a positive
// normal E4M3 code (e4m3_scale_bits.h), so the decode tiles may skip the scale table for that expert.
std::vector<uint8_t> experts_with_positive_normal_scales(std::span<const uint8_t> scales, int64_t num_experts,
                                                         int64_t per_expert);

}  // namespace fp4moe
