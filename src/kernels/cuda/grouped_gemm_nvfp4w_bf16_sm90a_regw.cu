// Grouped NVFP4-weight x BF16-activation GEMM for MoE prefill on Hopper, weights in registers
// (sm_90a ONLY: wgmma with A from registers, setmaxnreg). Second kernel of cuda.sm90.prefill.v1; the
// first (grouped_gemm_nvfp4w_bf16_sm90a.cu) writes dequantized weights to shared memory and its wgmma
// read both operands from there: ~165 B/clk of shared-memory traffic at the MMA peak against 128
// (docs/perf/2026-11-30-h200-sm90-prefill.md). Here the product is computed transposed,
// out^T[weight rows, tokens] = W x A^T: the weights are wgmma's A operand, decoded by the consumer
// threads from FP4 straight into the register fragment (exact, as the sm80 kernel), and the token
// rows (TMA, 128-byte swizzle) are the B operand, the only one read from shared memory; the token
// tile (64, 128 or 256, chosen per call from the rows per expert) pads small experts less, and a partial
// tile's wgmma N is its tokens rounded up to 32 (sm90a_wgmma.cuh), so the tensor cores skip its padding;
// tile 256's last tile of an expert also takes up to 64 rows past it (MTile tail: a second wgmma on the
// same weight registers), so those rows do not cost a second decode of the expert's weights.
// CTA = 3 warpgroups, one per SM, persistent: item i = (token tile i / units, unit i % units), a unit
// = `frags` 128-row N tiles; CTA c takes items c, c + grid, ... (static: deterministic, no atomics).
// WG0 (setmaxnreg 40): one thread issues per K block the token tile's TMA and the bulk copies of the
// unit's packed codes + E4M3 scales onto the stage's full barrier. GEMM1 (SwiGLU) may instead read its
// token rows straight from the hidden states through the sorted slots (no gather pass): then the
// producer's 128 threads copy them with cp.async into the 128-byte-swizzled tile, where the token tile
// table says it is faster (one TMA per 128-byte row was measured 19 % slower at qwen3-235b / 4096).
// WG1-2 (setmaxnreg 232): 64 or 128 weight rows each; per K block a 16-byte LDS + 8 table lookups per
// 64 rows -> 16 bf16x2 registers (decode_word: 10 integer operations per 4 bf16x2, then one HMUL2 each
// with the scale entry), then 4 (or 8) wgmma m64nTk16 with fp32 accumulators; the epilogues are the
// sm80 ones, transposed.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/common/static_count.cuh"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm90a.h"
#include "kernels/cuda/nvfp4_decode_layout.h"
#include "kernels/cuda/nvfp4_device.cuh"
#include "kernels/cuda/sm90a_async.cuh"
#include "kernels/cuda/sm90a_wgmma.cuh"

