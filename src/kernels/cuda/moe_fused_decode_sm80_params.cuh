// The fused decode kernels' configuration and data layouts (moe_fused_decode_sm80.cu): CTA shapes and
// ring depths, the shared-memory carve of each launch (with launch 1's item table), the routing record
// launch 1 leaves for launch 2, the shared routing's workspace and the kernels' parameters. Host and
// device code (the plan sizes shared memory with the same functions the kernels carve it with); included
// by that one file, split off to keep it readable.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/moe_fused_decode_sm80.h"
#include "kernels/cuda/moe_route_device.cuh"
#include "kernels/cuda/nvfp4_decode_layout.h"

namespace fp4moe::fused_decode {

constexpr int kGemm1Warps = 8;  // launch 1: the K chunks of an item are split over the CTA's warps
constexpr int kEarlyActivationChunks = 2;  // launch 1 (W4A16): see the ring prime in moe_fused_decode_sm80.cu
// Launch 1's shapes: 16-row tiles of W13 per item (MT), activation mode, CTAs per SM for __launch_bounds__.
// Two tiles per item share each step's activation loads, ring bookkeeping, copy issue and loop control,
// and each item's barrier and epilogue, over twice the weight bytes: the kernel is bound by instruction
// issue, and at Qwen3.5-397B 32-row items were 3 % faster at one token and 6-9 % at 2-64 tokens than
// 16-row ones (H200, docs/perf/2026-12-01-h200-r19.md). Their ring takes 74 KB per CTA, so 2 CTAs per SM
// (16 warps; 112 registers on sm_90a, no spill; capped at 80 registers they measured within 2 %). At most
// 120 beside launch 2's 88 (2 x 120 + 3 x 88 = 504 of a sub-partition's 512): above, launch 2 no longer
// starts beside an SM's last launch-1 CTA (fused_decode_register_fit; 1.5-1.7 us at one token,
// docs/perf/2026-12-01-h200-r23.md). 16-row items (3 CTAs per SM at 80 registers) remain for
// devices where two 32-row CTAs do not fit an SM's shared memory. W4A4's h quantization needs the 16
// columns of an NVFP4 block, i.e. 32 rows of W13, in one warp.
struct Gemm1Shape {
  int row_tiles;
  bool w4a4;
  int ctas_per_sm;
  // The one-token twin of the shape without it (plan.gemm1_one_token_shape): the ring's first stages issued
  // right after the top-k (prime_first_item_early in the kernel file). A separate instance because the
  // shared one cost the chunks that never prime early: 2.3 % slower at one token of Qwen3.5-35B (H = 2048,
  // too few K steps per warp), while 1.4 % faster at Qwen3.5-397B and Qwen3-235B (docs/perf/2026-12-02-h200-r29.md).
  // Not for 16-row items (80 registers: ptxas spilled 8 bytes in the item epilogue) nor W4A4 (not measured).
  bool early_prime;
};
inline constexpr Gemm1Shape kGemm1Shapes[] = {{1, false, 3, false}, {2, false, 2, false}, {2, true, 2, false},
                                              {2, false, 2, true}};
inline constexpr int kGemm1ShapeCount = 4;
inline constexpr int kGemm1ShapeW4A4 = 2;
static_assert(sizeof(kGemm1Shapes) / sizeof(kGemm1Shapes[0]) == kGemm1ShapeCount, "count of the shapes");
static_assert(kGemm1Shapes[kGemm1ShapeW4A4].w4a4 && kGemm1Shapes[kGemm1ShapeW4A4].row_tiles == 2, "W4A4 needs MT = 2");
static_assert(kGemm1ShapeW4A4 == kFusedDecodeW4A16Gemm1ShapeCount, "the knob's W4A16 shapes come first");
static_assert(kFusedDecodeDefaultGemm1Shape >= 0 && kFusedDecodeDefaultGemm1Shape < kFusedDecodeW4A16Gemm1ShapeCount &&
                  kGemm1Shapes[0].row_tiles == 1,
              "a W4A16 default, and 16-row items to fall back to");
// The early-prime twin of `shape` (the same row tiles, mode and CTAs per SM), or -1.
constexpr int early_prime_twin(int shape) {
  if (shape < 0 || shape >= kGemm1ShapeCount || kGemm1Shapes[shape].early_prime) return -1;
  for (int twin = 0; twin < kGemm1ShapeCount; ++twin) {
    const Gemm1Shape a = kGemm1Shapes[shape], b = kGemm1Shapes[twin];
    if (b.early_prime && a.row_tiles == b.row_tiles && a.w4a4 == b.w4a4 && a.ctas_per_sm == b.ctas_per_sm) return twin;
  }
  return -1;
}
constexpr bool early_prime_twins_valid() {
  for (int shape = 0; shape < kGemm1ShapeCount; ++shape) {
    const Gemm1Shape s = kGemm1Shapes[shape];
    if (s.early_prime && (s.w4a4 || s.row_tiles != 2 || shape < kFusedDecodeW4A16Gemm1ShapeCount)) return false;
    if (!s.early_prime && early_prime_twin(shape) >= 0 && shape >= kFusedDecodeW4A16Gemm1ShapeCount) return false;
  }
  return early_prime_twin(kFusedDecodeDefaultGemm1Shape) >= 0;
}
static_assert(early_prime_twins_valid(), "early-prime twins: W4A16, 32-row, after the knob's shapes; the default has one");
// cp.async ring stages per warp: 3 steps in flight per warp; 74 KB per CTA with 32-row items (147 KB per
// SM at 2 CTAs), 37 KB with 16-row ones (111 KB at 3).
constexpr int kStages1 = 4;
constexpr int kTokenGroup = 8;  // tokens per GEMM1 item: one n8 tile (decode has ~1 token per expert)
constexpr int kLutBytes = 256 * 4;
static_assert(kStages1 >= 3, "the ring keeps at least two copies in flight");

// Launch 2's CTA shapes: warps per CTA (they share the units), ring stages per warp, CTAs per SM for
// __launch_bounds__, and 16-row tiles of H per CTA (row_tiles); the header says which chunks take which.
// 0, 1: 8 warps (6 stages) fit 16 warps per SM, 10 warps (5 stages, 88 registers) 20; each warp of 10
//   walks 8 instead of 10 units at one token of Qwen3.5-397B. Both measured the same within 1 % on the H200
//   (2026-11-30-h200-fused-decode-3.md); 12 warps needed <= 80 registers, spilled 148 bytes in the unit
//   loop and were 7-10 % slower (dropped).
// 2: two tiles per CTA (32 rows of H) share each step's h loads, ring bookkeeping, copy issue and loop
//   control, as launch 1's 32-row items do: 20 warps, 4 stages, 96 registers (4 bytes spilled), 211 KB
//   at Qwen3.5-397B. 16 warps x 5 stages measured 1 % slower at 8 tokens of Qwen3.5-397B, 10 warps x 4
//   stages 1-19 % slower at 1-8 tokens (docs/perf/2026-12-01-h200-r20.md). The one-tile instance only
//   (8-token accumulators: 64 would take 164 KB at 20 warps).
// Not kept: 10 warps x 8 stages for chunks of 1-3 tokens (104 KiB, so a CTA fits an SM beside a launch-1
// CTA and fills 7 of its warps' 8 units at one token before launch 1 ends): 1-3 % slower than shape 1.
struct Gemm2Shape {
  int warps, stages, ctas_per_sm, row_tiles;
};
inline constexpr Gemm2Shape kGemm2Shapes[] = {{8, 6, 1, 1}, {10, 5, 2, 1}, {20, 4, 1, 2}};
inline constexpr int kGemm2ShapeCount = kFusedDecodeGemm2ShapeCount;
static_assert(sizeof(kGemm2Shapes) / sizeof(kGemm2Shapes[0]) == kGemm2ShapeCount, "the header counts the shapes");
__host__ __device__ constexpr bool gemm2_shapes_valid() {
  for (const Gemm2Shape& s : kGemm2Shapes)
    if (s.stages < 3 || s.warps < 1 || s.ctas_per_sm < 1 || (s.row_tiles != 1 && s.row_tiles != 2)) return false;
  return true;
}
static_assert(gemm2_shapes_valid(), "the rings keep two copies in flight; one or two tiles per CTA");
static_assert(kFusedDecodeDefaultGemm2Shape >= 0 && kFusedDecodeDefaultGemm2Shape < kGemm2ShapeCount &&
                  kGemm2Shapes[kFusedDecodeDefaultGemm2Shape].row_tiles == 1 && kGemm2Shapes[0].row_tiles == 1 &&
                  kGemm2Shapes[0].ctas_per_sm == 1,
              "chunks of more than 8 tokens need a 16-row default and a fallback of one CTA per SM");
static_assert(kFusedDecodeGemm2FewShape >= 0 && kFusedDecodeGemm2FewShape < kGemm2ShapeCount,
              "the shape for chunks of 4..8 tokens");
static_assert(kFusedDecodeOneTokenGemm2Shape >= 0 && kFusedDecodeOneTokenGemm2Shape < kGemm2ShapeCount &&
                  kGemm2Shapes[kFusedDecodeOneTokenGemm2Shape].warps == kFusedDecodeOneTokenWarps &&
                  kGemm2Shapes[kFusedDecodeOneTokenGemm2Shape].row_tiles == 1,
              "the one-token shape: kFusedDecodeOneTokenWarps warps over 16 rows");
static_assert(kFusedDecodeGemm2FewFrom >= 1 && kFusedDecodeGemm2FewFrom <= kTokenGroup + 1, "a threshold within 1..9");
static_assert(kFusedDecodeMaxTokens % kTokenGroup == 0, "token chunks are whole token groups");
static_assert(kFusedDecodeGemm2FewUpTo == kTokenGroup, "launch 2's one-tile instances take one token group");

__host__ __device__ constexpr size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

// Launch 1's ring for MT 16-row tiles per item (kGemm1Shapes). The routing scratch (2 floats per expert
// and warp) shares it: routing is over before the first copy.
__host__ __device__ constexpr size_t ring1_bytes(int mt, int num_experts) {
  return size_t(kGemm1Warps) * kStages1 * mt * kDecodeBlockBytes > size_t(kGemm1Warps) * 2 * num_experts * 4
             ? size_t(kGemm1Warps) * kStages1 * mt * kDecodeBlockBytes
             : size_t(kGemm1Warps) * 2 * num_experts * 4;
}

// Launch 1's item sums: [2 item parities][warps][32 lanes][4 * mt] fp32.
__host__ __device__ constexpr size_t gemm1_red_bytes(int mt) { return size_t(2) * kGemm1Warps * 32 * 4 * mt * 4; }

// Where the early prime (kGemm1Shapes' twins) applies to one token: each warp's item has more K steps than
// the prime's kStages1 - 1 stages (the cursors then skip the ordinary prime without leaving the item), in
// whole rounds over the warps, and warp 0's routing scratch (2 floats per expert) fits the item sums' buffer.
__host__ __device__ constexpr bool early_prime_fits(int hidden, int num_experts, int mt) {
  return hidden % (kDecodeChunkK * kGemm1Warps) == 0 && hidden / kDecodeChunkK / kGemm1Warps > kStages1 - 1 &&
         size_t(2) * num_experts * 4 <= gemm1_red_bytes(mt);
}

// Launch 1's items per token group: row blocks of 16 MT rows of W13 (8 MT gate + 8 MT up rows).
__host__ __device__ constexpr int gemm1_row_blocks(int inter, int mt) { return 2 * inter / (kDecodeTileRows * mt); }
// The most items a chunk has (every slot its own token group): what the CTAs' item tables must hold together.
__host__ __device__ constexpr int64_t gemm1_max_items(int tk_cap, int inter, int mt) {
  return int64_t(tk_cap) * gemm1_row_blocks(inter, mt);
}

// One of a CTA's GEMM1 items, listed once per launch so that the cursors read it instead of recomputing it.
struct ItemEntry {
  uint64_t w13_offset;  // byte offset of the item's first layout block: expert, 16 MT rows (row block rb)
  int16_t first, ntok;  // the item's sorted slots [first, first + ntok)
  int16_t rb, j;        // its row block and touched-expert index
};
static_assert(sizeof(ItemEntry) == 16, "one 16-byte shared-memory load per entry");
// An item's w13_offset: W13 is [E][2I/16 tiles][H/128 chunks] layout blocks, an item MT tiles of row block
// rb. Launch 1's item table and its early prime (which finds the item before the table exists) both use it.
__host__ __device__ constexpr uint64_t gemm1_item_w13_offset(int expert, int rb, int mt, int chunks, int inter) {
  const size_t tile_stride = size_t(chunks) * kDecodeBlockBytes;
  return size_t(expert) * (size_t(2 * inter / kDecodeTileRows) * tile_stride) + size_t(mt) * rb * tile_stride;
}

// Byte offsets of launch 1's shared memory for E experts and tk_cap = kFusedDecodeMaxTokens * K slots.
struct Gemm1Smem {
  size_t lut, ring, red, route_ids, route_weights, scan, counts, ids, sorted, touched, toff, gprefix, g2j, slot_weight,
      misc, items, total;
};
// item_cap: the most items a CTA takes (plan: groups <= slots, so tk_cap x row blocks over the grid).
__host__ __device__ inline Gemm1Smem gemm1_smem(int num_experts, int tk_cap, int mt, int item_cap) {
  Gemm1Smem s{};
  s.lut = 0;
  s.ring = kLutBytes;
  s.red = s.ring + ring1_bytes(mt, num_experts);
  s.route_ids = s.red + gemm1_red_bytes(mt);
  s.route_weights = s.route_ids + kGemm1Warps * 32 * 4;
  s.scan = s.route_weights + kGemm1Warps * 32 * 4;
  s.counts = s.scan + kGemm1Warps * 8;  // scan scratch: one uint64 per warp
  s.ids = align16(s.counts + size_t(num_experts) * 4);
  s.sorted = align16(s.ids + size_t(tk_cap) * 2);
  s.touched = align16(s.sorted + size_t(tk_cap) * 2);
  s.toff = align16(s.touched + size_t(tk_cap) * 2);
  s.gprefix = align16(s.toff + size_t(tk_cap + 1) * 2);
  s.g2j = align16(s.gprefix + size_t(tk_cap + 1) * 2);  // token group -> touched expert index
  s.slot_weight = align16(s.g2j + size_t(tk_cap) * 2);  // routing weight of each slot (the record writer's)
  s.misc = s.slot_weight + size_t(tk_cap) * 4;
  s.items = s.misc + 16;  // 16-byte aligned: slot_weight is, and tk_cap * 4 is a multiple of 16 (tk_cap = 64 K)
  s.total = s.items + size_t(item_cap) * sizeof(ItemEntry);
  return s;
}

// Launch 2: LUT | ring | accumulators [warps][tokens][16 row_tiles] | touched, toff, sorted slots, their
// tokens (int16) | per sorted slot: routing weight * down_scale2 * 2^9 (* input scale) (fp32, from the
// record). `one_tile`: the instance for chunks of at most kTokenGroup tokens (accumulators for 8 tokens).
struct Gemm2Smem {
  size_t lut, ring, acc, touched, toff, sorted, sorted_token, slot_factor, total;
};
__host__ __device__ constexpr int gemm2_acc_tokens(bool one_tile) {
  return one_tile ? kTokenGroup : static_cast<int>(kFusedDecodeMaxTokens);
}
__host__ __device__ inline Gemm2Smem gemm2_smem(int tk_cap, Gemm2Shape shape, bool one_tile) {
  Gemm2Smem s{};
  s.lut = 0;
  s.ring = kLutBytes;
  s.acc = s.ring + size_t(shape.warps) * shape.stages * shape.row_tiles * kDecodeBlockBytes;
  s.touched = s.acc + size_t(shape.warps) * gemm2_acc_tokens(one_tile) * kDecodeTileRows * shape.row_tiles * 4;
  s.toff = align16(s.touched + size_t(tk_cap) * 2);
  s.sorted = align16(s.toff + size_t(tk_cap + 1) * 2);
  s.sorted_token = align16(s.sorted + size_t(tk_cap) * 2);
  s.slot_factor = align16(s.sorted_token + size_t(tk_cap) * 2);
  s.total = s.slot_factor + size_t(tk_cap) * 4;
  return s;
}

// What launch 1 leaves for launch 2 (device workspace, one chunk).
// Written by one CTA of launch 1, the record writer (the grid's last: it has the fewest items).
struct RoutingRecord {
  float* factor;        // [T*K] per sorted slot: its routing weight * down_scale2 * 2^9 (* w2 input scale)
  int32_t* touched;     // [n] touched experts, ascending
  int32_t* toff;        // [n + 1] first sorted slot of each touched expert
  int32_t* sorted;      // [T*K] slots sorted by expert, stable
  int32_t* num_touched; // [1]
  // Launch 2 reads the record before griddepcontrol.wait (it only needs the routing, which the writer
  // finishes long before launch 1's GEMM1 ends): `ready` is kRecordReady from the writer's release on;
  // `arrivals` counts launch 2's CTAs that saw it, and the last one clears `ready` for the next pair.
  // Launch 1 zeroes `arrivals` before its release, so any initial workspace contents work. Every entry
  // launch 2 needs is computed here, so its prologue is one round of independent loads.
  int32_t* ready;
  int32_t* arrivals;
};
constexpr int32_t kRecordReady = 0x52454144;  // any value a cleared or fresh (0xFF...) workspace does not hold

// Routing shared between launch 1's CTAs (from plan.route_share_from tokens on): CTA c routes token c
// (c, c + grid, ...) once, publishes its experts and weights here and sets the token's flag to this
// launch's tag = epoch + 1; every CTA waits for all T flags and reads the slots. Launch 2's CTA 0 bumps
// the epoch after launch 1 has completed, so the next launch's tag differs from every flag written so
// far, and neither the flags nor anything else need a reset (a fresh or cleared workspace holds no tag:
// 0xFF... reads as epoch -1, tag 0; zeros as tag 1).
struct SharedRoute {
  bool on;
  uint32_t* epoch;  // [1]
  uint32_t* flags;  // [kFusedDecodeMaxTokens]
  int32_t* ids;     // [T*K] expert of each slot
  float* weights;   // [T*K] routing weight of each slot
};

// W4A4: every slot's activation row quantized once (moe_fused_decode_sm80_w4a4.cuh), in units of 512
// columns (a warp, one NVFP4 block per lane), each with a flag set to the launch's tag (SharedRoute).
inline constexpr int kW4A4UnitColumns = 32 * 16;
__host__ __device__ constexpr int w4a4_units_per_row(int hidden) {
  return (hidden + kW4A4UnitColumns - 1) / kW4A4UnitColumns;
}
struct W4A4Rows {
  __nv_bfloat16* rows;  // [tk_cap, H]: slot s's row, quantize-dequantized with its expert's input scale
  uint32_t* flags;      // [tk_cap * w4a4_units_per_row(H)]
};

struct Gemm1Params {
  route_device::RouteParams route;  // tokens = this chunk's T
  SharedRoute share;
  const __nv_bfloat16* hidden;
  const uint8_t* w13;
  const float* gate_scale2;
  const float* up_scale2;
  const float* down_scale2;  // for the record's factors
  const float* in_scale;   // w13_input_scale (W4A4) or null
  const float* out_scale;  // w2_input_scale (W4A4) or null
  int hidden_size, inter, top_k, num_experts, tk_cap, item_cap;
  __nv_bfloat16* h;  // [T*K, I]
  RoutingRecord record;
  W4A4Rows w4a4;  // W4A4 only
};

struct Gemm2Params {
  const uint8_t* w2;
  uint32_t* share_epoch;  // SharedRoute::epoch: CTA 0 bumps it at its end (launch 1 has completed)
  const __nv_bfloat16* h;
  RoutingRecord record;
  int tokens, hidden_size, inter, top_k, tk_cap;
  __nv_bfloat16* out;  // [T, H]
};

}  // namespace fp4moe::fused_decode
