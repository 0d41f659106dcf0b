// The fused decode's slot tables (launch 1 of moe_fused_decode_sm80.cu builds them in every CTA after
// routing): the T*K slots sorted by expert (stable, by slot), the touched experts in ascending order with
// their first sorted slot and first 8-token group, and the touched expert of each token group.
// Two forms with the same tables: the CTA-wide stable counting sort (any T*K; integer atomics only count,
// a block scan over the E experts lays them out), and one warp's rank sort for up to 32 slots (decode at
// 1-3 tokens of top-10 routing), which needs no CTA barrier, no per-expert counters and no scan over E:
// at one token of Qwen3.5-397B the CTA-wide form took 1.9 us of launch 1's prologue (globaltimer stamps,
// docs/perf/2026-12-01-h200-r17.md). Device code for SM80+; included by that one file.
#pragma once
#include <cstdint>

#include "kernels/cuda/common/block_scan.cuh"

namespace fp4moe::fused_decode {

// Shared-memory tables (int16: expert and slot indices stay below 32768, checked on the host).
struct SlotTables {
  const int16_t* ids;  // [TK] in: expert of each slot, -1 = none
  int16_t* sorted;     // [TK] slots sorted by expert, stable (the first toff[n] are valid)
  int16_t* touched;    // [n] touched experts, ascending
  int16_t* toff;       // [n + 1] first sorted slot of each touched expert; toff[n] = valid slots
  int16_t* gprefix;    // [n + 1] first token group of each touched expert; gprefix[n] = token groups
  int16_t* g2j;        // [token groups] touched index of each group
  int* misc;           // [0] = n touched experts, [1] = token groups
};

// One warp, TK <= 32: lane s holds slot s. Its rank among the valid slots ordered by (expert, slot) is
// its sorted position; then lane i looks at sorted position i, and the heads of the experts' runs lay
// out the touched experts and (by a warp scan) their token groups.
template <int kTokenGroup>
__device__ __forceinline__ void sort_slots_warp(const SlotTables& s, int TK) {
  constexpr uint32_t kAll = 0xFFFFFFFFu;
  const int lane = threadIdx.x % 32;
  const int e = lane < TK ? s.ids[lane] : -1;
  const uint32_t key = e >= 0 ? (static_cast<uint32_t>(e) << 5) | static_cast<uint32_t>(lane) : kAll;
  int rank = 0;
  for (int i = 0; i < 32; ++i) rank += __shfl_sync(kAll, key, i) < key ? 1 : 0;
  const int valid = __popc(__ballot_sync(kAll, e >= 0));
  if (e >= 0) s.sorted[rank] = static_cast<int16_t>(lane);
  __syncwarp();
  const int expert = lane < valid ? s.ids[s.sorted[lane]] : -1;  // the expert at sorted position `lane`
  const int before = __shfl_up_sync(kAll, expert, 1);
  const bool head = lane < valid && (lane == 0 || before != expert);
  const uint32_t heads = __ballot_sync(kAll, head);
  const uint32_t up_to_me = (2u << lane) - 1u;  // lanes 0..lane (lane 31: all)
  int groups = 0;
  if (head) {
    const uint32_t later = heads & ~up_to_me;
    const int end = later ? __ffs(static_cast<int>(later)) - 1 : valid;
    groups = (end - lane + kTokenGroup - 1) / kTokenGroup;
  }
  int through = groups;  // inclusive scan of the groups over the lanes
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int other = __shfl_up_sync(kAll, through, offset);
    if (lane >= offset) through += other;
  }
  const int all_groups = __shfl_sync(kAll, through, 31);
  const int n = __popc(heads);
  if (head) {
    const int j = __popc(heads & up_to_me) - 1;
    s.touched[j] = static_cast<int16_t>(expert);
    s.toff[j] = static_cast<int16_t>(lane);
    s.gprefix[j] = static_cast<int16_t>(through - groups);
    for (int q = through - groups; q < through; ++q) s.g2j[q] = static_cast<int16_t>(j);
  }
  if (lane == 0) {
    s.toff[n] = static_cast<int16_t>(valid);
    s.gprefix[n] = static_cast<int16_t>(all_groups);
    s.misc[0] = n;
    s.misc[1] = all_groups;
  }
}

