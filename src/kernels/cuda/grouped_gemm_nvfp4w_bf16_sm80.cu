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
// tiles): A fragments come straight from global (no A stage, ~10 KB per CTA) and K may be split over
// gridDim.z CTAs whose fp32 partials reduce_splits_kernel adds in split order before the epilogue.
// Dequantization (exact): a nibble placed at bf16 bits [15] and [8:6] is e2m1 * 2^-126 (code 1 is a
// bf16 subnormal, which the bf16 multiply keeps); a 1 KB shared table maps each E4M3 code to
// bf16x2(scale * 2^117) built from integers (subnormal scales included: no exponent-shift trick).
// One __hmul2 gives e2m1 * scale * 2^-9 exactly; the epilogue multiplies 2^9 * tensor scale in fp32.
// Epilogues: SwiGLU (gate/up tiles interleaved by 8 rows) to BF16, or to NVFP4-dequantized BF16 for
// W4A4 (block amax over a lane quad), or scaled fp32 for GEMM2. No atomics: deterministic.
// Short tiles: the warp rows own interleaved m16 fragments and skip those past the expert's rows
// (ldmatrix, mma.sync and dequantization), so an expert of 80 rows costs 5 fragments, not the tile's.
#include <cuda_bf16.h>

#include <algorithm>

#include "common/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm80.h"
#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/common/static_count.cuh"
#include "kernels/cuda/nvfp4_decode_layout.h"
#include "kernels/cuda/nvfp4_device.cuh"

