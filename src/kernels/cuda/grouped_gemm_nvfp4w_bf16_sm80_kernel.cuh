// The kernel of the sm80 grouped GEMM (grouped_gemm_nvfp4w_bf16_sm80.cu holds its host side: instance
// choice, split-K sizing, launches). Device code for SM80+, included by that one file.
//
// Grouped NVFP4-weight x BF16-activation GEMM for MoE experts, SM80+ (mma.sync m16n8k16 bf16, fp32 acc).
//
// Inputs: sorted activation rows A [T*K, K] BF16 (launch_moe_gather), or the [T, K] rows they come
// from, read through the sorted slots (GEMM1 of W4A16: the gather folded into the A copies), expert weights in the
// nvfp4_mma_layout.h layout, the M-tile list of launch_moe_align (tile = expert + first row; rows of
// the expert past the tile end are masked, so padding costs no memory). Grid: x = N / BN column
// tiles, y = moe_max_tiles (CTAs past the device-side tile count exit at once): no host sync.
// Pipeline: STAGES-deep cp.async ring of (A tile BM x 128, W tile BN x 128 packed, its E4M3 scales);
// A is XOR-swizzled by 16-byte chunk (conflict-free ldmatrix); W is copied verbatim (each lane later
// reads its 16 bytes = 8 k steps of B fragments with one conflict-free LDS.128). Decode (16-row
// tiles): A fragments come straight from global (no A stage, ~9 KB of ring per warp) and K may be split
// over the warps of the CTA (the WARP_SPLIT instance: one ring per warp); warp 0 adds the others' fp32
// sums in warp order from shared memory and runs the epilogue (no partials in global memory and no
// reduction kernel, which took 5.6 us at one token of Qwen3.5-397B under Nsight Compute). Decode tiles
// of <= 8 rows swap the mma operands (the decoded weights are the A fragment, the tokens the B
// fragment): half the mma.sync and A loads, 12 % less time from 1 to 16 tokens on the H200.
// Dequantization (exact): a nibble placed at bf16 bits [15] and [8:6] is e2m1 * 2^-126 (code 1 is a
// bf16 subnormal, which the bf16 multiply keeps); a 1 KB shared table maps each E4M3 code to
// bf16x2(scale * 2^117) built from integers (subnormal scales included: no exponent-shift trick).
// One __hmul2 gives e2m1 * scale * 2^-9 exactly; the epilogue multiplies 2^9 * tensor scale in fp32.
// Where every expert's scales of the matrix are positive normal codes (GroupedGemmOperands::
// scales_all_normal, checked at prepare), a decode-tile launch takes the ALL_NORMAL instance, which builds
// the same bf16x2 with a byte permute and a multiply-add (e4m3_scale_bits.h): 413 instead of 442
// instructions per narrow chunk, 1.5-8 % faster from 16 to 256 tokens (docs/perf/2026-12-01-h200-r14.md).
// Epilogues: SwiGLU (gate/up tiles interleaved by 8 rows) to BF16, or to NVFP4-dequantized BF16 for
// W4A4 (block amax over a lane quad), or scaled fp32 for GEMM2. No atomics: deterministic.
// Short tiles: the warp rows own interleaved m16 fragments and skip those past the expert's rows
// (ldmatrix, mma.sync and dequantization), so an expert of 80 rows costs 5 fragments, not the tile's.
// The kernel is a programmatic dependent launch on SM90+ (common/programmatic_launch.cuh); the first
// wave of a decode GEMM2 starts its weight copies before the wait (early start, Params::early_ctas).
// One token's W4A16 GEMM1 may route the token itself (SELF_ROUTE, one_token_self_route.cuh): then no
// route/align kernel runs before it (1.05x at one token of Qwen3.5-397B, docs/perf/2026-12-01-h200-r15.md).
// One token's GEMM2 may take the one-row instances (ONE_ROW: narrow form only, fewer registers), so that more
// K splits fit one wave (1.04x at one token of Qwen3.5-397B, docs/perf/2026-12-01-h200-r16.md).
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/common/programmatic_launch.cuh"
#include "kernels/cuda/common/static_count.cuh"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm80.h"
#include "kernels/cuda/nvfp4_decode_layout.h"
#include "kernels/cuda/nvfp4_device.cuh"
#include "kernels/cuda/one_token_self_route.cuh"

