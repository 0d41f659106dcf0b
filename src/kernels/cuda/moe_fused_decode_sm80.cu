// Fused decode MoE kernels, SM80+ (mma.sync m16n8k16 BF16, fp32 accumulation). API: moe_fused_decode_sm80.h.
//
// Inputs: hidden [T, H] BF16 and router logits [T, E] for T <= kFusedDecodeMaxTokens tokens, expert
// weights in the nvfp4_decode_layout.h layout (weights are the mma A operand: 16 rows x 128-wide K
// chunks; tokens are the N = 8 columns). Why this shape: at decode the layer is a read of the touched
// experts' weights, so (1) every SM must stream weights (persistent grids over fine work items),
// (2) bytes in flight come from a private cp.async ring per warp (each lane copies and later reads only
// its own bytes, 512-byte runs per warp: no barriers in the K loop), and (3) instructions per weight are
// few (per-item source addresses, then a stride per step): 11
// integer ops decode 8 FP4 values to bf16x2, one HMUL2 per pair applies the block scale from a 1 KB
// table (4 scales per lane and chunk), and tokens fill the N dimension instead of padding M.
// Launch 1 (route + GEMM1 + SwiGLU): routes the tokens itself (one warp per token, the pipeline's
// routing code; below plan.route_share_from tokens every CTA routes them all, from there on each token is
// routed by one CTA and shared through the workspace) and sorts the slots by expert (stable), so no
// routing launch is needed; items = (expert, 8-token group, 32 rows of W13 = 2 x (8 gate + 8 up rows):
// two mma tiles share each step's activations and bookkeeping; 16 rows where two such CTAs do not fit an
// SM; W4A4's h quantization needs the 32), K split over the 8 warps, summed in warp order; W4A4 first
// quantizes each routed activation row once into the workspace (moe_fused_decode_sm80_w4a4.cuh). Launch 2
// (GEMM2 + combine): items = 16 rows of H, or 32 for chunks of 4-8 tokens where that leaves no SM more
// rows (two mma tiles share each step's h and bookkeeping); the CTA's warps (kGemm2Shapes) split the
// (expert, K chunk) units in contiguous ranges, each folds weight * down_scale2 * its dot over an
// expert's chunks into its own fp32 token x row accumulators, summed in warp order at the end. On SM90
// both are programmatic dependent launches: launch 2 reads the routing record as soon as launch 1's
// writer CTA has released it (a flag, long before launch 1 ends) and fills its first W2 ring stages
// before griddepcontrol.wait; only h waits for launch 1. All orders are fixed: bit-identical reruns. The
// per-lane steps (activation loads, a chunk's decode + mma, the lane's block copies) are in
// moe_fused_decode_sm80_steps.cuh, the slot sort in moe_fused_decode_sm80_slots.cuh, launch 2's kernel in
// moe_fused_decode_sm80_gemm2.cuh, the plan (shapes, grids, shared memory) in moe_fused_decode_sm80_plan.cu.
#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "common/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/moe_fused_decode_sm80.h"
#include "kernels/cuda/moe_fused_decode_sm80_params.cuh"
#include "kernels/cuda/moe_fused_decode_sm80_gemm2.cuh"
#include "kernels/cuda/moe_fused_decode_sm80_instances.cuh"
#include "kernels/cuda/moe_fused_decode_sm80_slots.cuh"
#include "kernels/cuda/moe_fused_decode_sm80_steps.cuh"
#include "kernels/cuda/moe_fused_decode_sm80_w4a4.cuh"
#include "kernels/cuda/moe_route_device.cuh"
#include "kernels/cuda/moe_route_permute.h"
#include "kernels/cuda/nvfp4_decode_layout.h"
#include "kernels/cuda/nvfp4_device.cuh"