namespace fp4moe {
namespace {

using sm80::bf16x2_mul;
using sm80::scale_lut_entry;
using namespace sm90a;  // NOLINT(google-build-using-namespace): the PTX wrappers of this kernel family

// Configurations as data. Registers: 384 threads at one CTA per SM start at 168 each; the producer
// warpgroup gives back to 40 so the consumers may hold 232 (128 * 40 + 256 * 232 <= 65536): per
// fragment tokens / 2 accumulators, 16 operand registers and 12 for the next block's fetched codes.
struct RegwConfig {
  int tokens;          // token rows per tile = the widest wgmma N
  int frags;           // m64 weight fragments per consumer warpgroup: 1 -> 128 weight rows per item, 2 -> 256
  int stages;          // (token tile + packed weight blocks) stages between the producer and the consumers
  double tile_cost;    // cost of one token tile over all weight rows = tile_cost + column_cost x its wgmma
  double column_cost;  // N (tokens rounded up to 32); relative units, fitted on the H200 (see
                       // sm90_regw_choose_tile_tokens and docs/perf/2026-11-30-h200-sm90-prefill-r3.md)
  bool gemm1_slots;    // GEMM1 faster reading the hidden rows through the slots (cp.async) than with a
                       // gather pass + multicast TMA tiles (H200: docs/perf/2026-11-30-h200-r6.md)
  int tail_rows;       // MTile::tail_rows: an expert's last tile may hold tokens + tail_rows rows, read
                       // by a second wgmma of N = its tail rounded up to 32 on the same weight registers
};
// 256 weight rows per item where the accumulators fit (2 x tokens / 2 registers): the token tile is
// then read from L2 once per 256 weight rows instead of 128 (L2 -> SM traffic per MMA ~0.6x).
// Tile 256 takes a tail of 64 rows: an expert with 257..320 rows (the usual case at ~256 rows per
// expert, and 1024 + 1..64 at 1024) is then one item instead of a full one plus a 1..64-token one that
// decodes all the expert's weights again for at most a quarter of the MMA (measured 16 % of both GEMMs'
// time at qwen3-235b / 4096: docs/perf/2026-11-30-h200-r7.md). The wider stage leaves room for 5 stages;
// 160 accumulators + operands still fit the consumer registers (no spills, ptxas -v).
constexpr RegwConfig kRegwConfigs[] = {{64, 2, 12, 258.0, 2.58, true, 0},
                                       {128, 2, 8, 261.0, 2.59, true, 0},
                                       {256, 1, 5, 334.0, 2.67, false, 64}};
constexpr int kThreads = 384;
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kBn = kSm90RegwTileN, kBk = 64;
constexpr int kPackedBytes = kBn * kBk / 2;  // 4096
constexpr int kScaleBytes = kBn * kBk / 16;  // 512
constexpr int kRawBytes = kPackedBytes + kScaleBytes;

constexpr RegwConfig regw_config(int tokens) {
  for (const RegwConfig& c : kRegwConfigs)
    if (c.tokens == tokens) return c;
  return {0, 0, 0, 0.0, 0.0, false, 0};
}
// The host-side lookup of a token tile's configuration: an unknown tile is an error.
RegwConfig compiled_regw_config(int tile_tokens) {
  const RegwConfig c = regw_config(tile_tokens);
  FP4MOE_CHECK(c.tokens != 0, "sm90 regw GEMM: token tile ", tile_tokens, " is not compiled");
  return c;
}
template <int T>
struct RegwLayout {
  static constexpr RegwConfig cfg = regw_config(T);
  static constexpr int F = cfg.frags;
  static constexpr int X = cfg.tail_rows;
  static constexpr int kTileRows = T + X;              // token rows a stage holds (the tail's after the tile's)
  static constexpr int kABytes = kTileRows * kBk * 2;  // token tile: its rows of one 128-byte swizzle row
  static constexpr int kOffA = 0;
  static constexpr int kOffRaw = kOffA + cfg.stages * kABytes;  // per stage: F packed blocks (codes + scales)
  static constexpr int kOffLut = kOffRaw + cfg.stages * F * kRawBytes;
  static constexpr int kOffBar = kOffLut + 1024;
  static constexpr int kOffMeta = kOffBar + 2 * cfg.stages * 8;  // ItemMeta ring of stages + 1 items
  static constexpr int kSmemBytes = kOffMeta + (cfg.stages + 1) * 16 + 1024;  // + slack to align the base to 1024
  static_assert(cfg.tokens == T, "unknown token tile: add it to kRegwConfigs");
  static_assert(T % 64 == 0 && T >= 64 && T <= 256, "wgmma N (and the TMA box) must be 64..256 here");
  static_assert(X % 32 == 0 && X >= 0 && X < T, "a tail of whole 32-token wgmma columns, shorter than the tile");
  static_assert(F == 1 || F == 2, "one or two m64 fragments per consumer warpgroup");
  static_assert(kABytes % 1024 == 0 && kRawBytes % 16 == 0, "swizzled tiles 1024-aligned, bulk copies 16-aligned");
  static_assert(cfg.stages >= 2, "the pipeline needs two stages at least");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory above the sm_90 opt-in limit");
  static_assert(F * (kTileRows / 2 + 16 + 12) + 40 <= kConsumerRegs,
                "accumulators + operand registers + fetched codes + addressing must fit the consumer registers");
};
static_assert(kBk * 2 == 128 && kBn == 2 * 64, "one 128-byte swizzle row per K block; two m64 halves per block");
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 65536 && 65536 / kThreads >= 168,
              "register redistribution must fit the launch allocation");
static_assert(kProducerRegs % 8 == 0 && kConsumerRegs % 8 == 0 && kProducerRegs >= 24 && kConsumerRegs <= 256,
              "setmaxnreg takes multiples of 8 in [24, 256]");

// One work item's metadata, which the producer loads from global memory (two dependent loads: tile ->
// expert -> its end row, and the scales) and hands to the consumers through shared memory: were the
// consumers to load it at every item boundary, the tensor cores would idle ~1 us there. Slot
// it % (stages + 1) of the ring holds the CTA's item it; it is written after the producer waited for
// the item's first stage to be free, before that stage's full barrier can complete (the mbarrier
// arrive releases it, the consumers' wait acquires it), and it is rewritten only for item it + stages
// + 1, whose first stage the producer can fill only after every consumer warp released item it + 1's
// first block, i.e. after its epilogue of item it.
struct ItemMeta {
  int row0;            // the tile's first sorted row
  int rows;            // its rows, 1..T + tail rows (MTile)
  float scale_first;   // GEMM2's output scale or the gate's: weight_scale_2 x 512 x input scale
  float scale_second;  // SwiGLU: the up's; else unused
};
static_assert(sizeof(ItemMeta) == 16, "one 16-byte slot per item");

struct Params {
  const uint8_t* w;
  const uint8_t* ws;
  int n_tiles, n_units, k_blocks, n;  // n_units: items per token tile (ceil(n_tiles / frags))
  const float* scale_first;
  const float* scale_second;
  const float* input_scale;
  const int32_t* tile_expert;
  const int32_t* tile_row_begin;
  const int32_t* num_tiles;
  const int32_t* expert_offsets;
  const void* a;           // kSlots: the hidden states [tokens, K] (BF16, 16-byte aligned rows)
  const int32_t* a_slots;  // kSlots: sorted row r is hidden row a_slots[r] / top_k
  int top_k;
  int a_row16;             // kSlots: 16-byte units per hidden row (K / 8)
  void* out;
};

// C = 2: a cluster of two CTAs takes items (tile, unit 2v) and (tile, unit 2v + 1), so both need the same
// token tile at every K block: each CTA loads half of it with a multicast TMA into both CTAs (the L2 ->
// SM traffic of token tiles halves), and a stage is refilled only after the consumers of both CTAs
// released it (each consumer warp arrives on both CTAs' empty barriers).
// kSlots: the producer threads copy each token row of a tile from hidden row a_slots[r] / top_k with
// cp.async (no gathered copy; tmap_a unused; single CTAs: cp.async cannot multicast); else tmap_a maps
// the sorted rows in boxes of T / C rows and tmap_tail in boxes of tail_rows / C (tiles with a tail).
template <int T, GemmEpilogue EPI, int C, bool kSlots>
__global__ void __launch_bounds__(kThreads, 1) sm90_regw_kernel(const __grid_constant__ CUtensorMap tmap_a,
                                                                 const __grid_constant__ CUtensorMap tmap_tail, Params p) {
  static_assert(C == 1 || C == 2, "one CTA, or a cluster of two sharing the token tile");
  static_assert(!kSlots || (C == 1 && T % 16 == 0), "kSlots: single CTAs; 16 row groups of 8 chunk threads");
  using L = RegwLayout<T>;
  constexpr int S = L::cfg.stages, F = L::F, X = L::X;
  extern __shared__ uint8_t smem_raw[];
  // Align to 1024 by offsetting the shared array itself (keeps LDS/STS instead of generic accesses).
  uint8_t* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  uint32_t* lut = reinterpret_cast<uint32_t*>(smem + L::kOffLut);
  const uint32_t base = smem_u32(smem);
  const uint32_t bar_full = base + L::kOffBar, bar_empty = bar_full + 8 * S;

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      // The producer's expect_tx arrival (the TMA and bulk copies complete the bytes); kSlots: plus one
      // arrival per producer thread when its cp.async rows have landed.
      mbar_init(bar_full + 8 * s, kSlots ? 1 + 128 : 1);
      mbar_init(bar_empty + 8 * s, 8 * C);  // one arrival per consumer warp of each CTA writing here
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  for (int i = threadIdx.x; i < 256; i += kThreads) lut[i] = scale_lut_entry(i);
  if constexpr (C == 2)
    cluster_sync();  // the peer's barriers are initialized before any multicast or remote arrival
  else
    __syncthreads();

  // Work: item i = (token tile, unit); C = 2 pairs units 2v, 2v + 1 of a tile across the cluster.
  const int rank = C == 2 ? static_cast<int>(cluster_ctarank()) : 0;
  const int group = blockIdx.x / C, groups = gridDim.x / C, units_per_group = p.n_units / C;
  const int total_items = *p.num_tiles * units_per_group;
  const int my_items = group < total_items ? (total_items - 1 - group) / groups + 1 : 0;
  auto item_of = [&](int it, int& tile, int& u) {
    const int item = group + it * groups;
    tile = item / units_per_group;
    u = C * (item - tile * units_per_group) + rank;
  };
  const int KB = p.k_blocks;

  if (threadIdx.x < 128) {
    // ---- producer warpgroup: one thread issues the TMA and bulk copies; kSlots: all 128 threads also
    // copy the token rows with cp.async (thread = 16-byte chunk c of rows q, q + 16, ...) ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if (kSlots || threadIdx.x == 0) {
      constexpr int kRowsPerThread = kSlots ? L::kTileRows / 16 : 1;
      const int chunk = threadIdx.x % 8, q = threadIdx.x / 8;
      // The 128-byte swizzle by hand: chunk c of row r sits at 16 (c ^ (r % 8)) in the row's 128 bytes
      // (the layout the TMA writes and the wgmma descriptor reads); r % 8 = q % 8 for all of this thread's rows.
      const uint32_t row_dst = q * 128 + ((chunk ^ (q % 8)) * 16);
      const uint8_t* hidden = static_cast<const uint8_t*>(p.a) + chunk * 16;
      int b = 0;
#pragma unroll 1
      for (int it = 0; it < my_items; ++it) {
        int tile, u;
        item_of(it, tile, u);
        const int row0 = p.tile_row_begin[tile];
        // N tiles F*u .. F*u + F - 1 (the last may not exist when n_tiles is odd): blocks [nt][kb].
        const int blocks = min(F, p.n_tiles - F * u);
        const int expert = p.tile_expert[tile];
        const size_t blk0 = (size_t(expert) * p.n_tiles + F * u) * KB;
        const int rows_left = p.expert_offsets[expert + 1] - row0;  // >= 1: tiles exist for rows only
        const int rows = rows_left <= T + X ? rows_left : T;         // the MTile rule (moe_route_permute.h)
        const bool tail = X > 0 && rows > T;
        ItemMeta meta{row0, rows, 0.0f, 0.0f};
        if (threadIdx.x == 0) {
          const float in_scale = p.input_scale ? p.input_scale[expert] : 1.0f;
          meta.scale_first = __fmul_rn(__fmul_rn(p.scale_first[expert], 512.0f), in_scale);
          if constexpr (EPI == GemmEpilogue::kSwiglu)
            meta.scale_second = __fmul_rn(__fmul_rn(p.scale_second[expert], 512.0f), in_scale);
        }
        // kSlots: the consumers' wgmma read the tile's rows up to its tokens rounded up to 32; rows past
        // its tokens repeat its first token (finite data in columns the epilogue never writes). Row
        // q + 16 j comes from hidden row slot / top_k, in 16-byte units; ~0u: not copied.
        uint32_t src_row16[kRowsPerThread];
        if constexpr (kSlots) {
          const int used = (rows + 31) / 32 * 32;
#pragma unroll
          for (int j = 0; j < kRowsPerThread; ++j) {
            const int r = q + 16 * j;
            src_row16[j] = r < used ? uint32_t(p.a_slots[row0 + min(r, rows - 1)] / p.top_k) * uint32_t(p.a_row16) : ~0u;
          }
        }
#pragma unroll 1
        for (int kb = 0; kb < KB; ++kb, ++b) {
          const int stage = b % S;
          mbar_wait(bar_empty + 8 * stage, ((b / S) & 1) ^ 1);
          const uint32_t full = bar_full + 8 * stage;
          const uint32_t a_dst = base + L::kOffA + stage * L::kABytes;
          if constexpr (kSlots) {
            const uint8_t* src_kb = hidden + kb * 128;
#pragma unroll
            for (int j = 0; j < kRowsPerThread; ++j)
              if (src_row16[j] != ~0u) cp_async_16(a_dst + row_dst + j * 16 * 128, src_kb + size_t(src_row16[j]) * 16);
            cp_async_arrive_noinc(full);  // once this thread's copies have landed
          }
          if (threadIdx.x != 0) continue;
          if (kb == 0) reinterpret_cast<ItemMeta*>(smem + L::kOffMeta)[it % (S + 1)] = meta;
          mbar_arrive_expect_tx(full, (kSlots ? 0 : (tail ? T + X : T) * kBk * 2) + blocks * kRawBytes);
          if constexpr (!kSlots) {
            if constexpr (C == 2)  // rows [T/2 rank, +T/2) of the tile into both CTAs (box of T/2 rows)
              tma_load_2d_multicast(a_dst + rank * (T / 2) * 128, &tmap_a, kb * kBk, row0 + rank * (T / 2), full, 0x3);
            else
              tma_load_2d(a_dst, &tmap_a, kb * kBk, row0, full);
            if constexpr (X > 0) {
              if (tail) {  // the tail rows after the tile's, the same way (box of X / C rows)
                const int r = T + rank * (X / C);
                if constexpr (C == 2)
                  tma_load_2d_multicast(a_dst + r * 128, &tmap_tail, kb * kBk, row0 + r, full, 0x3);
                else
                  tma_load_2d(a_dst + r * 128, &tmap_tail, kb * kBk, row0 + r, full);
              }
            }
          }
#pragma unroll
          for (int j = 0; j < F; ++j) {
            if (j >= blocks) break;
            const uint32_t raw = base + L::kOffRaw + (stage * F + j) * kRawBytes;
            const size_t blk = blk0 + size_t(j) * KB + kb;
            bulk_load(raw, p.w + blk * kPackedBytes, kPackedBytes, full);
            bulk_load(raw + kPackedBytes, p.ws + blk * kScaleBytes, kScaleBytes, full);
          }
        }
      }
    }
    if constexpr (C == 2) cluster_sync();  // matches the consumers' final one (see the end)
    return;
  }