namespace fp4moe {
namespace {

using sm80::bf16x2_mul;
using sm80::cp_async16;
using sm80::cp_async_commit;
using sm80::cp_async_wait;
using sm80::mma_bf16;
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
// takes the first variant of its tile that has them (96 x 128 with 2 x 4 warps).
constexpr TileConfig kConfigs[] = {
    {16, 32, 1, 1, 4, true, 16},
    {64, 128, 2, 2, 3, false, 1},
    {96, 128, 1, 8, 3, false, 2},
    {96, 128, 2, 4, 3, false, 2},
    {128, 128, 2, 4, 3, false, 1}};
constexpr int kNumConfigs = sizeof(kConfigs) / sizeof(kConfigs[0]);
constexpr int kChunkK = 128;
constexpr int kLutBytes = 1024;

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
__host__ __device__ constexpr size_t smem_bytes(TileConfig c) { return kLutBytes + c.stages * stage_bytes(c); }

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
  float* partial;       // kPartialFp32: [gridDim.z][partial_rows][n]
  int64_t partial_rows;
};

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
template <int CFG, GemmEpilogue EPI>
__global__ void __launch_bounds__(kConfigs[CFG].warps_m* kConfigs[CFG].warps_n * 32, kConfigs[CFG].min_blocks)
    grouped_gemm_kernel(Params p) {
  constexpr TileConfig c = kConfigs[CFG];
  static_assert(supports_epilogue(c, EPI), "this warp layout cannot run this epilogue");
  constexpr int BM = c.bm, BN = c.bn, WM = c.warps_m, WN = c.warps_n, S = c.stages;
  constexpr int THREADS = c.warps_m * c.warps_n * 32;
  constexpr int WARP_M = BM / c.warps_m, WARP_N = BN / WN;
  constexpr int MT = WARP_M / 16, NT = WARP_N / 8;
  constexpr int A_BYTES = c.a_in_registers ? 0 : BM * 256, B_BYTES = (BN / 8) * 512, STAGE = int(stage_bytes(c));
  extern __shared__ __align__(16) uint8_t smem[];
  uint32_t* lut = reinterpret_cast<uint32_t*>(smem);
  uint8_t* ring = smem + kLutBytes;

  const int tile = blockIdx.y;
  if (tile >= *p.num_tiles) return;
  const int expert = p.tile_expert[tile];
  const int row0 = p.tile_row_begin[tile];
  const int rows = min(BM, p.expert_offsets[expert + 1] - row0);
  const int nb0 = blockIdx.x * (BN / 8);
  const int chunks = p.k / kChunkK;
  // Split-K over gridDim.z (decode): this CTA sums chunks [kc_begin, kc_begin + my_chunks).
  const int per_split = (chunks + gridDim.z - 1) / gridDim.z;
  const int kc_begin = min(chunks, int(blockIdx.z) * per_split);
  const int my_chunks = min(chunks, kc_begin + per_split) - kc_begin;
  const size_t expert_blocks = size_t(p.n / 8) * chunks;
  const uint8_t* wbase = p.w + (size_t(expert) * expert_blocks + size_t(nb0) * chunks) * 512;
  const uint8_t* sbase = p.ws + (size_t(expert) * expert_blocks + size_t(nb0) * chunks) * 64;
  // Source of the tile's row r (< rows): the sorted row itself, or the token it was routed from (the
  // gather folded into the A copies: hidden states are read in place, L2-resident, and the [T*K, K]
  // copy is neither written nor read).
  auto a_source_row = [&](int r) { return p.a_slots ? p.a_slots[row0 + r] / p.top_k : row0 + r; };

  for (int i = threadIdx.x; i < 256; i += THREADS) lut[i] = scale_lut_entry(i);
  const int live_frags = (rows + 15) / 16;  // m16 fragments holding rows of this tile
  const int read_rows = live_frags * 16;

  // cp.async issue with compile-time trip counts and per-thread bases hoisted out of the K loop (a
  // loop starting at threadIdx.x has an unknown trip count and compiles to generic, IMAD-heavy code).
  constexpr int A_CHUNKS = c.a_in_registers ? 0 : BM * 16, B_CHUNKS = (BN / 8) * 32, S_CHUNKS = (BN / 8) * 4;
  static_assert(A_CHUNKS % THREADS == 0 && B_CHUNKS % THREADS == 0, "tile copies must split evenly over threads");
  constexpr int A_ITERS = A_CHUNKS / THREADS, B_ITERS = B_CHUNKS / THREADS;
  constexpr int A_ROWS_PER_ITER = THREADS / 16, B_BLOCKS_PER_ITER = THREADS / 32;
  const int a_r = threadIdx.x / 16, a_ch = threadIdx.x % 16;  // A: row a_r + it * A_ROWS_PER_ITER, chunk a_ch
  int a_src_row[A_ITERS > 0 ? A_ITERS : 1];  // A's row behind each copied tile row (32 bits: registers)
#pragma unroll
  for (int it = 0; it < A_ITERS; ++it) {
    const int r = a_r + it * A_ROWS_PER_ITER;
    a_src_row[it] = r < rows ? a_source_row(r) : 0;
  }
  const __nv_bfloat16* a_chunk = p.a + a_ch * 8;
  const int b_nb = threadIdx.x / 32, b_l = threadIdx.x % 32;  // W: block b_nb + it * B_BLOCKS_PER_ITER, lane b_l
  const uint8_t* b_src = wbase + size_t(b_nb) * chunks * 512 + b_l * 16;
  const bool s_active = threadIdx.x < S_CHUNKS;  // scales: S_CHUNKS <= THREADS
  static_assert(S_CHUNKS <= THREADS, "one scale copy per thread at most");
  const uint8_t* s_src = sbase + size_t(threadIdx.x / 4) * chunks * 64 + (threadIdx.x % 4) * 16;
  auto load_stage = [&](int kc, int stage) {
    uint8_t* sa = ring + stage * STAGE;
    uint8_t* sb = sa + A_BYTES;
    uint8_t* ss = sb + B_BYTES;
#pragma unroll
    for (int it = 0; it < A_ITERS; ++it) {
      const int r = a_r + it * A_ROWS_PER_ITER;
      const bool valid = r < rows;
      if (r >= read_rows) continue;  // no fragment reads these rows (zero-filled only inside live fragments)
      cp_async16(sa + r * 256 + ((a_ch ^ (r & 7)) * 16), valid ? a_chunk + size_t(a_src_row[it]) * p.k + kc * kChunkK : p.a,
                 valid ? 16 : 0);
    }
#pragma unroll
    for (int it = 0; it < B_ITERS; ++it) {
      cp_async16(sb + (b_nb + it * B_BLOCKS_PER_ITER) * 512 + b_l * 16,
                 b_src + (size_t(it * B_BLOCKS_PER_ITER) * chunks + kc) * 512, 16);
    }
    if (s_active) cp_async16(ss + threadIdx.x * 16, s_src + size_t(kc) * 64, 16);
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
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
  // A in registers: this lane's rows g and g + 8 of the tile (masked past the expert's rows).
  const bool a_row0_ok = g < rows, a_row1_ok = g + 8 < rows;
  const __nv_bfloat16* a_row0 = p.a + size_t(a_source_row(a_row0_ok ? g : 0)) * p.k + 2 * t;
  const __nv_bfloat16* a_row1 = p.a + size_t(a_source_row(a_row1_ok ? g + 8 : 0)) * p.k + 2 * t;
  // The K loop for AM live fragments (a compile-time count, so the skipped fragments cost nothing
  // inside the loop; one branch per CTA picks the instance).
  auto mainloop = [&](auto am_tag) {
    constexpr int AM = decltype(am_tag)::value;
    for (int i = 0; i < my_chunks; ++i) {
      const int kc = kc_begin + i;
      cp_async_wait<S - 2>();
      __syncthreads();  // stage i landed for all threads; stage i-1 is free to refill; LUT visible
      if (i + S - 1 < my_chunks) load_stage(kc + S - 1, (i + S - 1) % S);
      cp_async_commit();
      if constexpr (AM > 0) {
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
#pragma unroll
        for (int s = 0; s < 8; ++s) {
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
            const uint32_t word = (s / 2 == 0) ? wq[nt].x : (s / 2 == 1) ? wq[nt].y : (s / 2 == 2) ? wq[nt].z : wq[nt].w;
            const uint32_t codes = (s < 4) ? sc[nt].x : sc[nt].y;
            const uint32_t scale = lut[(codes >> (8 * (s % 4))) & 0xFFu];
            uint32_t v[4];  // the step uses two of the word's outputs; the other two are not computed here
            decode_word(word, v);
            const uint32_t b0 = bf16x2_mul((s & 1) ? v[2] : v[0], scale);
            const uint32_t b1 = bf16x2_mul((s & 1) ? v[3] : v[1], scale);
#pragma unroll
            for (int mt = 0; mt < AM; ++mt) mma_bf16(acc[mt][nt], a[mt], b0, b1);
          }
        }
      }
    }
  };
  with_static_count<MT, 1, 0>(active_mt, mainloop);
  cp_async_wait<0>();

  // Epilogue. acc element q of (mt, nt): row (mt*WM + wm)*16 + g + 8*(q/2), column 2t + q%2 of tile nt;
  // fragments past active_mt hold no rows of this tile.
  const float in_scale = p.input_scale ? p.input_scale[expert] : 1.0f;
  if constexpr (EPI == GemmEpilogue::kPartialFp32) {
    // Raw sums of this K split (columns in the weight's repacked order); reduce_splits_kernel finishes.
    float* out = p.partial + size_t(blockIdx.z) * p.partial_rows * p.n;
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
              make_float2(acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
        }
      }
    }
  } else if constexpr (EPI == GemmEpilogue::kScaleFp32) {
    const float f = __fmul_rn(__fmul_rn(p.scale_first[expert], 512.0f), in_scale);
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
    const float fg = __fmul_rn(__fmul_rn(p.scale_first[expert], 512.0f), in_scale);
    const float fu = __fmul_rn(__fmul_rn(p.scale_second[expert], 512.0f), in_scale);
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

// Finishes split-K: sums the partials of each sorted row in split order, then the real epilogue.
// One CTA per sorted row; SwiGLU threads own 16 h columns (one NVFP4 block: 32 contiguous partial
// columns [gate 8 | up 8 | gate 8 | up 8] per split), GEMM2 threads 4 columns per step. Every split's
// loads are issued before the first add (a loop over a run-time split count with dependent adds
// was one memory latency per add: 14 us for one token's 10 rows of GEMM1); the adds keep split order.
template <GemmEpilogue EPI>
__global__ void reduce_splits_kernel(Params p, int splits, int num_experts, const int32_t* topk_ids,
                                     const int32_t* sorted_slots) {
  const int64_t row = blockIdx.x;
  if (row >= p.expert_offsets[num_experts]) return;
  const int expert = topk_ids[sorted_slots[row]];
  const float in_scale = p.input_scale ? p.input_scale[expert] : 1.0f;
  const size_t split_stride = size_t(p.partial_rows) * p.n;
  const float* src = p.partial + size_t(row) * p.n;
  auto add4 = [](float4 a, float4 v) {
    return make_float4(__fadd_rn(a.x, v.x), __fadd_rn(a.y, v.y), __fadd_rn(a.z, v.z), __fadd_rn(a.w, v.w));
  };
  if constexpr (EPI == GemmEpilogue::kScaleFp32) {
    const float f = __fmul_rn(__fmul_rn(p.scale_first[expert], 512.0f), in_scale);
    float* out = static_cast<float*>(p.out) + size_t(row) * p.n;
    for (int c4 = threadIdx.x; c4 < p.n / 4; c4 += blockDim.x) {
      float4 v[kMaxKSplits];
#pragma unroll
      for (int z = 0; z < kMaxKSplits; ++z)
        if (z < splits) v[z] = reinterpret_cast<const float4*>(src + z * split_stride)[c4];
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int z = 0; z < kMaxKSplits; ++z)
        if (z < splits) acc = add4(acc, v[z]);
      reinterpret_cast<float4*>(out)[c4] =
          make_float4(__fmul_rn(acc.x, f), __fmul_rn(acc.y, f), __fmul_rn(acc.z, f), __fmul_rn(acc.w, f));
    }
  } else {
    const float fg = __fmul_rn(__fmul_rn(p.scale_first[expert], 512.0f), in_scale);
    const float fu = __fmul_rn(__fmul_rn(p.scale_second[expert], 512.0f), in_scale);
    const int inter = p.n / 2;
    __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out) + size_t(row) * inter;
    for (int b = threadIdx.x; b < inter / 16; b += blockDim.x) {
      // sum[j]: partial column 32b + j summed over the splits in split order.
      float4 sum[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) sum[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int z = 0; z < kMaxKSplits; ++z) {
        if (z >= splits) break;
        const float4* s4 = reinterpret_cast<const float4*>(src + z * split_stride + 32 * b);
        float4 v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = s4[j];
#pragma unroll
        for (int j = 0; j < 8; ++j) sum[j] = add4(sum[j], v[j]);
      }
      const float* cols = reinterpret_cast<const float*>(sum);
      float h[16];
#pragma unroll
      for (int q = 0; q < 16; ++q) {
        const int gate_col = 16 * (q / 8) + q % 8;  // repacked order: [gate 8 | up 8] per 16
        h[q] = swiglu_fp32(__fmul_rn(cols[gate_col], fg), __fmul_rn(cols[gate_col + 8], fu));
      }
      if constexpr (EPI == GemmEpilogue::kSwigluNvfp4) {
        const float quant_scale = p.out_scale[expert];
        float amax = 0.0f;
#pragma unroll
        for (int q = 0; q < 16; ++q) amax = fmaxf(amax, fabsf(h[q]));
        const float bs = nvfp4_block_scale(amax, quant_scale);
#pragma unroll
        for (int q = 0; q < 16; ++q) h[q] = nvfp4_qdq_value(h[q], amax, bs, quant_scale);
      }
#pragma unroll
      for (int q = 0; q < 16; q += 2)
        *reinterpret_cast<__nv_bfloat162*>(out + 16 * b + q) = __floats2bfloat162_rn(h[q], h[q + 1]);
    }
  }
}