// Per-expert totals packed for one scan: sorted slots | touched experts << 21 | token groups << 42.
template <int kTokenGroup>
__device__ __forceinline__ uint64_t pack_slot_counts(int slots) {
  return slots == 0 ? 0ull
                    : uint64_t(slots) | (1ull << 21) | (uint64_t((slots + kTokenGroup - 1) / kTokenGroup) << 42);
}
__device__ __forceinline__ int unpack_slot_field(uint64_t packed, int field) {
  return static_cast<int>((packed >> (21 * field)) & ((1u << 21) - 1));
}

// The whole CTA (kWarps warps), any TK: a stable counting sort. `counts` [E] must be zero on entry;
// `scan` holds one uint64 per warp. Every thread must call it (it has CTA barriers); the tables are
// complete for every thread when it returns. Out of line: launch 1 at one token skips it, and inline its
// code lay between the instructions every CTA runs (docs/perf/2026-12-01-h200-r22.md).
template <int kWarps, int kTokenGroup>
__device__ __noinline__ void sort_slots_block(SlotTables s, int TK, int E, int* counts, uint64_t* scan) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int i = threadIdx.x; i < TK; i += blockDim.x)
    if (s.ids[i] >= 0) atomicAdd(&counts[s.ids[i]], 1);  // integer counts: order-independent
  __syncthreads();
  const int per = (E + blockDim.x - 1) / blockDim.x;
  const int e_begin = min(E, static_cast<int>(threadIdx.x) * per), e_end = min(E, e_begin + per);
  uint64_t local = 0;
  for (int e = e_begin; e < e_end; ++e) local += pack_slot_counts<kTokenGroup>(counts[e]);
  uint64_t total = 0;
  uint64_t running = block_exclusive_scan<kWarps>(local, scan, total);
  for (int e = e_begin; e < e_end; ++e) {
    const int c = counts[e];
    if (c == 0) continue;
    const int index = unpack_slot_field(running, 1);
    s.touched[index] = static_cast<int16_t>(e);
    s.toff[index] = static_cast<int16_t>(unpack_slot_field(running, 0));
    s.gprefix[index] = static_cast<int16_t>(unpack_slot_field(running, 2));
    counts[e] = unpack_slot_field(running, 0);  // becomes the placement cursor
    for (int q = 0; q < (c + kTokenGroup - 1) / kTokenGroup; ++q)
      s.g2j[unpack_slot_field(running, 2) + q] = static_cast<int16_t>(index);
    running += pack_slot_counts<kTokenGroup>(c);
  }
  if (threadIdx.x == 0) {
    const int n = unpack_slot_field(total, 1);
    s.toff[n] = static_cast<int16_t>(unpack_slot_field(total, 0));
    s.gprefix[n] = static_cast<int16_t>(unpack_slot_field(total, 2));
    s.misc[0] = n;
    s.misc[1] = unpack_slot_field(total, 2);
  }
  __syncthreads();
  if (warp == 0) {
    const uint32_t lower = (1u << lane) - 1u;
    for (int base = 0; base < TK; base += 32) {
      const int slot = base + lane;
      const int e = slot < TK ? s.ids[slot] : -1;
      const uint32_t peers = __match_any_sync(0xFFFFFFFFu, e);
      if (e >= 0) s.sorted[counts[e] + __popc(peers & lower)] = static_cast<int16_t>(slot);
      __syncwarp();
      if (e >= 0 && (peers & lower) == 0) counts[e] += __popc(peers);
      __syncwarp();
    }
  }
  __syncthreads();
}

}  // namespace fp4moe::fused_decode