  // ---- consumer warpgroups ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
  const int cw = (threadIdx.x - 128) / 128;
  const int wq = (threadIdx.x / 32) % 4;  // warp within the warpgroup: 16 weight rows of each fragment
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // F = 1: both warpgroups on the item's one block, fragment (64-row half) cw. F = 2: warpgroup cw on
  // block cw (N tile 2u + cw), both halves.
  const int slot = F == 1 ? 0 : cw;
  auto half_of = [&](int fi) { return F == 1 ? cw : fi; };

  // One K block in two steps: fetch (wait for the stage, its codes and their table entries, plain
  // registers, so it may overlap this warpgroup's running wgmma), then decode into the fragments.
  struct Fetched {
    uint32_t words[4], lo[4], hi[4];
  };
  auto fetch_block = [&](Fetched (&r)[F], int blk) {
    const int stage = blk % S;
    mbar_wait(bar_full + 8 * stage, (blk / S) & 1);
    // kSlots: the token rows were written by cp.async (generic proxy); the wgmma read them through the
    // async proxy.
    if constexpr (kSlots) fence_proxy_async();
    const uint8_t* raw = smem + L::kOffRaw + (stage * F + slot) * kRawBytes;
#pragma unroll
    for (int fi = 0; fi < F; ++fi) {
      const int h = half_of(fi);
      const uint4 w = *reinterpret_cast<const uint4*>(raw + ((h * 4 + wq) * 32 + lane) * 16);
      const uint8_t* sc = raw + kPackedBytes + (h * 64 + wq * 16 + g) * 4;  // row g's 4 codes; row g + 8 at +32
      const uint32_t c_lo = *reinterpret_cast<const uint32_t*>(sc), c_hi = *reinterpret_cast<const uint32_t*>(sc + 32);
      r[fi].words[0] = w.x, r[fi].words[1] = w.y, r[fi].words[2] = w.z, r[fi].words[3] = w.w;
#pragma unroll
      for (int s = 0; s < 4; ++s) r[fi].lo[s] = lut[(c_lo >> (8 * s)) & 0xFFu], r[fi].hi[s] = lut[(c_hi >> (8 * s)) & 0xFFu];
    }
  };
  auto decode_block = [&](uint32_t (&f)[F][4][4], const Fetched (&r)[F]) {
#pragma unroll
    for (int fi = 0; fi < F; ++fi)
#pragma unroll
      for (int s = 0; s < 4; ++s) {  // k16 step s = NVFP4 block s of the K block
        uint32_t v[4];
        decode_word(r[fi].words[s], v);
        f[fi][s][0] = bf16x2_mul(v[0], r[fi].lo[s]);
        f[fi][s][1] = bf16x2_mul(v[1], r[fi].hi[s]);
        f[fi][s][2] = bf16x2_mul(v[2], r[fi].lo[s]);
        f[fi][s][3] = bf16x2_mul(v[3], r[fi].hi[s]);
      }
  };
  auto fence_frags = [&](uint32_t (&f)[F][4][4]) {
#pragma unroll
    for (int fi = 0; fi < F; ++fi)
#pragma unroll
      for (int s = 0; s < 4; ++s) fence_regs(f[fi][s]);
  };
  auto release = [&](int stage) {
    __syncwarp();
    if (lane == 0) {
      mbar_arrive(bar_empty + 8 * stage);
      if constexpr (C == 2) mbar_arrive_cluster(bar_empty + 8 * stage, rank ^ 1);  // the peer multicasts here too
    }
  };