template <int CFG, GemmEpilogue EPI>
void launch_config(const Params& p, int64_t max_tiles, cudaStream_t stream, int splits = 1) {
  constexpr TileConfig c = kConfigs[CFG];
  if constexpr (!supports_epilogue(c, EPI)) {
    fail("grouped GEMM: tile configuration ", CFG, " cannot run this epilogue");
  } else {
    const dim3 grid(static_cast<unsigned>(p.n / c.bn), static_cast<unsigned>(max_tiles), static_cast<unsigned>(splits));
    grouped_gemm_kernel<CFG, EPI><<<grid, c.warps_m * c.warps_n * 32, smem_bytes(c), stream>>>(p);
    FP4MOE_CUDA_CHECK_LAUNCH();
  }
}

template <GemmEpilogue EPI>
void launch_epilogue(const Params& p, int cfg, int64_t max_tiles, cudaStream_t stream) {
  switch (cfg) {
    case 0: return launch_config<0, EPI>(p, max_tiles, stream);
    case 1: return launch_config<1, EPI>(p, max_tiles, stream);
    case 2: return launch_config<2, EPI>(p, max_tiles, stream);
    case 3: return launch_config<3, EPI>(p, max_tiles, stream);
    case 4: return launch_config<4, EPI>(p, max_tiles, stream);
  }
  static_assert(kNumConfigs == 5, "launch_epilogue lists every configuration");
  fail("grouped GEMM: unknown tile configuration ", cfg);
}