namespace fp4moe {
namespace {

using sm80::bf16x2_mul;
using sm80::cp_async16;
using sm80::cp_async4;
using sm80::cp_async_commit;
using sm80::cp_async_wait;
using sm80::kScaleLutCompensation;
using sm80::mma_bf16;
using sm80::scale_lut_entry;
// The per-lane steps, the slot sort, and the kernels' configuration and layouts (the three headers).
using namespace fused_decode;

// The record writer's part of launch 1 (the whole CTA calls it; it has a CTA barrier): the routing record
// from the slot tables, then its release. Out of line: the other CTAs skip it, and inline its code lay
// between the instructions they run (launch 1 at one token pays for fetching skipped code, r22).
inline __device__ __noinline__ void write_routing_record(RoutingRecord record, const float* down_scale2,
                                                         const float* out_scale, SlotTables tables,
                                                         const float* slot_weight, int n_touched) {
  for (int i = threadIdx.x; i < n_touched; i += blockDim.x) record.touched[i] = tables.touched[i];
  for (int i = threadIdx.x; i <= n_touched; i += blockDim.x) record.toff[i] = tables.toff[i];
  for (int i = threadIdx.x; i < tables.toff[n_touched]; i += blockDim.x) record.sorted[i] = tables.sorted[i];
  for (int j = threadIdx.x; j < n_touched; j += blockDim.x) {
    const int e = tables.touched[j];
    const float in_scale = out_scale ? out_scale[e] : 1.0f;
    const float factor = __fmul_rn(__fmul_rn(down_scale2[e], kScaleLutCompensation), in_scale);
    for (int i = tables.toff[j]; i < tables.toff[j + 1]; ++i)
      record.factor[i] = __fmul_rn(slot_weight[tables.sorted[i]], factor);
  }
  if (threadIdx.x == 0) *record.num_touched = n_touched, *record.arrivals = 0;
  __syncthreads();  // (uniform: the whole writer CTA) every thread's record writes precede the release below
  if (threadIdx.x == 0) {
    __threadfence();
    atomicExch(record.ready, kRecordReady);
  }
}

// The early ring prime at one token (launch 1's early-prime twin; W4A16, 32-row items, early_prime_fits):
// each warp issues its ring's first stages of the CTA's first item before the slot sort and the item table,
// as soon as warp 0's top-k has found that item's expert. Item c = (q, rb) takes the q-th winner in
// selection order (the twin's item table deals one token's experts in that order), i.e. round q's winner:
// warp 0's round hook (EarlyPrimeHook) publishes it, meets the other warps at a named barrier and primes
// its own ring, and the rounds after it overlap every warp's copies. Why: at one token of Qwen3.5-397B the
// sort and table take ~1.2 us and the prime ~0.8 us with the HBM idle (docs/perf/2026-12-02-h200-r27.md),
// every microsecond before the prime reaches the layer's time (docs/perf/2026-12-02-h200-r28.md), and
// priming after all K rounds left their ~1.3 us on that path (docs/perf/2026-12-07-h100-r44.md); priming
// at round q made one token 4.1-4.8 % faster (docs/perf/2026-12-07-h100-r45.md).
//
// The warp's first kStages1 - 1 ring stages of item (expert, rb), copied as launch 1's item cursor
// (weight_source(0), issue()) would copy them; the ordinary prime then only moves the cursor. Launch 1
// checks the early item against its item table: misc[2] is kEarlyPrimed, kEarlyStray (stages to wait for
// before the ordinary prime overwrites them) or 0 (kNoEarlyItem: none issued). Out of line, as measured
// (r22: code that one token skips costs instruction fetch when inline).
inline constexpr uint64_t kNoEarlyItem = ~uint64_t(0);
inline constexpr int kEarlyPrimed = 1, kEarlyStray = 2;  // launch 1's check of the early stages
template <int MT>
__device__ __noinline__ void prime_first_item_early(uint32_t ring_offset, const uint8_t* w13, int expert, int rb,
                                                    int chunks, int inter) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t tile_stride = size_t(chunks) * kDecodeBlockBytes;
  const uint8_t* src =
      w13 + gemm1_item_w13_offset(expert, rb, MT, chunks, inter) + size_t(warp) * kDecodeBlockBytes + lane * 16;
  LaneRing ring(smem, ring_offset, warp, kStages1, MT * kDecodeBlockBytes, lane);
  for (int s = 0; s < kStages1 - 1; ++s) {
    copy_lane_stage<MT, CopyAddress::kOpaque>(ring, src, tile_stride);
    src += kGemm1Warps * kDecodeBlockBytes;
    cp_async_commit();
    ring.fill = ring.next(ring.fill);
  }
}

// Named barrier 1 of launch 1 (0 is __syncthreads'): at one token the other warps wait there from the
// start, and warp 0 joins once it knows the expert of the CTA's first item; the barrier orders its
// shared-memory write of that expert before their reads. A sync rather than an arrive: it costs warp 0
// nothing (the others are there long before), and an arrive (bar.arrive) made compute-sanitizer racecheck
// report the item sums' buffer across the later __syncthreads (r29, again in r45), a false report of
// its barrier accounting. The unaligned form: warp 0 reaches it at another instruction than the others.
inline constexpr int kEarlyItemBarrier = 1;
__device__ __forceinline__ void early_item_barrier() {
  asm volatile("barrier.sync %0, %1;" ::"n"(kEarlyItemBarrier), "n"(kGemm1Warps * 32) : "memory");
}

// Warp 0's top-k round hook in the early-prime twin (route_device::select_top_k): after round `round` (the
// rank q of the CTA's first item; -1: none) lane 0 publishes the winner in `announce`, the warp meets the
// others at the early-item barrier and primes its own ring; the rounds after it overlap every warp's copies.
// Round q's winner is the q-th valid one: a round without one (no candidate left) leaves every later round
// without one too.
template <int MT>
struct EarlyPrimeHook {
  const uint8_t* w13;
  int32_t* announce;  // shared memory
  uint32_t ring_offset;
  int round, chunks, inter;
  __device__ __forceinline__ void operator()(int k, int winner) const {
    if (k != round) return;
    if (threadIdx.x == 0) *announce = winner;
    early_item_barrier();
    if (winner >= 0) {
      const int rb = static_cast<int>(blockIdx.x) - round * gemm1_row_blocks(inter, MT);
      prime_first_item_early<MT>(ring_offset, w13, winner, rb, chunks, inter);
    }
  }
};

// kTableFree: W13's block scales are all positive normal E4M3 codes (BlockScales).
template <int kShape, bool kTableFree>
__global__ void __launch_bounds__(kGemm1Warps * 32, kGemm1Shapes[kShape].ctas_per_sm) fused_gemm1_kernel(Gemm1Params p) {
  constexpr int MT = kGemm1Shapes[kShape].row_tiles;
  constexpr bool kW4A4 = kGemm1Shapes[kShape].w4a4;
  // The item epilogue's warps and the row tiles each takes (see the item loop below).
  constexpr int kEpilogueTiles = kW4A4 ? MT : 1, kEpilogueWarps = 2 * MT / kEpilogueTiles;
  static_assert(kEpilogueWarps <= kGemm1Warps && (!kW4A4 || MT == 2), "epilogue ranks are warps; W4A4 blocks span 2 tiles");
  extern __shared__ __align__(16) uint8_t smem[];
  const Gemm1Smem L = gemm1_smem(p.num_experts, p.tk_cap, MT, p.item_cap);
  uint32_t* lut = reinterpret_cast<uint32_t*>(smem + L.lut);
  uint8_t* ring_bytes = smem + L.ring;
  int32_t* route_ids = reinterpret_cast<int32_t*>(smem + L.route_ids);
  float* route_weights = reinterpret_cast<float*>(smem + L.route_weights);
  uint64_t* scan = reinterpret_cast<uint64_t*>(smem + L.scan);
  int* counts = reinterpret_cast<int*>(smem + L.counts);
  int16_t* ids = reinterpret_cast<int16_t*>(smem + L.ids);
  int16_t* sorted = reinterpret_cast<int16_t*>(smem + L.sorted);
  int16_t* touched = reinterpret_cast<int16_t*>(smem + L.touched);
  int16_t* toff = reinterpret_cast<int16_t*>(smem + L.toff);
  int16_t* gprefix = reinterpret_cast<int16_t*>(smem + L.gprefix);
  int16_t* g2j = reinterpret_cast<int16_t*>(smem + L.g2j);
  float* slot_weight = reinterpret_cast<float*>(smem + L.slot_weight);
  float* red = reinterpret_cast<float*>(smem + L.red);
  int* misc = reinterpret_cast<int*>(smem + L.misc);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int T = static_cast<int>(p.route.tokens), K = p.top_k, E = p.num_experts, TK = T * K;
  if constexpr (!kTableFree)
    for (int i = threadIdx.x; i < 256; i += blockDim.x) lut[i] = scale_lut_entry(i);
  for (int e = threadIdx.x; e < E; e += blockDim.x) counts[e] = 0;
  // SM90+: a programmatic launch too. The logits and hidden rows come from the kernels before, and the
  // launch 2 before still reads the workspace (record, h): wait for it, then let launch 2 be scheduled
  // (it starts its prologue on SMs this grid leaves free and waits for us).
  pdl_chain_entry();

  // 1. Routing (score scratch in the ring, not yet in use), a warp per token. Few tokens: every CTA
  // routes them all itself, which waits for no other CTA; only the record writer needs the weights (the
  // items need the experts alone). More tokens (SharedRoute): warp 0 of CTA c routes tokens c, c + grid,
  // ... and publishes them; routing each token in every CTA cost up to 20 us of launch 1's prologue at 8
  // tokens of Qwen3.5-397B (3168 routings competing for the issue slots; docs/perf/2026-12-01-h200-r17.md).
  // One loop for both (one copy of the routing code: launch 1 at one token is sensitive to code fetch).
  const bool record_writer = blockIdx.x == gridDim.x - 1;
  const bool shared = p.share.on;
  const uint32_t tag = shared || kW4A4 ? __ldcg(p.share.epoch) + 1u : 0u;
  // The early-prime twin at one token (W4A16; the plan launches it only where early_prime_fits, checked
  // again here): every warp primes its ring as soon as warp 0's top-k round q has found the expert of the
  // CTA's first item (EarlyPrimeHook). Warp 0's routing scratch then lives in the item sums' buffer `red`
  // (unused until the first item ends), so that no warp's ring slice holds scratch.
  const bool early_prime =
      kGemm1Shapes[kShape].early_prime && T == 1 && !shared && early_prime_fits(p.hidden_size, E, MT);
  float* score = early_prime ? red : reinterpret_cast<float*>(ring_bytes) + size_t(warp) * 2 * E;
  // The first item's expert for the other warps: warp 1's routing output, unused at one token.
  int32_t* early_expert = route_ids + 32;
  const int early_round = static_cast<int>(blockIdx.x) / gemm1_row_blocks(p.inter, MT);
  using RoundHook = std::conditional_t<kGemm1Shapes[kShape].early_prime, EarlyPrimeHook<MT>, route_device::NoRoundHook>;
  RoundHook round_hook{};
  if constexpr (kGemm1Shapes[kShape].early_prime) {
    round_hook = EarlyPrimeHook<MT>{p.w13, early_expert, static_cast<uint32_t>(L.ring), early_prime ? early_round : -1,
                                    p.hidden_size / kDecodeChunkK, p.inter};
    if (early_prime && threadIdx.x == 0) *early_expert = -1;  // stays so where round q never comes (q >= K)
  }
  const int first_token = shared ? (warp == 0 ? static_cast<int>(blockIdx.x) : T) : warp;
  const int token_stride = shared ? static_cast<int>(gridDim.x) : kGemm1Warps;
  for (int tok = first_token; tok < T; tok += token_stride) {
    route_token_warp(p.route, tok, score, score + E, route_ids + warp * 32, route_weights + warp * 32,
                     shared || record_writer, round_hook);
    __syncwarp();
    if (lane < K) {
      const int e = route_ids[warp * 32 + lane];
      if (shared) {
        p.share.ids[tok * K + lane] = e;
        p.share.weights[tok * K + lane] = route_weights[warp * 32 + lane];
      } else {
        ids[tok * K + lane] = static_cast<int16_t>(e >= 0 && e < E ? e : -1);
        if (record_writer) slot_weight[tok * K + lane] = route_weights[warp * 32 + lane];
      }
    }
    __syncwarp();  // (shared) the lanes' writes precede lane 0's release
    if (shared && lane == 0) {
      __threadfence();
      atomicExch(p.share.flags + tok, tag);
    }
  }
  if constexpr (kGemm1Shapes[kShape].early_prime) {
    if (early_prime) {
      // Warp 0, at one token the only router, met the others in round q; where q >= K it meets them now.
      const int rb = static_cast<int>(blockIdx.x) - early_round * gemm1_row_blocks(p.inter, MT);
      if (warp == 0) {
        if (early_round >= K) early_item_barrier();
        if (threadIdx.x == 0) {  // read after the routing barrier
          const int expert = *early_expert;
          *reinterpret_cast<uint64_t*>(misc + 2) =
              expert >= 0 ? gemm1_item_w13_offset(expert, rb, MT, p.hidden_size / kDecodeChunkK, p.inter)
                          : kNoEarlyItem;
        }
      } else {
        early_item_barrier();
        const int expert = *early_expert;
        if (expert >= 0) prime_first_item_early<MT>(static_cast<uint32_t>(L.ring), p.w13, expert, rb,
                                                    p.hidden_size / kDecodeChunkK, p.inter);
      }
    }
  }
  if (shared) {  // every token's flag, then the slots
    if (warp == 0)
      for (int tok = lane; tok < T; tok += 32)
        while (static_cast<uint32_t>(load_acquire_gpu(reinterpret_cast<const int32_t*>(p.share.flags + tok))) != tag)
          __nanosleep(64);
    __syncthreads();  // orders every thread's reads below after warp 0's acquires
    for (int slot = threadIdx.x; slot < TK; slot += blockDim.x) {
      const int e = __ldcg(p.share.ids + slot);
      ids[slot] = static_cast<int16_t>(e >= 0 && e < E ? e : -1);
      if (record_writer) slot_weight[slot] = __ldcg(p.share.weights + slot);
    }
  }
  __syncthreads();
  // W4A4: this CTA's units of the quantized rows (moe_fused_decode_sm80_w4a4.cuh), from warp 1 on: warp 0
  // sorts the slots below meanwhile.
  if constexpr (kW4A4)
    quantize_units_w4a4(p.w4a4, p.hidden, p.in_scale, ids, TK, K, p.hidden_size, tag, kGemm1Warps);

  // 2. The slots sorted by expert, the touched experts in ascending order (moe_fused_decode_sm80_slots.cuh):
  // one warp's sort up to 32 slots, else the CTA's counting sort.
  const SlotTables tables{ids, sorted, touched, toff, gprefix, g2j, misc};
  if (TK <= 32) {
    if (warp == 0) fused_decode::sort_slots_warp<kTokenGroup>(tables, TK);
  } else {
    fused_decode::sort_slots_block<kGemm1Warps, kTokenGroup>(tables, TK, E, counts, scan);
  }
  __syncthreads();
  const int n_touched = misc[0], n_groups = misc[1];
  if (record_writer)
    write_routing_record(p.record, p.down_scale2, p.out_scale, tables, slot_weight, n_touched);
  int16_t* sorted_token = ids;  // the slots' experts are no longer needed: token of each sorted slot
  for (int i = threadIdx.x; i < TK; i += blockDim.x) sorted_token[i] = static_cast<int16_t>(sorted[i] / K);
  // This CTA's items c, c + grid, ... (q-major: item = q * row_blocks + rb), one thread per item.
  const int row_blocks = gemm1_row_blocks(p.inter, MT);
  const int chunks = p.hidden_size / kDecodeChunkK;
  const size_t tile_stride = size_t(chunks) * kDecodeBlockBytes;
  const int n_items = n_groups * row_blocks;
  const int my_items = static_cast<int>(blockIdx.x) < n_items
                           ? (n_items - 1 - static_cast<int>(blockIdx.x)) / static_cast<int>(gridDim.x) + 1
                           : 0;
  ItemEntry* items = reinterpret_cast<ItemEntry*>(smem + L.items);
  for (int i = threadIdx.x; i < my_items; i += blockDim.x) {
    const int index = static_cast<int>(blockIdx.x) + i * static_cast<int>(gridDim.x);
    const int q = index / row_blocks, rb = index - q * row_blocks;
    // The early-prime twin at one token deals the experts in selection order: q is the q-th valid winner
    // (EarlyPrimeHook's round q), its touched index j found in the ascending table; one token group each.
    int j = 0, group_in_expert = 0;
    if (early_prime) {
      int seen = -1, expert = -1;
      for (int k = 0; k < K && seen < q; ++k)
        if (route_ids[k] >= 0 && route_ids[k] < E) ++seen, expert = route_ids[k];
      while (j + 1 < n_touched && touched[j] != expert) ++j;
    } else {
      j = g2j[q];
      group_in_expert = q - gprefix[j];
    }
    const int first = toff[j] + group_in_expert * kTokenGroup;
    items[i] = ItemEntry{gemm1_item_w13_offset(touched[j], rb, MT, chunks, p.inter),
                         static_cast<int16_t>(first), static_cast<int16_t>(min(kTokenGroup, toff[j + 1] - first)),
                         static_cast<int16_t>(rb), static_cast<int16_t>(j)};
  }
  // The early prime's stages count only where they hold this CTA's first item (round q's winner is the
  // table's q-th expert, as it must be); stray ones are waited for before the ordinary prime overwrites
  // them. misc[2]: kEarlyPrimed, kEarlyStray or 0 (none issued).
  if (early_prime && threadIdx.x == 0) {
    const uint64_t early_offset = *reinterpret_cast<const uint64_t*>(misc + 2);
    misc[2] = my_items > 0 && early_offset == items[0].w13_offset ? kEarlyPrimed
              : early_offset != kNoEarlyItem                     ? kEarlyStray
                                                                 : 0;
  }
  __syncthreads();

  // 3. Items: (touched expert, 8-token group, 16*MT rows of W13), dealt round-robin over the CTAs
  // (consecutive items on consecutive CTAs, so on different SMs); an item's K chunks are split over the
  // CTA's warps (warp w: chunks w, w + 8, ...), whose partial sums meet in shared memory at the item's
  // end (fixed warp order). Each warp runs three cursors over its sequence of (item, chunk) steps: the
  // weight copies kStages1 - 1 steps ahead, the activation loads two steps ahead, the mma. A cursor
  // reads its item's entry once and then only adds a stride per step. (Until r18 each cursor walked the
  // (q, rb) sequence and recomputed the addresses from the slot tables: ~190 instructions per item and
  // warp at one token of Qwen3.5-397B, against ~700 in the item's 4 steps; docs/perf/2026-12-01-h200-r18.md.)
  const int per_warp = chunks > warp ? (chunks - warp + kGemm1Warps - 1) / kGemm1Warps : 0;
  // Lane (g, t)'s activations: its token's row (or the item's first token's, see load_activations),
  // chunk `warp`, columns 32t...
  auto activation_source = [&](int i) -> const __nv_bfloat16* {
    if (per_warp == 0 || i >= my_items) return p.hidden + 32 * t;  // never used (token 0's row is valid)
    const ItemEntry item = items[i];
    const int slot = g < item.ntok ? item.first + g : item.first;
    if constexpr (kW4A4)  // the slot's quantized row (moe_fused_decode_sm80_w4a4.cuh)
      return p.w4a4.rows + size_t(sorted[slot]) * p.hidden_size + warp * kDecodeChunkK + 32 * t;
    return p.hidden + size_t(sorted_token[slot]) * p.hidden_size + warp * kDecodeChunkK + 32 * t;
  };
  // ... and its bytes of the item's first layout block (null past the last item or without chunks).
  auto weight_source = [&](int i) -> const uint8_t* {
    if (per_warp == 0 || i >= my_items) return nullptr;
    return p.w13 + items[i].w13_offset + size_t(warp) * kDecodeBlockBytes + lane * 16;
  };
  constexpr int kStageBytes = MT * kDecodeBlockBytes;
  LaneRing ring(smem, L.ring, warp, kStages1, kStageBytes, lane);
  int fetch_item = 0;
  int fetch_chunk = 0;
  const uint8_t* fetch_src = weight_source(fetch_item);
  // The fetch cursor's step into the next ring stage; `copy` false: the stage is in flight already
  // (prime_first_item_early), only the cursor moves.
  auto fetch_step = [&](bool copy) {
    if (fetch_src) {
      if (copy) copy_lane_stage<MT, CopyAddress::kOpaque>(ring, fetch_src, tile_stride);
      fetch_src += kGemm1Warps * kDecodeBlockBytes;
      if (++fetch_chunk == per_warp) {
        fetch_chunk = 0;
        fetch_src = weight_source(++fetch_item);
      }
    }
    if (copy) cp_async_commit();
    ring.fill = ring.next(ring.fill);
  };
  auto issue = [&]() { fetch_step(true); };  // copies the weights of the next fetch step (if any)
  int act_item = 0;
  int act_chunk = 0;
  const __nv_bfloat16* act_src = activation_source(act_item);
  auto load_next_activations = [&](uint32_t (&b)[16]) {  // the activation cursor's step, then advance it
    load_activations<kW4A4>(act_src, b);
    // A warp without chunks (H / 128 < warps) keeps reading token 0's row start: stepping on would leave
    // the row (and, at one token, the hidden rows: compute-sanitizer memcheck with H = 256).
    act_src += per_warp > 0 ? kGemm1Warps * kDecodeChunkK : 0;
    if (per_warp > 0 && ++act_chunk == per_warp) {
      act_chunk = 0;
      act_src = activation_source(++act_item);
    }
  };
  // The first two steps' activations: W4A16 requests them before the ring's first copies where a warp's
  // item is at most kEarlyActivationChunks steps (H <= 2048: 2.4-4.7 % faster at one token of Qwen3-30B,
  // Qwen3.5-35B and Qwen3-Next-80B), else after them (H = 3072 and 4096 were 0.4-1.6 % slower with the
  // early loads; docs/perf/2026-12-02-h200-r26.md). W4A4 reads its quantized rows only after their flags.
  uint32_t b_even[16], b_odd[16];  // activations two steps ahead, used alternately (no register moves)
  const bool early_activations = !kW4A4 && per_warp <= kEarlyActivationChunks;
  if (early_activations) {
    load_next_activations(b_even);
    load_next_activations(b_odd);
  }
  const int early_state = early_prime ? misc[2] : 0;
  if (early_state == kEarlyStray) cp_async_wait<0>();
  for (int s = 0; s < kStages1 - 1; ++s) fetch_step(early_state != kEarlyPrimed);
  if constexpr (kW4A4) wait_units_w4a4(p.w4a4.flags, TK, p.hidden_size, tag);  // the ring fills meanwhile
  if (!early_activations) {
    load_next_activations(b_even);
    load_next_activations(b_odd);
  }
  int parity = 0;
  float acc[MT][4] = {};
  auto step = [&](uint32_t (&b)[16]) {
    cp_async_wait<kStages1 - 2>();
    issue();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const LaneBlock block = read_lane_block(smem, ring.read + mt * kDecodeBlockBytes, ring.scale_delta);
      mma_chunk<kTableFree>(acc[mt], block.row0, block.row1, block.scales, lut, b);
    }
    ring.read = ring.next(ring.read);
    load_next_activations(b);  // this buffer now fetches the step two ahead
    parity ^= 1;
  };
  for (int item_index = 0; item_index < my_items; ++item_index) {
    const ItemEntry item = items[item_index];
    for (int c = 0; c < per_warp; ++c) {
      if (parity == 0) step(b_even);
      else step(b_odd);
    }
    // The item's partial sums meet in shared memory (two buffers by item parity: the next item's
    // writes cannot overtake this item's readers, who are held at the next barrier), as [warp][value][lane]
    // so that an epilogue lane's reads (one value of every warp) are free of bank conflicts.
    const int buf = item_index & 1;
    float* item_red = red + size_t(buf) * kGemm1Warps * 4 * MT * 32;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) item_red[(warp * 4 * MT + 4 * mt + i) * 32 + lane] = acc[mt][i], acc[mt][i] = 0.0f;
    __syncthreads();
    // Epilogue, split over kEpilogueWarps warps (rotating with the item): lane (g, t) of epilogue rank r
    // takes token column 2t + qq (qq = r % 2) of the gate (row g) and up (row g + 8) sums of its row
    // tiles. Until r32 one warp did all 2 MT (row tile, qq) pairs while the other 7 went on and then
    // waited for it at the next item's barrier: the CTA barrier was launch 1's largest stall at 8 tokens
    // (r30). W4A4 keeps both row tiles in one warp (an NVFP4 block of h spans them). Same sums, same order.
    const int rank = static_cast<int>((unsigned(warp) + kGemm1Warps - unsigned(item_index) * kEpilogueWarps % kGemm1Warps) %
                                      kGemm1Warps);
    if (rank >= kEpilogueWarps) continue;
    const int qq = rank % 2, mt0 = kW4A4 ? 0 : rank / 2;
    const int e = touched[item.j], first = item.first, ntok = item.ntok, rb = item.rb;
    if (qq >= ntok) continue;  // no token column 2t + qq in this item (one token: qq = 1), the whole warp
    const float in_scale = kW4A4 ? p.in_scale[e] : 1.0f;
    const float fg = __fmul_rn(__fmul_rn(p.gate_scale2[e], kScaleLutCompensation), in_scale);
    const float fu = __fmul_rn(__fmul_rn(p.up_scale2[e], kScaleLutCompensation), in_scale);
    float hv[kEpilogueTiles];
#pragma unroll
    for (int k = 0; k < kEpilogueTiles; ++k) {
      const float* gate_sums = item_red + (4 * (mt0 + k) + qq) * 32 + lane;  // up: 2 values on
      float gate = gate_sums[0], up = gate_sums[2 * 32];
      for (int w = 1; w < kGemm1Warps; ++w) {
        gate = __fadd_rn(gate, gate_sums[w * 4 * MT * 32]);
        up = __fadd_rn(up, gate_sums[w * 4 * MT * 32 + 2 * 32]);
      }
      hv[k] = swiglu_fp32(__fmul_rn(gate, fg), __fmul_rn(up, fu));
    }
    if constexpr (kW4A4) {
      // W4A4: one NVFP4 block of h = 16 columns of a token = (mt 0..1) x (lanes g = 0..7, same t).
      const float quant_scale = p.out_scale[e];
      float amax = fmaxf(fabsf(hv[0]), fabsf(hv[1]));
      amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 4));
      amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 8));
      amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 16));
      const float bs = nvfp4_block_scale(amax, quant_scale);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) hv[mt] = nvfp4_qdq_value(hv[mt], amax, bs, quant_scale);
    }
    const int c = 2 * t + qq;
    if (c < ntok) {
      __nv_bfloat16* dst = p.h + size_t(sorted[first + c]) * p.inter + 8 * MT * rb + 8 * mt0 + g;
#pragma unroll
      for (int k = 0; k < kEpilogueTiles; ++k) dst[8 * k] = __float2bfloat16_rn(hv[k]);
    }
  }
  cp_async_wait<0>();
}