  int b = 0;
#pragma unroll 1
  for (int it = 0; it < my_items; ++it) {
    int tile, u;
    item_of(it, tile, u);
    const int nt = F * u + slot;
    const bool active = nt < p.n_tiles;  // F = 2 with odd n_tiles: warpgroup 1 only paces the barriers
    float acc[F][L::kTileRows / 2];  // [0, T/2): the tile's tokens; [T/2, ...): its tail's
#pragma unroll
    for (int fi = 0; fi < F; ++fi) {
#pragma unroll
      for (int i = 0; i < L::kTileRows / 2; ++i) acc[fi][i] = 0.0f;
      fence_regs(acc[fi]);
    }
    // The operand registers `f` are written only after wait_group(0), when no wgmma reads them: a
    // write while a group runs makes ptxas serialize every wgmma (C7513), and decoding into other
    // registers and copying was seen to be wrong (ptxas merged the copies and placed the next
    // block's decode in the running wgmma's registers). What overlaps a running group is the fetch
    // of the next block (barrier wait, LDS, table lookups) into registers no wgmma reads; the other
    // consumer warpgroup's wgmma keep the tensor cores busy during the decode. (Two operand sets with
    // wait_group(1), which compiles cleanly, measured 3-5 % slower: docs/perf/...-sm90-prefill-r3.md.)
    uint32_t f[F][4][4];
    Fetched r[F];
    const ItemMeta* meta = reinterpret_cast<const ItemMeta*>(smem + L::kOffMeta) + it % (S + 1);
    int row0 = 0, rows = 0;
    if (active) {
      fetch_block(r, b);  // the wait for the item's first stage also makes its metadata visible
      row0 = meta->row0, rows = meta->rows;
      // The MMA covers the tile's tokens rounded up to 32 (an expert's last tile is usually partial),
      // with one wgmma of that N per step: the K loop is compiled once per width. B rows are 128
      // bytes and the first C / 2 accumulators hold tokens 0..C-1, so a prefix of the tile is a
      // prefix of both. Past T columns (a tail), a second wgmma of N = kCols - T takes the rows
      // after the tile's into accumulators T/2.. with the same weight registers.
      with_static_count<L::kTileRows, 32, 32>((max(rows, 1) + 31) / 32 * 32, [&](auto columns) {
        constexpr int kCols = decltype(columns)::value;
        constexpr int kMain = kCols < T ? kCols : T, kTail = kCols - kMain;
#pragma unroll 1
        for (int kb = 0; kb < KB; ++kb, ++b) {
          decode_block(f, r);
          const uint32_t b_addr = base + L::kOffA + (b % S) * L::kABytes;
          fence_frags(f);  // the fragments are complete before wgmma.fence
          wgmma_fence();
#pragma unroll
          for (int s = 0; s < 4; ++s)
#pragma unroll
            for (int fi = 0; fi < F; ++fi) {
              wgmma_rs<kMain>(*reinterpret_cast<float(*)[kMain / 2]>(acc[fi]), f[fi][s], smem_desc(b_addr + s * 32));
              if constexpr (kTail > 0)
                wgmma_rs<kTail>(*reinterpret_cast<float(*)[kTail / 2]>(acc[fi] + T / 2), f[fi][s],
                                smem_desc(b_addr + T * 128 + s * 32));
            }
          wgmma_commit();
          if (kb + 1 < KB) fetch_block(r, b + 1);
          wgmma_wait<0>();
          fence_frags(f);
          release(b % S);
        }
      });
    } else {
#pragma unroll 1
      for (int kb = 0; kb < KB; ++kb, ++b) {
        mbar_wait(bar_full + 8 * (b % S), (b / S) & 1);
        release(b % S);
      }
      continue;
    }
#pragma unroll
    for (int fi = 0; fi < F; ++fi) fence_regs(acc[fi]);

    // Epilogue. acc[fi][4j + q]: weight row 64 half_of(fi) + 16 wq + g + 8 (q / 2) of N tile nt,
    // token 8j + 2t + q % 2 of the tile.
    const int n0 = nt * kBn;
    if constexpr (EPI == GemmEpilogue::kScaleFp32) {
      const float sf = meta->scale_first;
#pragma unroll
      for (int fi = 0; fi < F; ++fi) {
        float* out = static_cast<float*>(p.out) + size_t(row0) * p.n + n0 + half_of(fi) * 64 + wq * 16 + g;
#pragma unroll
        for (int j = 0; j < L::kTileRows / 8; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const int tok = 8 * j + 2 * t + (q & 1);
            if (tok < rows) out[size_t(tok) * p.n + 8 * (q / 2)] = __fmul_rn(acc[fi][4 * j + q], sf);
          }
      }
    } else {
      // W13 rows are interleaved [gate 8 | up 8] per 16 (gate_up_interleaved_rows), so this lane holds
      // gate (row g) and up (row g + 8) of h column n0/2 + 32 half + 8 wq + g.
      const float fg = meta->scale_first, fu = meta->scale_second;
      const int inter = p.n / 2;
#pragma unroll
      for (int fi = 0; fi < F; ++fi) {
        __nv_bfloat16* out =
            static_cast<__nv_bfloat16*>(p.out) + size_t(row0) * inter + n0 / 2 + half_of(fi) * 32 + wq * 8 + g;
#pragma unroll
        for (int j = 0; j < L::kTileRows / 8; ++j)
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const int tok = 8 * j + 2 * t + q;
            if (tok < rows)
              out[size_t(tok) * inter] = __float2bfloat16_rn(
                  swiglu_fp32(__fmul_rn(acc[fi][4 * j + q], fg), __fmul_rn(acc[fi][4 * j + 2 + q], fu)));
          }
      }
    }
  }
  // C = 2: no CTA may exit while its peer can still multicast into its shared memory or arrive on its
  // barriers; the producer warpgroup takes part in the same cluster barrier.
  if constexpr (C == 2) cluster_sync();
}