// The first configuration of the M tile that runs the epilogue.
int config_index(int tile_m, GemmEpilogue epilogue) {
  for (int i = 0; i < kNumConfigs; ++i)
    if (kConfigs[i].bm == tile_m && supports_epilogue(kConfigs[i], epilogue)) return i;
  fail("grouped GEMM: no tile configuration for tile_m = ", tile_m, " (have 16, 64, 96, 128)");
}

template <int CFG>
void configure_config() {
  const int bytes = static_cast<int>(smem_bytes(kConfigs[CFG]));
  FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_kernel<CFG, GemmEpilogue::kSwiglu>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  if constexpr (supports_epilogue(kConfigs[CFG], GemmEpilogue::kSwigluNvfp4)) {
    FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_kernel<CFG, GemmEpilogue::kSwigluNvfp4>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  }
  FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_kernel<CFG, GemmEpilogue::kScaleFp32>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  if constexpr (CFG == 0) {
    FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_kernel<CFG, GemmEpilogue::kPartialFp32>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  }
}

}  // namespace

size_t grouped_gemm_smem_bytes(int tile_m) {
  config_index(tile_m, GemmEpilogue::kSwiglu);  // unknown tiles are errors
  size_t bytes = 0;
  for (const TileConfig& c : kConfigs)
    if (c.bm == tile_m) bytes = std::max(bytes, smem_bytes(c));
  return bytes;
}