// Workspace carve: record (factor, touched, sorted, toff, num_touched, ready, arrivals) | shared routing
// (epoch, flags, ids, weights) | h | W4A4 only: quantized rows, their unit flags.
struct Workspace {
  RoutingRecord record;
  SharedRoute share;
  __nv_bfloat16* h;
  W4A4Rows w4a4;
};
size_t record_bytes(int tk_cap) { return align16(size_t(tk_cap) * 16 + 16); }  // up to arrivals
size_t share_bytes(int tk_cap) { return 16 + size_t(kFusedDecodeMaxTokens) * 4 + size_t(tk_cap) * 8; }
size_t head_bytes(int tk_cap) { return (record_bytes(tk_cap) + share_bytes(tk_cap) + 255) / 256 * 256; }
size_t h_bytes(const MoeProblem& problem, int tk_cap) { return align16(size_t(tk_cap) * size_t(problem.inter) * 2); }
size_t w4a4_rows_bytes(const MoeProblem& problem, int tk_cap) { return size_t(tk_cap) * size_t(problem.hidden) * 2; }
size_t w4a4_bytes(const MoeProblem& problem, int tk_cap) {
  if (problem.activation_mode != ActivationMode::kW4A4) return 0;
  return w4a4_rows_bytes(problem, tk_cap) + size_t(tk_cap) * w4a4_units_per_row(static_cast<int>(problem.hidden)) * 4;
}
Workspace carve(void* workspace, const MoeProblem& problem, int tk_cap) {
  char* base = static_cast<char*>(workspace);
  Workspace w{};
  char* share = base + record_bytes(tk_cap);
  w.share.epoch = reinterpret_cast<uint32_t*>(share);
  w.share.flags = reinterpret_cast<uint32_t*>(share + 16);
  w.share.ids = reinterpret_cast<int32_t*>(share + 16 + kFusedDecodeMaxTokens * 4);
  w.share.weights = reinterpret_cast<float*>(share + 16 + kFusedDecodeMaxTokens * 4 + size_t(tk_cap) * 4);
  w.record.factor = reinterpret_cast<float*>(base);
  w.record.touched = reinterpret_cast<int32_t*>(base + size_t(tk_cap) * 4);
  w.record.sorted = reinterpret_cast<int32_t*>(base + size_t(tk_cap) * 8);
  w.record.toff = reinterpret_cast<int32_t*>(base + size_t(tk_cap) * 12);
  w.record.num_touched = reinterpret_cast<int32_t*>(base + size_t(tk_cap) * 16 + 4);
  w.record.ready = reinterpret_cast<int32_t*>(base + size_t(tk_cap) * 16 + 8);
  w.record.arrivals = reinterpret_cast<int32_t*>(base + size_t(tk_cap) * 16 + 12);
  w.h = reinterpret_cast<__nv_bfloat16*>(base + head_bytes(tk_cap));
  if (problem.activation_mode == ActivationMode::kW4A4) {
    char* rows = base + head_bytes(tk_cap) + h_bytes(problem, tk_cap);
    w.w4a4.rows = reinterpret_cast<__nv_bfloat16*>(rows);
    w.w4a4.flags = reinterpret_cast<uint32_t*>(rows + w4a4_rows_bytes(problem, tk_cap));
  }
  return w;
}