// Resident 2-CTA clusters per device, token tile and epilogue. configure_sm90_regw_kernels queries them
// once per device, so a launch (possibly inside a CUDA-graph capture) only reads the table.
constexpr int tile_index(int tokens) { return tokens == 64 ? 0 : tokens == 128 ? 1 : 2; }
constexpr int epilogue_index(GemmEpilogue e) { return e == GemmEpilogue::kSwiglu ? 0 : 1; }
struct ClusterResidency {
  int device;
  int resident[3][2];  // [tile_index][epilogue_index]
};
std::mutex g_residency_mutex;
std::vector<ClusterResidency> g_residency;

int current_device() {
  int device = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}
cudaLaunchConfig_t cluster_launch_config(cudaLaunchAttribute& attribute, size_t smem, cudaStream_t stream) {
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = 2, attribute.val.clusterDim.y = 1, attribute.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  config.gridDim = dim3(2);  // the occupancy query's grid: one cluster (it answers for the whole device)
  return config;
}
template <int T, GemmEpilogue EPI>
int query_resident_clusters() {
  cudaLaunchAttribute attribute;
  cudaLaunchConfig_t config = cluster_launch_config(attribute, RegwLayout<T>::kSmemBytes, nullptr);
  int resident = 0;
  FP4MOE_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&resident, sm90_regw_kernel<T, EPI, 2, false>, &config));
  return resident;
}
int resident_clusters(int tokens, GemmEpilogue epilogue) {
  const int device = current_device();
  std::lock_guard<std::mutex> lock(g_residency_mutex);
  for (const ClusterResidency& r : g_residency)
    if (r.device == device) return r.resident[tile_index(tokens)][epilogue_index(epilogue)];
  fail("sm90 regw GEMM: configure_sm90_regw_kernels() was not called on device ", device);
}