int grouped_gemm_k_splits(int64_t n, int64_t k, int64_t rows, int num_experts, int tile_m, int64_t wave_ctas) {
  FP4MOE_CHECK(wave_ctas > 0, "grouped_gemm_k_splits: wave_ctas must be > 0 (grouped_gemm_decode_wave_ctas), got ",
               wave_ctas);
  if (tile_m != kConfigs[0].bm || rows > kSplitMaxRows || rows <= 0) return 1;
  // The most splits that keep the one-warp CTAs within one wave of the device, >= 2 chunks per split.
  // Measured (H200, 132 x 16 CTAs, E=512, T=1..16): a second, partial wave costs more than the split
  // saves (GEMM1 at T=1: 3 splits 39 us, 4 splits 44 us, 1 split 42 us; GEMM2 at T=1 and everything
  // from T=2 on is fastest unsplit).
  const int64_t warps = (n / kConfigs[0].bn) * std::min<int64_t>(num_experts, rows);
  const int64_t splits = std::min<int64_t>(wave_ctas / warps, std::min<int64_t>(kMaxKSplits, (k / kChunkK) / 2));
  return static_cast<int>(std::max<int64_t>(1, splits));
}

int grouped_gemm_decode_wave_ctas(int device) {
  int sms = 0, per_sm = 0;
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  int current = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&current));
  FP4MOE_CUDA_CHECK(cudaSetDevice(device));
  // The partial-sum instance is the one the split launches; its residency is the decode tile's.
  const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, grouped_gemm_kernel<0, GemmEpilogue::kPartialFp32>, kConfigs[0].warps_m * kConfigs[0].warps_n * 32,
      smem_bytes(kConfigs[0]));
  FP4MOE_CUDA_CHECK(cudaSetDevice(current));
  FP4MOE_CUDA_CHECK(err);
  FP4MOE_CHECK(sms > 0 && per_sm > 0, "grouped GEMM: the decode tile does not fit an SM of device ", device);
  return sms * per_sm;
}

size_t grouped_gemm_split_workspace_bytes(int64_t max_n) {
  return static_cast<size_t>(kMaxKSplits) * static_cast<size_t>(kSplitMaxRows) * static_cast<size_t>(max_n) * 4;
}

void configure_grouped_gemm_kernels() {
  int device = 0, optin = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  configure_config<0>();
  configure_config<1>();
  // 96 and 128 rows need more than the ~100 KB per block of SM 8.6/8.9 parts; the backend never
  // picks them there (cuda_sm80_pipeline.cpp, large_tile_fits).
  if (static_cast<size_t>(optin) >= smem_bytes(kConfigs[2])) configure_config<2>();
  if (static_cast<size_t>(optin) >= smem_bytes(kConfigs[3])) configure_config<3>();
  if (static_cast<size_t>(optin) >= smem_bytes(kConfigs[4])) configure_config<4>();
}