// Launch 2's configuration for a chunk of `tokens` (plan_moe_fused_decode's three by the kind of chunk; one
// token its own, gemm2_one_token), and whether the plan's register fit allows its table-free instance (the
// matrix's scales are checked apart).
struct Launch2Choice {
  const FusedDecodeLaunch2* config;
  bool table_free_fits;
};
Launch2Choice launch2_for(const FusedDecodePlan& plan, int64_t tokens) {
  if (tokens == 1) return {&plan.gemm2_one_token, plan.gemm2_one_token_table_free};
  const FusedDecodeLaunch2Use use = fused_decode_launch2_use(tokens);
  switch (use) {
    case FusedDecodeLaunch2Use::kLatency: return {&plan.gemm2_latency, plan.gemm2_latency_table_free};
    case FusedDecodeLaunch2Use::kFew: return {&plan.gemm2_few, true};
    case FusedDecodeLaunch2Use::kMany: return {&plan.gemm2_many, true};
  }
  FP4MOE_CHECK(false, "fused decode: unknown launch-2 configuration ", static_cast<int>(use));
  return {&plan.gemm2_many, true};
}

}  // namespace

namespace fused_decode {

static_assert(kGemm1ShapeCount == 4, "one case per launch-1 shape");
Gemm1Kernel gemm1_kernel(int shape, bool table_free) {
  switch (shape) {
    case 0: return table_free ? fused_gemm1_kernel<0, true> : fused_gemm1_kernel<0, false>;
    case 1: return table_free ? fused_gemm1_kernel<1, true> : fused_gemm1_kernel<1, false>;
    case 2: return table_free ? fused_gemm1_kernel<2, true> : fused_gemm1_kernel<2, false>;
    case 3: return table_free ? fused_gemm1_kernel<3, true> : fused_gemm1_kernel<3, false>;
  }
  FP4MOE_CHECK(false, "fused decode: unknown launch-1 shape ", shape);
  return nullptr;
}

// A 32-row launch-2 shape has only the one-tile instance (null for the other).
template <int kShape, bool kTableFree>
Gemm2Kernel gemm2_instance(bool one_tile) {
  if constexpr (kGemm2Shapes[kShape].row_tiles == 1)
    return one_tile ? fused_gemm2_kernel<kShape, true, kTableFree> : fused_gemm2_kernel<kShape, false, kTableFree>;
  else
    return one_tile ? fused_gemm2_kernel<kShape, true, kTableFree> : nullptr;
}
template <int kShape>
Gemm2Kernel gemm2_instance(bool one_tile, bool table_free) {
  return table_free ? gemm2_instance<kShape, true>(one_tile) : gemm2_instance<kShape, false>(one_tile);
}
static_assert(kGemm2ShapeCount == 3, "one case per launch-2 shape");
Gemm2Kernel gemm2_kernel(int shape, bool one_tile, bool table_free) {
  Gemm2Kernel kernel = nullptr;
  switch (shape) {
    case 0: kernel = gemm2_instance<0>(one_tile, table_free); break;
    case 1: kernel = gemm2_instance<1>(one_tile, table_free); break;
    case 2: kernel = gemm2_instance<2>(one_tile, table_free); break;
    default: FP4MOE_CHECK(false, "fused decode: unknown launch-2 shape ", shape);
  }
  FP4MOE_CHECK(kernel != nullptr, "fused decode: launch-2 shape ", shape,
               " (32 rows of H per CTA) takes chunks of at most ", kTokenGroup, " tokens only");
  return kernel;
}

}  // namespace fused_decode