template <int T, GemmEpilogue EPI, int C, bool kSlots>
void launch_kernel(const Sm90GemmArgs& args, const Params& p, int64_t groups, cudaStream_t stream) {
  // Sorted rows: boxes of the tile's rows and of its tail's (C = 2: each CTA loads half). Slots: no
  // tensor maps (cp.async).
  CUtensorMap map, tail_map;
  std::memset(&map, 0, sizeof(map));
  std::memset(&tail_map, 0, sizeof(tail_map));
  if constexpr (!kSlots) {
    map = make_bf16_rows_map(args.a, args.rows, args.k, T / C);
    if constexpr (RegwLayout<T>::X > 0) tail_map = make_bf16_rows_map(args.a, args.rows, args.k, RegwLayout<T>::X / C);
  }
  const auto kernel = sm90_regw_kernel<T, EPI, C, kSlots>;
  constexpr size_t kSmem = RegwLayout<T>::kSmemBytes;
  if constexpr (C == 1) {
    const int grid = static_cast<int>(std::min<int64_t>(args.num_sms, groups));
    kernel<<<grid, kThreads, kSmem, stream>>>(map, tail_map, p);
  } else {
    cudaLaunchAttribute attribute;
    cudaLaunchConfig_t config = cluster_launch_config(attribute, kSmem, stream);
    // Persistent: one wave of clusters. Clusters live within a GPC, so fewer than num_sms / 2 may fit.
    const int resident = resident_clusters(T, EPI);
    const int64_t max_groups = std::min<int64_t>(resident, args.num_sms / C);  // num_sms: the caller's cap
    FP4MOE_CHECK(max_groups > 0, "sm90 regw GEMM: no cluster of ", C, " CTAs fits (", resident, " resident, num_sms ",
                 args.num_sms, ")");
    config.gridDim = dim3(static_cast<unsigned>(C * std::min<int64_t>(max_groups, groups)));
    FP4MOE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, map, tail_map, p));
  }
  FP4MOE_CUDA_CHECK_LAUNCH();
}
template <int T, GemmEpilogue EPI>
void launch_tile(const Sm90GemmArgs& args, const Params& p, int cluster, int64_t groups, cudaStream_t stream) {
  if (cluster == 2) return launch_kernel<T, EPI, 2, false>(args, p, groups, stream);
  launch_kernel<T, EPI, 1, false>(args, p, groups, stream);
}
// Reading through the slots is compiled for GEMM1 (SwiGLU) only: GEMM2 reads h, which GEMM1 wrote in
// sorted-row order.
template <int T>
void launch_epi(const Sm90GemmArgs& args, const Params& p, int cluster, int64_t groups, GemmEpilogue epilogue,
                cudaStream_t stream) {
  switch (epilogue) {
    case GemmEpilogue::kSwiglu:
      if (args.a_slots) return launch_kernel<T, GemmEpilogue::kSwiglu, 1, true>(args, p, groups, stream);
      return launch_tile<T, GemmEpilogue::kSwiglu>(args, p, cluster, groups, stream);
    case GemmEpilogue::kScaleFp32:
      FP4MOE_CHECK(!args.a_slots, "sm90 regw GEMM: a_slots (rows read through the sorted slots) is compiled for the "
                                  "SwiGLU epilogue (GEMM1) only");
      return launch_tile<T, GemmEpilogue::kScaleFp32>(args, p, cluster, groups, stream);
    case GemmEpilogue::kSwigluNvfp4: break;
  }
  fail("sm90 regw GEMM: unsupported epilogue (W4A4 GEMM1 uses the first sm90 kernel)");
}
template <int T>
void set_smem_attributes() {
  for (const auto kernel :
       {sm90_regw_kernel<T, GemmEpilogue::kSwiglu, 1, false>, sm90_regw_kernel<T, GemmEpilogue::kScaleFp32, 1, false>,
        sm90_regw_kernel<T, GemmEpilogue::kSwiglu, 2, false>, sm90_regw_kernel<T, GemmEpilogue::kScaleFp32, 2, false>,
        sm90_regw_kernel<T, GemmEpilogue::kSwiglu, 1, true>})
    FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, RegwLayout<T>::kSmemBytes));
}

}  // namespace