namespace fp4moe::sm80_grouped_gemm {

using sm80::bf16x2_mul;
using sm80::bf16x2_mul_by_half;
using sm80::cp_async16_if;
using sm80::cp_async_commit;
using sm80::cp_async_wait;
using sm80::mma_bf16;
using sm80::normal_scale_pair_bf16x2;
using sm80::nvfp4_qdq_h_quad_blocks;
using sm80::scale_lut_entry;
using sm80::smem_addr;

struct TileConfig {
  int bm, bn, warps_m, warps_n, stages;
  bool a_in_registers;  // A fragments loaded straight from global (L1/L2-resident rows), no A stage
  int min_blocks;       // __launch_bounds__ residency target (decode: 16 one-warp CTAs -> <= 128 registers)
};
// Decode: one warp per 16 x 32 tile, A in registers so a CTA needs only ~10 KB of shared memory (the
// weight ring): with split-K over CTAs ~16 warps per SM stream weights (the kernel is issue-bound, so
// occupancy is what hides the dequantization's dependency chains).
// Prefill: 64 x 128 (4 warps, 32 x 64 each), 96 x 128 and 128 x 128 (8 warps, 48 / 64 x 32 each).
// 96 x 128 is capped at 128 registers so two CTAs (16 warps) share an SM of an H100/H200. Its first
// variant has 1 x 8 warps of 96 x 16: each weight fragment is dequantized once per CTA instead of once
// per warp row (the 2 x 4 layout was issue-bound on the dequantization: ALU pipe 49 %, tensor pipe
// 41 %; 1 x 8 made the 96-row GEMMs 1.09-1.30x faster). Measured on the H200 with 20 to 320 rows per
// expert: 1.34-1.95x faster than 64 x 128 and 1.19-1.70x faster than 128 x 128 (cuda_sm80_pipeline.cpp
// picks it). The W4A4 GEMM1 epilogue needs 32 columns per warp (a 16-column NVFP4 block of h), so it
// takes the first variant of its tile that has them (96 x 128 with 2 x 4 warps). The last variant has
// 1 x 4 warps of 96 x 32 (Tile96Warps::kFour, 236 registers, two CTAs per SM): half the A fragments'
// shared-memory reads per mma; since the copies' addresses are precomputed it is the faster 96-row
// layout at every measured size, and the pipeline backend picks it (docs/perf/2026-11-30-h200-r13.md).
constexpr TileConfig kConfigs[] = {
    {16, 32, 1, 1, 4, true, 16},
    {64, 128, 2, 2, 3, false, 1},
    {96, 128, 1, 8, 3, false, 2},
    {96, 128, 2, 4, 3, false, 2},
    {128, 128, 2, 4, 3, false, 1},
    {96, 128, 1, 4, 3, false, 2}};
constexpr int kNumConfigs = sizeof(kConfigs) / sizeof(kConfigs[0]);
// Tile96Warps::kFour: never the first 96-row config, so config_index keeps picking the eight-warp ones.
constexpr int kConfigTile96FourWarps = 5;
static_assert(kConfigs[kConfigTile96FourWarps].bm == 96 && kConfigs[kConfigTile96FourWarps].warps_m == 1 &&
                  kConfigs[kConfigTile96FourWarps].warps_n == 4 && kConfigs[2].bm == 96 && kConfigs[2].warps_n == 8,
              "the four-warp 96-row layout (Tile96Warps::kFour) and the eight-warp one picked first");
constexpr int kChunkK = 128;
constexpr int kLutBytes = 1024;
// SELF_ROUTE instances: the token's slots (one per lane of the routing warp) after the rings.
constexpr int kSelfRouteSlotBytes = 32 * sizeof(one_token::TokenSlot);

constexpr bool valid_config(TileConfig c) {
  return c.bm % (16 * c.warps_m) == 0 && c.bn % (16 * c.warps_n) == 0 && c.stages >= 2 && 128 % c.bn == 0 &&
         (!c.a_in_registers || c.bm == 16 * c.warps_m);
}
constexpr bool all_configs_valid() {
  for (const TileConfig& c : kConfigs)
    if (!valid_config(c)) return false;
  return true;
}
static_assert(all_configs_valid(),
              "tile configs: warp tiles must be multiples of 16 x 16 (a gate/up pair of n8 tiles) and BN "
              "must divide 128 (N is a multiple of 128)");
// The W4A4 GEMM1 epilogue quantizes 16-column blocks of h: 32 GEMM1 columns (gate/up by 8) per warp.
__host__ __device__ constexpr bool supports_epilogue(TileConfig c, GemmEpilogue e) {
  return e != GemmEpilogue::kSwigluNvfp4 || (c.bn / c.warps_n) % 32 == 0;
}

__host__ __device__ constexpr size_t stage_bytes(TileConfig c) {
  return (c.a_in_registers ? 0 : size_t(c.bm) * 256) + size_t(c.bn / 8) * (512 + 64);
}
// The LUT and one ring per K split (splits > 1: the decode tile's WARP_SPLIT instance).
__host__ __device__ constexpr size_t smem_bytes(TileConfig c, int splits = 1) {
  return kLutBytes + size_t(splits) * c.stages * stage_bytes(c);
}
// Launch bounds: the WARP_SPLIT instance has up to kMaxKSplits one-warp splits per CTA, at the registers
// per thread of 16 one-warp CTAs per SM.
__host__ __device__ constexpr int block_threads(TileConfig c, bool warp_split) {
  return c.warps_m * c.warps_n * 32 * (warp_split ? kMaxKSplits : 1);
}
// The one-row GEMM2 instances (ONE_ROW: one token) split K at 5 four-warp CTAs per SM, <= 102 registers:
// then 10 two-warp CTAs fit an SM of 64 K registers, and one token's GEMM2 of Qwen3.5-397B (1280 CTAs)
// splits K 2 ways in one wave on an H100/H200 (at 104-112 registers 9 fit: 1188 CTAs). Their narrow form
// takes 89-90 registers there (sm_90a, no spill); the general split instances, capped so, spilled and made
// Qwen3-30B's two tokens 18 % slower (docs/perf/2026-12-01-h200-r16.md).
constexpr int kOneRowSplitMinBlocks = 5;
__host__ __device__ constexpr int min_blocks(TileConfig c, bool warp_split, bool one_row) {
  return !warp_split ? c.min_blocks : one_row ? kOneRowSplitMinBlocks : c.min_blocks / kMaxKSplits;
}
// Warp 0 of a split decode CTA reads the other warps' accumulators (16 x 32 fp32) from their rings.
static_assert(kConfigs[0].a_in_registers && kConfigs[0].bm == 16 && kConfigs[0].warps_m * kConfigs[0].warps_n == 1 &&
                  kConfigs[0].bm * kConfigs[0].bn * 4 <= kConfigs[0].stages * stage_bytes(kConfigs[0]) &&
                  kConfigs[0].min_blocks % kMaxKSplits == 0,
              "config 0 is the one-warp decode tile whose accumulators fit its ring");

struct Params {
  const __nv_bfloat16* a;
  const int32_t* a_slots;  // null: A holds the sorted rows; else A is [T, K] and row r reads token a_slots[r] / top_k
  int top_k;
  const uint8_t* w;
  const uint8_t* ws;
  int n, k;
  const float* scale_first;
  const float* scale_second;
  const float* input_scale;
  const float* out_scale;
  const int32_t* tile_expert;
  const int32_t* tile_row_begin;
  const int32_t* num_tiles;
  const int32_t* expert_offsets;
  void* out;
  // The last 16 bytes: early_ctas and padding. Params kept their size when the split-K partials' pointer and
  // row stride went: without these 16 bytes ptxas allocated the instances' registers differently (the
  // 96-row tiles reached 128 registers and spilled, the decode CTAs took 113-118 instead of 112-114; the
  // GEMMs were 4-10 % slower on the H200).
  int32_t early_ctas;  // decode tile: the leading CTAs that start early (early_start_ctas)
  int32_t reserved32;
  int64_t reserved64;
};
static_assert(sizeof(Params) == 136, "Params keep their size (see reserved above)");

__device__ __forceinline__ uint32_t ldg_u32(const void* p) {
  uint32_t v;
  asm volatile("ld.global.nc.b32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
// WARP_SPLIT (decode tile only): the CTA's warps split K, one ring each. A separate instance, so that the
// one-warp CTAs keep their code: with the split decided at run time inside one instance they were 7 %
// slower on the H200.
// SELF_ROUTE (decode tile, one token, W4A16 GEMM1; one_token_self_route.cuh): the CTA routes the token
// itself instead of reading its tile from the route buffers, and the grid's last row of CTAs writes those
// for the kernels after it.
template <bool SELF_ROUTE>
using SelfRouteArg = std::conditional_t<SELF_ROUTE, one_token::SelfRouteParams, one_token::NoSelfRoute>;
// ONE_ROW (decode tile, GEMM2 of one token): every M tile holds one row (the token's K slots went to distinct
// experts), so the tile's row count is not read and only the narrow form is compiled (fewer registers; see
// kOneRowSplitMinBlocks).
template <int CFG, GemmEpilogue EPI, bool WARP_SPLIT, bool ALL_NORMAL = false, bool SELF_ROUTE = false,
          bool ONE_ROW = false>
__global__ void __launch_bounds__(block_threads(kConfigs[CFG], WARP_SPLIT), min_blocks(kConfigs[CFG], WARP_SPLIT, ONE_ROW))
    grouped_gemm_kernel(Params p, SelfRouteArg<SELF_ROUTE> self) {
  constexpr TileConfig c = kConfigs[CFG];
  static_assert(supports_epilogue(c, EPI), "this warp layout cannot run this epilogue");
  static_assert(!WARP_SPLIT || c.a_in_registers, "only the decode tile splits K over its warps");
  static_assert(!SELF_ROUTE || (c.a_in_registers && EPI == GemmEpilogue::kSwiglu),
                "self-routing is an instance of the W4A16 GEMM1 on the decode tile");
  static_assert(!ONE_ROW || (c.a_in_registers && EPI == GemmEpilogue::kScaleFp32 && !SELF_ROUTE),
                "one-row tiles are an instance of GEMM2 on the decode tile");
  constexpr int BM = c.bm, BN = c.bn, WM = c.warps_m, WN = c.warps_n, S = c.stages;
  constexpr int THREADS = c.warps_m * c.warps_n * 32;
  constexpr int WARP_M = BM / c.warps_m, WARP_N = BN / WN;
  constexpr int MT = WARP_M / 16, NT = WARP_N / 8;
  constexpr int A_BYTES = c.a_in_registers ? 0 : BM * 256, B_BYTES = (BN / 8) * 512, STAGE = int(stage_bytes(c));
  extern __shared__ __align__(16) uint8_t smem[];
  uint32_t* lut = reinterpret_cast<uint32_t*>(smem);
  // WARP_SPLIT: warp w sums K split w in its own ring, and tid is the thread's index in its split.
  const unsigned tid = WARP_SPLIT ? threadIdx.x % 32 : threadIdx.x;  // unsigned: as threadIdx.x, cheap / and %
  uint8_t* ring = smem + kLutBytes + (WARP_SPLIT ? size_t(threadIdx.x / 32) * S * STAGE : 0);

  // The scale table needs no global memory. The decode tile builds it while the kernel before drains;
  // the prefill tiles build it where they always did (their register allocation moved otherwise).
  auto build_lut = [&] {
    for (int i = threadIdx.x; i < 256; i += (WARP_SPLIT ? int(blockDim.x) : THREADS)) lut[i] = scale_lut_entry(i);
  };
  if constexpr (c.a_in_registers) build_lut();
  // Early start: a decode GEMM whose route buffers were final before it was launched (GEMM2 of the
  // pipeline: GEMM1 lies between their writer and it) reads its tile entry and issues its first weight
  // copies before the programmatic-launch wait: they overlap the tail of the kernel before (which writes
  // its A rows). Only the first wave's CTAs can overlap it: the later ones start as usual. The early
  // route reads go to L2 (ld.global.cg): read before the wait, they must not hit lines an earlier kernel
  // left in this SM's L1. Otherwise they use L1, which the later waves hit (L2 reads in every CTA made
  // 16 tokens of Qwen3.5-397B 1 % slower on the H200).
  const bool early = !SELF_ROUTE && c.a_in_registers && blockIdx.y * gridDim.x + blockIdx.x < unsigned(p.early_ctas);
  auto route_load = [early](const int32_t* q) { return early ? __ldcg(q) : *q; };
  if (!early) pdl_chain_entry();
  const int tile = blockIdx.y;
  int expert, row0;
  [[maybe_unused]] one_token::TokenSlot slot;  // SELF_ROUTE: lane k < K holds slot k of the token
  if constexpr (SELF_ROUTE) {
    // Warp 0 routes the token in its ring (no copy is in flight yet) and the split warps read its slots
    // from the words after the rings. (Every warp routing for itself was slower: 2112 warps reading the
    // same logits.) Tile = the expert's rank = its row.
    static_assert(one_token::kScratchBytes <= size_t(c.stages) * stage_bytes(c), "the routing scratch fits a ring");
    one_token::TokenSlot* shared_slots =
        reinterpret_cast<one_token::TokenSlot*>(smem + kLutBytes + (WARP_SPLIT ? blockDim.x / 32 : 1) * S * STAGE);
    // Only the route buffers' writers (the last row) need the routing weights.
    if (threadIdx.x < 32) {
      slot = one_token::route_one_token(self, ring, /*weights_needed=*/tile == int(gridDim.y) - 1);
      if constexpr (WARP_SPLIT) shared_slots[threadIdx.x] = slot;
    }
    if constexpr (WARP_SPLIT) {
      __syncthreads();
      if (threadIdx.x >= 32) slot = shared_slots[threadIdx.x % 32];
    }
    expert = one_token::tile_expert(slot, tile);
    row0 = tile;
    if (expert < 0) {  // warp-uniform and CTA-uniform; the last row of the grid (no tile) writes the route buffers
      if (tile == gridDim.y - 1 && threadIdx.x < 32) one_token::write_route_buffers(self, slot, blockIdx.x, gridDim.x);
      return;
    }
  } else if constexpr (c.a_in_registers) {
    // Decode: the tile's entry is read together with the tile count, one memory latency instead of two
    // ahead of the first weight copy. The tile arrays hold moe_max_tiles >= gridDim.y entries, so a CTA
    // past the count reads an entry it never uses. The exit test reads all three (a tile's expert and
    // first row are never negative) because the compiler otherwise moves the entry's loads behind it.
    const int num_tiles = route_load(p.num_tiles);
    expert = route_load(p.tile_expert + tile);
    row0 = route_load(p.tile_row_begin + tile);
    if ((tile >= num_tiles) | (expert < 0) | (row0 < 0)) {
      if (early) pdl_chain_entry();  // no CTA completes ahead of the kernel before
      return;
    }
  } else {
    if (tile >= *p.num_tiles) return;
    expert = p.tile_expert[tile];
    row0 = p.tile_row_begin[tile];
  }
  const int rows_end = SELF_ROUTE || ONE_ROW ? row0 + 1
                     : c.a_in_registers ? route_load(p.expert_offsets + expert + 1) : p.expert_offsets[expert + 1];
  // ALL_NORMAL (decode tiles): every expert's block scales are positive normal E4M3 codes (flags computed
  // at prepare), so the K loop builds each scale multiplier with a byte permute and a multiply-add
  // instead of reading the table (e4m3_scale_bits.h).
  static_assert(!ALL_NORMAL || c.a_in_registers, "the table-free scales are a decode-tile instance");
  const int rows = min(BM, rows_end - row0);
  const int nb0 = blockIdx.x * (BN / 8);
  const int chunks = p.k / kChunkK;
  // Split-K (WARP_SPLIT): this warp sums chunks [kc_begin, kc_begin + my_chunks). Otherwise one split
  // (blockIdx.z = 0, gridDim.z = 1: the expressions are kept as they were, because register allocation
  // in this file turned out sensitive to them).
  const int k_split = WARP_SPLIT ? int(threadIdx.x / 32) : int(blockIdx.z);
  const int k_splits = WARP_SPLIT ? int(blockDim.x / 32) : int(gridDim.z);
  const int per_split = (chunks + k_splits - 1) / k_splits;
  const int kc_begin = min(chunks, k_split * per_split);
  const int my_chunks = min(chunks, kc_begin + per_split) - kc_begin;
  const size_t expert_blocks = size_t(p.n / 8) * chunks;
  const uint8_t* wbase = p.w + (size_t(expert) * expert_blocks + size_t(nb0) * chunks) * 512;
  const uint8_t* sbase = p.ws + (size_t(expert) * expert_blocks + size_t(nb0) * chunks) * 64;
  // Source of the tile's row r (< rows): the sorted row itself, or the token it was routed from (the
  // gather folded into the A copies: hidden states are read in place, L2-resident, and the [T*K, K]
  // copy is neither written nor read).
  auto a_source_row = [&](int r) { return SELF_ROUTE ? 0 : p.a_slots ? p.a_slots[row0 + r] / p.top_k : row0 + r; };

  if constexpr (!c.a_in_registers) build_lut();
  const int live_frags = (rows + 15) / 16;  // m16 fragments holding rows of this tile
  const int read_rows = live_frags * 16;

  // cp.async issue with compile-time trip counts and per-thread bases hoisted out of the K loop (a
  // loop starting at threadIdx.x has an unknown trip count and compiles to generic, IMAD-heavy code).
  // Each copy's operands are precomputed per thread: shared-memory byte addresses (32 bits), A's source
  // offsets in 16-byte units (32 bits; the host checks that A fits) and bit masks for the row tests, so
  // that a copy costs an add, a wide multiply and the predicated LDGSTS. (Built per copy and chunk, a
  // 64-bit address, the generic-to-shared conversion and a branch around each copy took ~40 % of the
  // 96-row tile's K-loop instructions.)
  constexpr int A_CHUNKS = c.a_in_registers ? 0 : BM * 16, B_CHUNKS = (BN / 8) * 32, S_CHUNKS = (BN / 8) * 4;
  static_assert(A_CHUNKS % THREADS == 0 && B_CHUNKS % THREADS == 0, "tile copies must split evenly over threads");
  constexpr int A_ITERS = A_CHUNKS / THREADS, B_ITERS = B_CHUNKS / THREADS;
  constexpr int A_ROWS_PER_ITER = THREADS / 16, B_BLOCKS_PER_ITER = THREADS / 32;
  static_assert(A_ITERS == 0 || A_ROWS_PER_ITER % 8 == 0, "a thread's A copies share their swizzle (row & 7)");
  static_assert(A_ITERS <= 32, "one mask bit per A copy of a thread");
  const int a_r = tid / 16, a_ch = tid % 16;  // A: row a_r + it * A_ROWS_PER_ITER, 16-byte chunk a_ch
  uint32_t a_src16[A_ITERS > 0 ? A_ITERS : 1];  // (A's source row * K + 8 * a_ch) / 8; 0 past the rows
  uint32_t a_valid = 0, a_live = 0;             // bit it: the row holds data / a live fragment reads it
#pragma unroll
  for (int it = 0; it < A_ITERS; ++it) {
    const int r = a_r + it * A_ROWS_PER_ITER;
    a_src16[it] = r < rows ? uint32_t(a_source_row(r)) * uint32_t(p.k / 8) + uint32_t(a_ch) : 0u;
    a_valid |= uint32_t(r < rows) << it;
    a_live |= uint32_t(r < read_rows) << it;  // rows no fragment reads are not copied (nor zero-filled)
  }
  const uint4* a16 = reinterpret_cast<const uint4*>(p.a);
  const uint32_t ring_addr = smem_addr(ring);
  const uint32_t a_dst = ring_addr + a_r * 256 + ((a_ch ^ (a_r & 7)) * 16);
  const int b_nb = tid / 32, b_l = tid % 32;  // W: block b_nb + it * B_BLOCKS_PER_ITER, lane b_l
  const uint8_t* b_src = wbase + size_t(b_nb) * chunks * 512 + b_l * 16;
  const size_t b_src_step = size_t(B_BLOCKS_PER_ITER) * chunks * 512;
  const uint32_t b_dst = ring_addr + A_BYTES + b_nb * 512 + b_l * 16;
  const bool s_active = tid < S_CHUNKS;  // scales: S_CHUNKS <= THREADS
  static_assert(S_CHUNKS <= THREADS, "one scale copy per thread at most");
  const uint8_t* s_src = sbase + size_t(tid / 4) * chunks * 64 + (tid % 4) * 16;
  const uint32_t s_dst = ring_addr + A_BYTES + B_BYTES + tid * 16;
  auto load_stage = [&](int kc, int stage) {
    const uint32_t stage_offset = uint32_t(stage) * STAGE;
#pragma unroll
    for (int it = 0; it < A_ITERS; ++it) {
      // Rows past the expert's (inside a live fragment) are zero-filled from an in-bounds address of row 0.
      cp_async16_if((a_live >> it) & 1u, a_dst + stage_offset + it * A_ROWS_PER_ITER * 256,
                    a16 + (a_src16[it] + uint32_t(kc) * (kChunkK / 8)), ((a_valid >> it) & 1u) ? 16 : 0);
    }
    const uint8_t* b_chunk = b_src + size_t(kc) * 512;
#pragma unroll
    for (int it = 0; it < B_ITERS; ++it) {
      cp_async16_if(true, b_dst + stage_offset + it * B_BLOCKS_PER_ITER * 512, b_chunk + it * b_src_step, 16);
    }
    cp_async16_if(s_active, s_dst + stage_offset, s_src + size_t(kc) * 64, 16);
  };

  const int warp = tid / 32, lane = tid % 32;
  const int wm = warp / WN, wn = warp % WN;
  const int g = lane / 4, t = lane % 4;
  // M fragments are interleaved over the warp rows: fragment mt of warp row wm holds tile rows
  // [16 * (mt * WM + wm), +16). A short expert tile (e.g. 80 of 128 rows) then leaves every warp
  // row a near-equal share, and the fragments past `rows` (warp-uniform: rows is per CTA) are
  // skipped outright: no ldmatrix, no mma.sync, and no dequantization in a warp with none left.
  const int active_mt = live_frags > wm ? min(MT, (live_frags - wm + WM - 1) / WM) : 0;
  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < my_chunks) load_stage(kc_begin + s, s);
    cp_async_commit();
  }
  if (early) pdl_chain_entry();  // the A rows (and the outputs) belong to the kernel before
  // A in registers: this lane's rows g and g + 8 of the tile (masked past the expert's rows).
  const bool a_row0_ok = g < rows, a_row1_ok = g + 8 < rows;
  const __nv_bfloat16* a_row0 = p.a + size_t(a_source_row(a_row0_ok ? g : 0)) * p.k + 2 * t;
  const __nv_bfloat16* a_row1 = p.a + size_t(a_source_row(a_row1_ok ? g + 8 : 0)) * p.k + 2 * t;
  // Narrow decode tiles (<= 8 rows, W4A16 epilogues): the weights are the mma's A operand and the tokens
  // its n8 B operand. A lane's decoded B fragments of the n8 weight tiles nt and nt + 1 (rows g of each,
  // k pairs 2t and 2t + 8) are exactly an m16 A fragment of those 16 weight rows, and the token
  // fragment (token g, k pairs 2t and 2t + 8) is exactly a B fragment: half the mma.sync and A loads
  // per step, no layout change. acc[0][q] then holds (weight rows g of tiles 2q / 2q + 1, tokens 2t and
  // 2t + 1): element j of tile 2q + j / 2, token 2t + j % 2. Every output is the same 16-product sum
  // over each k step as in the wide form.
  const bool narrow = c.a_in_registers && EPI != GemmEpilogue::kSwigluNvfp4 && rows <= 8;
  // The narrow form's token fragments (row g, k pairs 2t and 2t + 8) of k step s of chunk kc; zeros where
  // `live` is false (no row g, or no such chunk).
  auto load_tokens = [&](int kc, int s, bool live, uint32_t& tok0, uint32_t& tok1) {
    const int k = kc * kChunkK + 16 * s;
    tok0 = live ? ldg_u32(a_row0 + k) : 0u;
    tok1 = live ? ldg_u32(a_row0 + k + 8) : 0u;
  };
  // The table-free narrow form loads the token fragments of its next chunk's first k steps one chunk ahead.
  constexpr int kTokensAhead = 2;
  uint32_t tok_ahead[2 * kTokensAhead];
  if constexpr (ALL_NORMAL) {
#pragma unroll
    for (int s = 0; s < kTokensAhead; ++s)
      load_tokens(kc_begin, s, narrow && a_row0_ok && my_chunks > 0, tok_ahead[2 * s], tok_ahead[2 * s + 1]);
  }
  // Chunk i (K block kc) for AM live fragments (a compile-time count, so the skipped fragments cost
  // nothing); AM = -1: the narrow form.
  auto chunk_mma = [&](auto am_tag, auto normal_scales_tag, int i, int kc) {
    constexpr int AM = decltype(am_tag)::value;
    constexpr bool NARROW = AM < 0;
    constexpr bool NORMAL_SCALES = decltype(normal_scales_tag)::value;
    if constexpr (AM != 0) {
      const uint8_t* sa = ring + (i % S) * STAGE;
      const uint8_t* sb = sa + A_BYTES;
      const uint8_t* ss = sb + B_BYTES;
      uint4 wq[NT];
      uint2 sc[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int nb = wn * (WARP_N / 8) + nt;
        wq[nt] = *reinterpret_cast<const uint4*>(sb + nb * 512 + lane * 16);
        sc[nt] = *reinterpret_cast<const uint2*>(ss + nb * 64 + g * 8);
      }
      // The lane's two bf16x2 weight operands of n8 tile nt at k step s (B fragment b0, b1: row g, k
      // pairs 2t and 2t + 8): the step uses two of its word's four outputs.
      auto decode_step = [&](int nt, int s, uint32_t& b0, uint32_t& b1) {
        const uint32_t word = (s / 2 == 0) ? wq[nt].x : (s / 2 == 1) ? wq[nt].y : (s / 2 == 2) ? wq[nt].z : wq[nt].w;
        const uint32_t codes = (s < 4) ? sc[nt].x : sc[nt].y;
        uint32_t v[4];
        decode_word(word, v);
        if constexpr (NORMAL_SCALES) {
          // Codes s % 4 and its neighbour (steps s and s ^ 1) in the two halves: one byte permute and
          // multiply-add per two steps (the same expression in both, computed once); each step's multiply
          // takes its half (bf16x2_mul_by_half).
          const uint32_t pair =
              (s % 4) < 2 ? normal_scale_pair_bf16x2<0>(codes) : normal_scale_pair_bf16x2<2>(codes);
          if (s & 1) {
            b0 = bf16x2_mul_by_half<true>(v[2], pair);
            b1 = bf16x2_mul_by_half<true>(v[3], pair);
          } else {
            b0 = bf16x2_mul_by_half<false>(v[0], pair);
            b1 = bf16x2_mul_by_half<false>(v[1], pair);
          }
        } else {
          const uint32_t scale = lut[(codes >> (8 * (s % 4))) & 0xFFu];
          b0 = bf16x2_mul((s & 1) ? v[2] : v[0], scale);
          b1 = bf16x2_mul((s & 1) ? v[3] : v[1], scale);
        }
      };
      // Narrow form with the table-free scales: the chunk's token fragments, loaded before its first mma.
      // The loads are volatile asm, issued in program order among the mma.sync: loaded per k step, each
      // waits for its L2 latency behind one step's decode, which the table-free step makes shorter (8
      // tokens of Qwen3.5-397B took 5 % longer so). Steps 0 .. kTokensAhead - 1 come from the previous
      // chunk (tok_ahead), the others are all loaded here. (With the scale table the per-step loads were
      // 2-3 % faster at 1-64 tokens on the H200: docs/perf/2026-12-01-h200-r14.md.)
      constexpr bool TOKENS_FIRST = NARROW && NORMAL_SCALES;
      uint32_t tok[TOKENS_FIRST ? 16 : 1];
      if constexpr (TOKENS_FIRST) {
#pragma unroll
        for (int s = 0; s < 8; ++s) {
          if (s < kTokensAhead) {
            tok[2 * s] = tok_ahead[2 * s], tok[2 * s + 1] = tok_ahead[2 * s + 1];
          } else {
            load_tokens(kc, s, a_row0_ok, tok[2 * s], tok[2 * s + 1]);
          }
        }
#pragma unroll
        for (int s = 0; s < kTokensAhead; ++s)
          load_tokens(kc + 1, s, a_row0_ok && i + 1 < my_chunks, tok_ahead[2 * s], tok_ahead[2 * s + 1]);
      }
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        if constexpr (NARROW) {
          uint32_t tok0, tok1;
          if constexpr (TOKENS_FIRST) tok0 = tok[2 * s], tok1 = tok[2 * s + 1];
          else load_tokens(kc, s, a_row0_ok, tok0, tok1);
#pragma unroll
          for (int q = 0; q < NT / 2; ++q) {
            uint32_t w[4];  // A fragment: rows g (tile 2q) and g + 8 (tile 2q + 1), k pairs 2t and 2t + 8
#pragma unroll
            for (int j = 0; j < 2; ++j) decode_step(2 * q + j, s, w[j], w[2 + j]);
            mma_bf16(acc[0][q], w, tok0, tok1);
          }
        } else {
          uint32_t a[AM][4];
          if constexpr (kConfigs[CFG].a_in_registers) {
            const int k = kc * kChunkK + 16 * s;  // fragment: rows g / g+8, k + 2t (+1) and k + 8 + 2t (+1)
            a[0][0] = a_row0_ok ? ldg_u32(a_row0 + k) : 0u;
            a[0][1] = a_row1_ok ? ldg_u32(a_row1 + k) : 0u;
            a[0][2] = a_row0_ok ? ldg_u32(a_row0 + k + 8) : 0u;
            a[0][3] = a_row1_ok ? ldg_u32(a_row1 + k + 8) : 0u;
          } else {
#pragma unroll
            for (int mt = 0; mt < AM; ++mt) {
              const int r = (mt * WM + wm) * 16 + (lane % 16);
              const int ch = 2 * s + lane / 16;
              ldmatrix_x4(a[mt], sa + r * 256 + ((ch ^ (r & 7)) * 16));
            }
          }
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            uint32_t b0, b1;
            decode_step(nt, s, b0, b1);
#pragma unroll
            for (int mt = 0; mt < AM; ++mt) mma_bf16(acc[mt][nt], a[mt], b0, b1);
          }
        }
      }
    }
  };
  // The K loop. Stage i landed for all threads; stage i-1 is free to refill after the barrier.
  auto k_loop = [&](auto&& compute) {
    for (int i = 0; i < my_chunks; ++i) {
      const int kc = kc_begin + i;
      cp_async_wait<S - 2>();
      // WARP_SPLIT: each warp has its own ring and the LUT was published before the loop, so a warp
      // barrier suffices. (A CTA barrier here tied the splits' chunks together: 15 % of GEMM1's stall
      // samples at one token of Qwen3.5-397B; the warp barrier made one token 2 % faster on the H200,
      // docs/perf/2026-11-30-h200-r10.md.)
      if constexpr (WARP_SPLIT) __syncwarp(); else __syncthreads();
      if (i + S - 1 < my_chunks) load_stage(kc + S - 1, (i + S - 1) % S);
      cp_async_commit();
      compute(i, kc);
    }
  };
  if constexpr (WARP_SPLIT) __syncthreads();  // the LUT, built by all the CTA's threads
  using TableScales = std::false_type;
  using NormalScales = std::true_type;
  if (narrow) {
    if constexpr (c.a_in_registers && EPI != GemmEpilogue::kSwigluNvfp4) {
      const std::integral_constant<int, -1> narrow_tag;
      if constexpr (ALL_NORMAL) k_loop([&](int i, int kc) { chunk_mma(narrow_tag, NormalScales{}, i, kc); });
      else k_loop([&](int i, int kc) { chunk_mma(narrow_tag, TableScales{}, i, kc); });
    }
  } else if constexpr (WM == 1) {
    // One warp row: one branch per CTA picks the loop instance for the live fragments (and, for the
    // decode tile, the scale path).
    with_static_count<MT, 1, 0>(active_mt, [&](auto am_tag) {
      if constexpr (ALL_NORMAL) k_loop([&](int i, int kc) { chunk_mma(am_tag, NormalScales{}, i, kc); });
      else k_loop([&](int i, int kc) { chunk_mma(am_tag, TableScales{}, i, kc); });
    });
  } else {
    // Warp rows may differ in live fragments. Every warp runs the one loop, so all reach the same
    // __syncthreads() (the .aligned barrier: per-row loop instances, each with its own barrier, made the
    // warps reach different ones, undefined in PTX; compute-sanitizer synccheck flagged it), and picks
    // its count per chunk.
    k_loop([&](int i, int kc) {
      with_static_count<MT, 1, 0>(active_mt, [&](auto am_tag) { chunk_mma(am_tag, TableScales{}, i, kc); });
    });
  }
  cp_async_wait<0>();
  if constexpr (WARP_SPLIT) {
    // Warps 1.. leave their sums in their drained rings; warp 0 adds them in warp (= K) order.
    float4* mine = reinterpret_cast<float4*>(ring);
    if (k_split > 0) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mine[nt * 32 + lane] = make_float4(acc[0][nt][0], acc[0][nt][1], acc[0][nt][2], acc[0][nt][3]);
    }
    __syncthreads();  // also: every warp's last ring reads are done
    if (k_split > 0) return;
    for (int w = 1; w < k_splits; ++w) {
      const float4* theirs = reinterpret_cast<const float4*>(smem + kLutBytes + size_t(w) * S * STAGE);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const float4 v = theirs[nt * 32 + lane];
        acc[0][nt][0] = __fadd_rn(acc[0][nt][0], v.x), acc[0][nt][1] = __fadd_rn(acc[0][nt][1], v.y);
        acc[0][nt][2] = __fadd_rn(acc[0][nt][2], v.z), acc[0][nt][3] = __fadd_rn(acc[0][nt][3], v.w);
      }
    }
  }

  // Epilogue. acc element q of (mt, nt): row (mt*WM + wm)*16 + g + 8*(q/2), column 2t + q%2 of tile nt;
  // fragments past active_mt hold no rows of this tile.
  const float in_scale = p.input_scale ? p.input_scale[expert] : 1.0f;
  // The fp32 factor of a tensor scale: 2^9 (the LUT's fold) * scale2 * the activation's input scale.
  auto tensor_factor = [&](const float* scale2) { return __fmul_rn(__fmul_rn(scale2[expert], 512.0f), in_scale); };
  if constexpr (c.a_in_registers && EPI != GemmEpilogue::kSwigluNvfp4) {
    if (narrow) {  // acc[0][q][j]: weight row g of tile 2q + j / 2 (gate / up for SwiGLU), token 2t + j % 2
      static_assert(WM == 1 && WN == 1 && NT % 2 == 0, "the narrow form: one warp per tile, n8 tiles in pairs");
      const float f1 = tensor_factor(p.scale_first);
      const float f2 = EPI == GemmEpilogue::kSwiglu ? tensor_factor(p.scale_second) : 0.0f;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int r = 2 * t + j;
        if (r >= rows) continue;
#pragma unroll
        for (int q = 0; q < NT / 2; ++q) {
          if constexpr (EPI == GemmEpilogue::kScaleFp32) {
            float* out = static_cast<float*>(p.out) + size_t(row0 + r) * p.n;
            const int col = (nb0 + 2 * q) * 8 + g;
            out[col] = __fmul_rn(acc[0][q][j], f1);
            out[col + 8] = __fmul_rn(acc[0][q][2 + j], f1);
          } else {
            __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out) + size_t(row0 + r) * (p.n / 2);
            out[(nb0 / 2 + q) * 8 + g] =
                __float2bfloat16_rn(swiglu_fp32(__fmul_rn(acc[0][q][j], f1), __fmul_rn(acc[0][q][2 + j], f2)));
          }
        }
      }
      return;
    }
  }
  if constexpr (EPI == GemmEpilogue::kScaleFp32) {
    const float f = tensor_factor(p.scale_first);
    float* out = static_cast<float*>(p.out);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = (mt * WM + wm) * 16 + g + 8 * half;
        if (r >= rows) continue;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int col = (nb0 + wn * (WARP_N / 8) + nt) * 8 + 2 * t;
          *reinterpret_cast<float2*>(out + size_t(row0 + r) * p.n + col) =
              make_float2(__fmul_rn(acc[mt][nt][2 * half], f), __fmul_rn(acc[mt][nt][2 * half + 1], f));
        }
      }
    }
  } else {
    const float fg = tensor_factor(p.scale_first);
    const float fu = tensor_factor(p.scale_second);
    const int inter = p.n / 2;
    __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out);
    const float quant_scale = (EPI == GemmEpilogue::kSwigluNvfp4) ? p.out_scale[expert] : 0.0f;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if (mt >= active_mt) break;  // warp-uniform: no rows of this tile left
      float h[NT / 2][4];
#pragma unroll
      for (int q = 0; q < NT / 2; ++q)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          h[q][i] = swiglu_fp32(__fmul_rn(acc[mt][2 * q][i], fg), __fmul_rn(acc[mt][2 * q + 1][i], fu));
      if constexpr (EPI == GemmEpilogue::kSwigluNvfp4) nvfp4_qdq_h_quad_blocks(h, quant_scale);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = (mt * WM + wm) * 16 + g + 8 * half;
        if (r >= rows) continue;
#pragma unroll
        for (int q = 0; q < NT / 2; ++q) {
          const int col = ((nb0 + wn * (WARP_N / 8)) / 2 + q) * 8 + 2 * t;
          *reinterpret_cast<__nv_bfloat162*>(out + size_t(row0 + r) * inter + col) =
              __floats2bfloat162_rn(h[q][2 * half], h[q][2 * half + 1]);
        }
      }
    }
  }
}

}  // namespace fp4moe::sm80_grouped_gemm
