// Hopper (sm_90a) grouped GEMM over the experts of a MoE layer for prefill: out[rows of expert e] =
// A[rows, K] (BF16 sorted rows) x W_e[N, K]^T with W_e NVFP4, TMA + wgmma, fp32 accumulation. Used by
// cuda.sm90.prefill.v1 (backends/cuda_sm90_prefill.h); the M tiles come from launch_moe_align with
// tile_m = kSm90TileM. Epilogues as the sm80 GEMM (GemmEpilogue): SwiGLU to BF16 (W4A4: h quantized
// to NVFP4 with out_scale, stored dequantized), or scaled fp32 for GEMM2.
//
// Weight layout (repack_nvfp4_for_sm90, host, at prepare): for every (expert, 128-row N tile, 64-wide
// K block) a 4 KB packed block [128 rows][8 chunks][4 bytes] and a 512-byte scale block [128 rows][4
// E4M3 codes]. A chunk word holds the 8 values k = 8c..8c+7 of its row with element 2i in nibble i and
// element 2i+1 in nibble i+4, so nibble pair p -> one bf16x2 (values 2p, 2p+1) in three integer ops.
// Only this library's kernels are compiled for sm_90a; the declarations here are plain host code.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "format/nvfp4.h"
#include "kernels/cuda/grouped_gemm_operands.h"
#include "kernels/cuda/moe_route_permute.h"

namespace fp4moe {

inline constexpr int kSm90TileM = 128;  // M tile (rows of one expert per tile): two consumer warpgroups x 64
inline constexpr int kSm90TileN = 128;  // N tile = rows of one repacked weight block
inline constexpr int kSm90TileK = 64;   // K block (one 128-byte swizzled BF16 row)

// Bytes of one repacked [N, K] matrix (same as the checkpoint: N*K/2 packed, N*K/16 scales).
// Repacks `m` with rows in the order source_rows (all rows in order when empty). Throws Error when
// N % 128 or K % 64 is not 0.
void repack_nvfp4_for_sm90(const Nvfp4View& m, std::span<const int64_t> source_rows, uint8_t* packed_out,
                           uint8_t* scales_out);

// The operands in this kernel's terms: `a` 16-byte aligned sorted rows (the token tiles are TMA boxes;
// a_slots must be null), w_packed [E][N/128][K/64][4096], w_scales [E][N/128][K/64][512]; N a multiple
// of 128, K of 64.
struct Sm90GemmArgs : GroupedGemmOperands {
  int64_t rows = 0;                     // T*K: rows of `a`, or of the slots with a_slots (the TMA zero-fills past them)
  MoeRouteBuffers route;                // M tiles of kSm90TileM rows and expert offsets (launch_moe_align)
  int64_t max_tiles = 0;                // moe_max_tiles(T, K, E, kSm90TileM)
  int num_sms = 0;                      // persistent grid size
};

// Dynamic shared memory of the kernel (the device's opt-in limit must allow it).
size_t sm90_grouped_gemm_smem_bytes();
// Sets the kernels' shared-memory attributes and resolves cuTensorMapEncodeTiled (once per device,
// before capturing launches).
void configure_sm90_grouped_gemm_kernels();
// Launches on `stream` (no allocation, no host synchronization).
void launch_grouped_gemm_nvfp4w_bf16_sm90a(const Sm90GemmArgs& args, GemmEpilogue epilogue, cudaStream_t stream);

// ---- Second kernel: weights dequantized into registers (grouped_gemm_nvfp4w_bf16_sm90a_regw.cu) ----
// The weights are wgmma's A operand (64 weight rows per consumer warpgroup, read as FP4 from shared
// memory and dequantized straight into the register fragment), the token rows its N (tile_tokens per
// tile, so small experts pad less; an expert's last, partial tile runs at its rows rounded up to 32),
// fp32 accumulators. Same Sm90GemmArgs, but `route` and
// `max_tiles` must be for the M tiles of sm90_regw_m_tile(tile_tokens), and the weights in the layout below.
// Weight layout (repack_nvfp4_for_sm90_regw): per (expert, 128-row N tile, 64-wide K block) 4 KB of
// packed codes [8 row groups of 16][32 lanes][4 words] and 512 bytes of E4M3 codes [128 rows][4]; word
// s of lane (g = lane / 4, t = lane % 4) holds k16 step s of that lane's wgmma A fragment: register p of
// the fragment = value pair (row g + 8 (p & 1), k 16s + 8 (p >> 1) + 2t + {0, 1}) = decode_word's output
// p (nvfp4_decode_layout.h: the codes placed so that the 4 bf16x2 come out of 10 integer operations).
inline constexpr int kSm90RegwTileN = 128;                    // weight rows per tile (one repacked block)
inline constexpr int kSm90RegwTileTokens[] = {64, 128, 256};  // the compiled token tiles
inline constexpr int kSm90RegwSmallestTileTokens = 64;        // for workspace sizing
void repack_nvfp4_for_sm90_regw(const Nvfp4View& m, std::span<const int64_t> source_rows, uint8_t* packed_out,
                                uint8_t* scales_out);
// The token tile for a call: the least expected cost (per-tile overhead + per-column cost, partial
// tiles at their rows rounded up to 32) for the average rows per expert; fitted on the H200.
int sm90_regw_choose_tile_tokens(int64_t tokens, int top_k, int num_experts);
// The M tiles launch_moe_align must emit for this token tile: tile_tokens rows, and the tail an expert's
// last tile may take (tile 256: 64 rows, read by a second wgmma on the same weight registers, so an expert
// with 257..320 rows is decoded once). Error for an unknown tile.
MTile sm90_regw_m_tile(int tile_tokens);
// Whether GEMM1 at this token tile is faster reading the hidden rows through the sorted slots (a_slots:
// cp.async by the producer threads, single CTAs) than on gathered rows (a gather pass, then multicast TMA
// tiles in 2-CTA clusters); measured on the H200, data in the tile table. Error for an unknown tile.
bool sm90_regw_gemm1_reads_slots(int tile_tokens);
// Largest dynamic shared memory over the compiled token tiles.
size_t sm90_regw_smem_bytes();
void configure_sm90_regw_kernels();
// Throws Error for a tile.rows not in kSm90RegwTileTokens or a tile other than sm90_regw_m_tile(tile.rows),
// and for kSwigluNvfp4
// (W4A4 GEMM1 stays on the first kernel, whose epilogue quantizes h along the lane quads).
// cluster: 0 = 2-CTA clusters sharing each token tile (multicast TMA) when the weight units per token
// tile are even, num_sms >= 2 and the device runs such clusters (queried by configure_sm90_regw_kernels
// per device), else single CTAs; 1 or 2 forces it (2 with an odd unit count, num_sms < 2 or no resident
// cluster is an error). Both give the same bits (each item's arithmetic does not depend on the launch).
// a_slots (GEMM1's kSwiglu only; an Error otherwise): `a` is the hidden states [rows / top_k, k] and
// each token row is loaded by itself from row a_slots[r] / top_k, with the same bits as on gathered rows.
void launch_grouped_gemm_nvfp4w_bf16_sm90a_regw(const Sm90GemmArgs& args, MTile tile, GemmEpilogue epilogue,
                                                cudaStream_t stream, int cluster = 0);

}  // namespace fp4moe