void repack_nvfp4_for_sm90_regw(const Nvfp4View& m, std::span<const int64_t> source_rows, uint8_t* packed_out,
                                uint8_t* scales_out) {
  const int64_t N = m.rows, K = m.cols;
  FP4MOE_CHECK(N % kBn == 0, "repack_nvfp4_for_sm90_regw: N (", N, ") must be a multiple of ", kBn);
  FP4MOE_CHECK(K % kBk == 0, "repack_nvfp4_for_sm90_regw: K (", K, ") must be a multiple of ", kBk);
  FP4MOE_CHECK(source_rows.empty() || static_cast<int64_t>(source_rows.size()) == N,
               "repack_nvfp4_for_sm90_regw: row order has ", source_rows.size(), " entries for ", N, " rows");
  const int64_t k_blocks = K / kBk;
  auto source = [&](int64_t r) {
    const int64_t src = source_rows.empty() ? r : source_rows[r];
    FP4MOE_CHECK(src >= 0 && src < N, "repack_nvfp4_for_sm90_regw: source row ", src, " out of [0, ", N, ")");
    return src;
  };
  for (int64_t nt = 0; nt < N / kBn; ++nt) {
    int64_t src[kBn];
    for (int n = 0; n < kBn; ++n) src[n] = source(nt * kBn + n);
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      const int64_t blk = nt * k_blocks + kb;
      uint8_t* packed = packed_out + blk * kPackedBytes;
      for (int n = 0; n < kBn; ++n) std::memcpy(scales_out + blk * kScaleBytes + n * 4, m.scales + src[n] * K / 16 + kb * 4, 4);
      for (int grp = 0; grp < kBn / 16; ++grp)
        for (int lane = 0; lane < 32; ++lane)
          for (int s = 0; s < 4; ++s) {
            const int g = lane / 4, t = lane % 4;
            uint32_t word = 0;
            for (int pair = 0; pair < 4; ++pair) {
              const uint8_t* row = m.packed + src[grp * 16 + g + 8 * (pair & 1)] * K / 2;
              const int64_t k = kb * kBk + 16 * s + 8 * (pair >> 1) + 2 * t;  // even: one byte holds k, k + 1
              word |= kDecodeWordByteBits.bits[pair][row[k / 2]];
            }
            std::memcpy(packed + ((grp * 32 + lane) * 4 + s) * 4, &word, 4);  // little-endian word
          }
    }
  }
}

int sm90_regw_choose_tile_tokens(int64_t tokens, int top_k, int num_experts) {
  FP4MOE_CHECK(tokens >= 0 && top_k > 0 && num_experts > 0, "sm90_regw_choose_tile_tokens: bad shape");
  // Expected cost per expert: its full tiles cost tile_cost + column_cost x tokens, its last, partial
  // tile tile_cost + column_cost x (its rows rounded up to 32, the wgmma N the kernel then uses), or,
  // when it fits the tile's tail, the last full tile tile_cost + column_cost x (tokens + tail). The
  // tile cost is the per-item work that does not shrink with N (decode, barriers, wgmma latency), so
  // a tile with few rows still costs much. Rows per expert are taken as normal around the average with
  // sd = sqrt(average) (uniform routing), at z = -2..2 with binomial weights (1 4 6 4 1) / 16: run()
  // may not wait for the routing on the device. Fitted on the H200 on qwen3-235b-a22b and
  // qwen3.5-397b-a17b at 1024, 4096 and 16384 tokens (all 18 tile/shape points measured).
  const double avg = double(tokens) * top_k / num_experts, sd = std::sqrt(std::max(avg, 1.0));
  constexpr double kZ[5] = {-2, -1, 0, 1, 2}, kW[5] = {1.0 / 16, 4.0 / 16, 6.0 / 16, 4.0 / 16, 1.0 / 16};
  int best = 0;
  double best_cost = 0.0;
  for (const RegwConfig& c : kRegwConfigs) {
    double cost = 0.0;
    for (int i = 0; i < 5; ++i) {
      const double rows = std::ceil(std::max(1.0, avg + kZ[i] * sd));
      const double full = std::floor(rows / c.tokens), tail = rows - full * c.tokens;
      double expert_cost = full * (c.tile_cost + c.column_cost * c.tokens);
      if (tail > 0)  // its own item, or, within the tile's tail, more columns of the last full tile
        expert_cost += (full >= 1 && tail <= c.tail_rows ? 0.0 : c.tile_cost) + c.column_cost * std::ceil(tail / 32) * 32;
      cost += kW[i] * expert_cost;
    }
    if (best == 0 || cost < best_cost) best = c.tokens, best_cost = cost;
  }
  return best;
}

MTile sm90_regw_m_tile(int tile_tokens) {
  const RegwConfig c = compiled_regw_config(tile_tokens);
  return MTile{c.tokens, c.tail_rows};
}

bool sm90_regw_gemm1_reads_slots(int tile_tokens) { return compiled_regw_config(tile_tokens).gemm1_slots; }

size_t sm90_regw_smem_bytes() {
  return std::max({size_t(RegwLayout<64>::kSmemBytes), size_t(RegwLayout<128>::kSmemBytes),
                   size_t(RegwLayout<256>::kSmemBytes)});
}