size_t moe_fused_decode_workspace_bytes(const MoeProblem& problem) {
  check_problem(problem);
  const int tk_cap = tk_capacity(problem);
  return head_bytes(tk_cap) + h_bytes(problem, tk_cap) + w4a4_bytes(problem, tk_cap);
}

void launch_moe_fused_decode(const MoeProblem& problem, const FusedDecodeWeights& weights, const FusedDecodePlan& plan,
                             const FusedDecodeRun& run, cudaStream_t stream) {
  FP4MOE_CHECK(run.tokens >= 0, "fused decode: negative token count ", run.tokens);
  if (run.tokens == 0) return;
  FP4MOE_CHECK(run.hidden && run.router_logits && run.out && run.workspace, "fused decode: null input, output or workspace");
  FP4MOE_CHECK(reinterpret_cast<uintptr_t>(run.hidden) % 16 == 0, "fused decode: hidden must be 16-byte aligned");
  FP4MOE_CHECK(weights.w13 && weights.w2 && weights.gate_scale2 && weights.up_scale2 && weights.down_scale2,
               "fused decode: null weight pointer");
  const bool w4a4 = problem.activation_mode == ActivationMode::kW4A4;
  FP4MOE_CHECK(!w4a4 || (weights.w13_input_scale && weights.w2_input_scale), "fused decode: W4A4 needs the input scales");
  FP4MOE_CHECK(plan.gemm1_grid > 0 && plan.gemm2_latency.grid > 0 && plan.gemm2_few.grid > 0 &&
                   plan.gemm2_many.grid > 0 && plan.gemm2_one_token.grid > 0,
               "fused decode: not planned (plan_moe_fused_decode)");
  const int H = static_cast<int>(problem.hidden), I = static_cast<int>(problem.inter);
  const int E = static_cast<int>(problem.num_experts), K = static_cast<int>(problem.top_k);
  const int tk_cap = tk_capacity(problem);
  const Workspace ws = carve(run.workspace, problem, tk_cap);
  // The item table (ItemEntry) must hold every CTA's items: at most tk_cap groups x row blocks over the grid.
  FP4MOE_CHECK(plan.gemm1_shape >= 0 && plan.gemm1_shape < kGemm1ShapeCount &&
                   kGemm1Shapes[plan.gemm1_shape].w4a4 == w4a4,
               "fused decode: launch-1 shape ", plan.gemm1_shape, " is not one for this activation mode");
  FP4MOE_CHECK(plan.gemm1_one_token_shape == plan.gemm1_shape ||
                   plan.gemm1_one_token_shape == early_prime_twin(plan.gemm1_shape),
               "fused decode: launch-1 shape ", plan.gemm1_one_token_shape, " for one token is not shape ",
               plan.gemm1_shape, " or its early-prime twin");
  FP4MOE_CHECK(int64_t(plan.gemm1_item_cap) * plan.gemm1_grid >=
                   gemm1_max_items(tk_cap, I, kGemm1Shapes[plan.gemm1_shape].row_tiles),
               "fused decode: the plan's item table (", plan.gemm1_item_cap, " per CTA) does not cover its grid (",
               plan.gemm1_grid, " CTAs)");
  // Launch 2's shapes and instances (gemm2_kernel checks them): chunks of up to 8 tokens take the one-tile one.
  for (const FusedDecodeLaunch2* launch2 : {&plan.gemm2_latency, &plan.gemm2_few, &plan.gemm2_one_token})
    (void)gemm2_kernel(launch2->shape, true, false);
  (void)gemm2_kernel(plan.gemm2_many.shape, false, false);
  // Table-free block scales where every scale of the matrix allows them (checked at prepare) and the plan
  // does not force the table.
  const bool w13_table_free = weights.w13_scales_all_normal && !plan.table_scales_forced;
  const bool w2_table_free = weights.w2_scales_all_normal && !plan.table_scales_forced;
  const auto* hidden = static_cast<const __nv_bfloat16*>(run.hidden);
  auto* out = static_cast<__nv_bfloat16*>(run.out);
  for (int64_t t0 = 0; t0 < run.tokens; t0 += kFusedDecodeMaxTokens) {
    const int T = static_cast<int>(std::min(kFusedDecodeMaxTokens, run.tokens - t0));
    Gemm1Params p1{};
    p1.route = route_device::make_route_params(problem.routing, run.router_logits + t0 * E, run.correction_bias, T,
                                               nullptr, nullptr);
    p1.hidden = hidden + t0 * H;
    p1.w13 = weights.w13;
    p1.gate_scale2 = weights.gate_scale2;
    p1.up_scale2 = weights.up_scale2;
    p1.down_scale2 = weights.down_scale2;
    p1.in_scale = w4a4 ? weights.w13_input_scale : nullptr;
    p1.out_scale = w4a4 ? weights.w2_input_scale : nullptr;
    p1.hidden_size = H, p1.inter = I, p1.top_k = K, p1.num_experts = E, p1.tk_cap = tk_cap;
    p1.item_cap = plan.gemm1_item_cap;
    p1.h = ws.h;
    p1.record = ws.record;
    p1.w4a4 = ws.w4a4;
    p1.share = ws.share;
    p1.share.on = T >= plan.route_share_from;
    // SM90+: launch 1's CTAs are scheduled while the kernel before drains (programmatic dependent launch).
    const int shape1 = T == 1 && !p1.share.on ? plan.gemm1_one_token_shape : plan.gemm1_shape;
    launch_maybe_programmatic(gemm1_kernel(shape1, w13_table_free), static_cast<unsigned>(plan.gemm1_grid),
                              static_cast<unsigned>(kGemm1Warps * 32), plan.gemm1_smem, stream, p1);
    Gemm2Params p2{};
    p2.w2 = weights.w2;
    p2.h = ws.h;
    p2.record = ws.record;
    p2.share_epoch = ws.share.epoch;
    p2.tokens = T, p2.hidden_size = H, p2.inter = I, p2.top_k = K, p2.tk_cap = tk_cap;
    p2.out = out + t0 * H;
    // SM90+: launch 2 overlaps launch 1's tail (programmatic dependent launch). Up to 8 tokens, every
    // expert's tokens are one tile. One token may take its own configuration (plan.gemm2_one_token).
    const Launch2Choice choice = launch2_for(plan, T);
    const FusedDecodeLaunch2& launch2 = *choice.config;
    const bool one_tile = fused_decode_launch2_use(T) != FusedDecodeLaunch2Use::kMany;
    launch_maybe_programmatic(gemm2_kernel(launch2.shape, one_tile, w2_table_free && choice.table_free_fits),
                              static_cast<unsigned>(launch2.grid),
                              static_cast<unsigned>(kGemm2Shapes[launch2.shape].warps * 32),  // shape checked above
                              launch2.smem, stream, p2);
  }
}

}  // namespace fp4moe