void launch_grouped_gemm_nvfp4w_bf16(const GroupedGemmArgs& args, GemmEpilogue epilogue, int tile_m,
                                     cudaStream_t stream) {
  FP4MOE_CHECK(args.n > 0 && args.n % 128 == 0, "grouped GEMM: N (", args.n, ") must be a positive multiple of 128");
  FP4MOE_CHECK(args.k > 0 && args.k % kChunkK == 0, "grouped GEMM: K (", args.k, ") must be a positive multiple of 128");
  FP4MOE_CHECK(args.a && args.w_packed && args.w_scales && args.scale_first && args.out,
               "grouped GEMM: null operand pointer");
  FP4MOE_CHECK(epilogue == GemmEpilogue::kScaleFp32 || args.scale_second,
               "grouped GEMM: the SwiGLU epilogues need scale_second (up_scale2)");
  FP4MOE_CHECK(epilogue != GemmEpilogue::kSwigluNvfp4 || args.out_scale,
               "grouped GEMM: the NVFP4 SwiGLU epilogue needs out_scale (w2_input_scale)");
  if (args.max_tiles <= 0) return;
  FP4MOE_CHECK(args.max_tiles < 65536, "grouped GEMM: ", args.max_tiles, " M tiles exceed the grid limit");
  FP4MOE_CHECK(!args.a_slots || args.top_k >= 1, "grouped GEMM: reading A through a_slots needs top_k >= 1");
  Params p{static_cast<const __nv_bfloat16*>(args.a), args.a_slots, args.top_k, args.w_packed, args.w_scales, static_cast<int>(args.n),
           static_cast<int>(args.k), args.scale_first, args.scale_second, args.input_scale, args.out_scale,
           args.route.tile_expert, args.route.tile_row_begin, args.route.num_tiles, args.route.expert_offsets,
           args.out, args.split_workspace, args.rows};
  const int cfg = config_index(tile_m, epilogue);
  FP4MOE_CHECK(args.k_splits >= 0 && args.k_splits <= kMaxKSplits, "grouped GEMM: k_splits ", args.k_splits,
               " outside [0, ", kMaxKSplits, "]");
  FP4MOE_CHECK(args.k_splits <= 1 || (args.split_workspace && tile_m == kConfigs[0].bm && args.rows <= kSplitMaxRows),
               "grouped GEMM: forced k_splits ", args.k_splits, " needs the split workspace, tile_m 16 and rows <= ",
               kSplitMaxRows);
  const int splits = args.k_splits > 0 ? args.k_splits
                     : args.split_workspace
                         ? grouped_gemm_k_splits(args.n, args.k, args.rows, args.num_experts, tile_m, args.decode_wave_ctas)
                         : 1;
  if (splits > 1) {
    launch_config<0, GemmEpilogue::kPartialFp32>(p, args.max_tiles, stream, splits);
    const unsigned rows = static_cast<unsigned>(args.rows);
    switch (epilogue) {
      case GemmEpilogue::kSwiglu:
        reduce_splits_kernel<GemmEpilogue::kSwiglu><<<rows, 128, 0, stream>>>(
            p, splits, args.num_experts, args.route.topk_ids, args.route.sorted_slots);
        break;
      case GemmEpilogue::kSwigluNvfp4:
        reduce_splits_kernel<GemmEpilogue::kSwigluNvfp4><<<rows, 128, 0, stream>>>(
            p, splits, args.num_experts, args.route.topk_ids, args.route.sorted_slots);
        break;
      case GemmEpilogue::kScaleFp32:
        reduce_splits_kernel<GemmEpilogue::kScaleFp32><<<rows, 256, 0, stream>>>(
            p, splits, args.num_experts, args.route.topk_ids, args.route.sorted_slots);
        break;
      case GemmEpilogue::kPartialFp32:
        fail("grouped GEMM: kPartialFp32 is internal");
    }
    FP4MOE_CUDA_CHECK_LAUNCH();
    return;
  }
  switch (epilogue) {
    case GemmEpilogue::kSwiglu: return launch_epilogue<GemmEpilogue::kSwiglu>(p, cfg, args.max_tiles, stream);
    case GemmEpilogue::kSwigluNvfp4:
      return launch_epilogue<GemmEpilogue::kSwigluNvfp4>(p, cfg, args.max_tiles, stream);
    case GemmEpilogue::kScaleFp32: return launch_epilogue<GemmEpilogue::kScaleFp32>(p, cfg, args.max_tiles, stream);
    case GemmEpilogue::kPartialFp32: break;
  }
  fail("grouped GEMM: unknown epilogue");
}

}  // namespace fp4moe