void configure_sm90_regw_kernels() {
  encode_tiled_fn();
  set_smem_attributes<64>();
  set_smem_attributes<128>();
  set_smem_attributes<256>();
  ClusterResidency r{current_device(), {}};  // after the shared-memory attributes: the query uses them
  r.resident[0][0] = query_resident_clusters<64, GemmEpilogue::kSwiglu>();
  r.resident[0][1] = query_resident_clusters<64, GemmEpilogue::kScaleFp32>();
  r.resident[1][0] = query_resident_clusters<128, GemmEpilogue::kSwiglu>();
  r.resident[1][1] = query_resident_clusters<128, GemmEpilogue::kScaleFp32>();
  r.resident[2][0] = query_resident_clusters<256, GemmEpilogue::kSwiglu>();
  r.resident[2][1] = query_resident_clusters<256, GemmEpilogue::kScaleFp32>();
  std::lock_guard<std::mutex> lock(g_residency_mutex);
  for (ClusterResidency& existing : g_residency)
    if (existing.device == r.device) return void(existing = r);
  g_residency.push_back(r);
}

void launch_grouped_gemm_nvfp4w_bf16_sm90a_regw(const Sm90GemmArgs& args, MTile tile, GemmEpilogue epilogue,
                                                cudaStream_t stream, int cluster) {
  const int tile_tokens = tile.rows;
  const RegwConfig cfg = compiled_regw_config(tile_tokens);
  FP4MOE_CHECK(tile.tail_rows == cfg.tail_rows, "sm90 regw GEMM: the M tiles (", tile.rows, " rows + a tail of ",
               tile.tail_rows, ") are not the kernel's (", tile_tokens, " + ", cfg.tail_rows,
               "): align with sm90_regw_m_tile(", tile_tokens, ")");
  FP4MOE_CHECK(args.n > 0 && args.n % kBn == 0, "sm90 regw GEMM: N (", args.n, ") must be a positive multiple of ", kBn);
  FP4MOE_CHECK(args.k > 0 && args.k % kBk == 0, "sm90 regw GEMM: K (", args.k, ") must be a positive multiple of ", kBk);
  FP4MOE_CHECK(args.a && args.w_packed && args.w_scales && args.scale_first && args.out, "sm90 regw GEMM: null operand pointer");
  FP4MOE_CHECK(!args.a_slots || (args.top_k > 0 && args.rows % args.top_k == 0),
               "sm90 regw GEMM: with a_slots, rows (", args.rows, ") must be tokens x top_k (", args.top_k, ")");
  FP4MOE_CHECK(!args.a_slots || args.rows / args.top_k * (args.k / 8) < (int64_t{1} << 32) - 1,
               "sm90 regw GEMM: the hidden states (", args.rows / std::max(args.top_k, 1), " x ", args.k,
               ") are too large for 32-bit row offsets");
  FP4MOE_CHECK(reinterpret_cast<uintptr_t>(args.a) % 16 == 0 && reinterpret_cast<uintptr_t>(args.w_packed) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(args.w_scales) % 16 == 0,
               "sm90 regw GEMM: A and the weights must be 16-byte aligned (TMA / bulk copies)");
  FP4MOE_CHECK(epilogue == GemmEpilogue::kScaleFp32 || args.scale_second, "sm90 regw GEMM: SwiGLU needs scale_second");
  FP4MOE_CHECK(args.num_sms > 0, "sm90 regw GEMM: num_sms must be positive");
  if (args.max_tiles <= 0 || args.rows <= 0) return;
  const int64_t n_tiles = args.n / kBn, frags = cfg.frags;
  const int64_t n_units = (n_tiles + frags - 1) / frags;
  FP4MOE_CHECK(args.max_tiles * n_units < (int64_t{1} << 31), "sm90 regw GEMM: too many work items");
  const Params p{args.w_packed, args.w_scales, static_cast<int>(n_tiles), static_cast<int>(n_units), static_cast<int>(args.k / kBk),
                 static_cast<int>(args.n), args.scale_first, args.scale_second, args.input_scale,
                 args.route.tile_expert, args.route.tile_row_begin, args.route.num_tiles, args.route.expert_offsets,
                 args.a, args.a_slots, args.top_k, static_cast<int>(args.k / 8), args.out};
  FP4MOE_CHECK(cluster == 0 || cluster == 1 || cluster == 2, "sm90 regw GEMM: cluster size ", cluster, " is not 0 (auto), 1 or 2");
  FP4MOE_CHECK(cluster != 2 || n_units % 2 == 0, "sm90 regw GEMM: a 2-CTA cluster needs an even number of weight units per token tile (",
               n_units, ")");
  FP4MOE_CHECK(cluster != 2 || args.num_sms >= 2, "sm90 regw GEMM: a 2-CTA cluster needs num_sms >= 2 (", args.num_sms,
               ")");
  // Pairs of units share a token tile when there are pairs to make (every shape of the presets), the
  // caller's SM cap leaves room for a cluster and the device runs one (MIG / MPS limits may not).
  // Rows read through the slots (cp.async) run in single CTAs.
  FP4MOE_CHECK(!args.a_slots || cluster != 2, "sm90 regw GEMM: rows read through a_slots run in single CTAs (cluster 2 forced)");
  const int c = cluster != 0 ? cluster
                : args.a_slots ? 1
                               : (n_units % 2 == 0 && args.num_sms >= 2 && resident_clusters(tile_tokens, epilogue) > 0 ? 2 : 1);
  const int64_t groups = args.max_tiles * (n_units / c);  // upper bound on the work items per CTA group
  switch (tile_tokens) {
    case 64: return launch_epi<64>(args, p, c, groups, epilogue, stream);
    case 128: return launch_epi<128>(args, p, c, groups, epilogue, stream);
    case 256: return launch_epi<256>(args, p, c, groups, epilogue, stream);
    default: break;
  }
  fail("sm90 regw GEMM: token tile ", tile_tokens, " has no launch case");
}

}  // namespace fp4moe
