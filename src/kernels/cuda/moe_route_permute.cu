// Routing, alignment (counting sort by expert), gather and combine kernels of the CUDA MoE pipeline.
// API and data flow: moe_route_permute.h.
//
// route   one warp per token; the token's scores live in shared memory; K rounds of a warp argmax
//         (ties -> lower expert index). Softmax methods select on the raw logits; weights use precise
//         weights in double rounded once to fp32, and sigmoid_grouped_topk's s = fp32(1/(1+exp(-l))) in
//         double, exactly the steps of routing_reference.cpp, so selection matches it bit for bit.
// route+align  up to 8 tokens: one CTA routes (warp w: token w) and then aligns its <= 256 slots by
//         ranking each slot against the others (no histograms), one kernel.
// align   a stable counting sort without order-dependent atomics. Few slots: one CTA of 16 warps;
//         each warp counts a contiguous range per expert (warp match + popc, a private histogram row),
//         a scan over (expert, warp) gives every warp its start in every expert, and a second pass
//         writes each slot's rank. Many slots: the same per 512-slot chunk over three launches (count
//         per chunk, one CTA scanning over (expert, chunk), scatter per chunk). Either way the order
//         is stable by slot and identical on every run.
// gather  one CTA per sorted row; one thread per 16-value block (the NVFP4 block for W4A4).
// combine one CTA per token; fixed slot order, products and sums rounded separately (__fmul_rn,
//         __fadd_rn) exactly as the CPU reference's `acc += w * o` in fp32.
// Every kernel here is a programmatic dependent launch on SM90+ (common/programmatic_launch.cuh): it
// may be scheduled while the kernel before it drains and waits for it at its first line.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <climits>

#include "common/error.h"
#include "kernels/cuda/common/block_scan.cuh"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/programmatic_launch.cuh"
#include "kernels/cuda/moe_route_device.cuh"
#include "kernels/cuda/moe_route_permute.h"
#include "kernels/cuda/nvfp4_device.cuh"

namespace fp4moe {
namespace {

constexpr int kRouteWarpsPerBlock = 4;
constexpr int kMaxExperts = route_device::kMaxExperts;
constexpr int kMaxTopK = route_device::kMaxTopK;
constexpr int kAlignWarps = 16;
constexpr int kAlignChunk = kAlignWarps * 32;  // slots per CTA of the multi-CTA align: one per thread
// Up to this many slots one CTA aligns everything (one launch; a few warp steps of latency); more
// slots take three launches (count per chunk, scan, scatter per chunk), whose time does not grow
// with the slots as the one CTA's does (100 us for 40960 slots on the H200).
constexpr int64_t kAlignSingleCtaSlots = 2048;
// Shared memory of the single-CTA align: hist [kAlignWarps][E] and scratch [kAlignWarps + 2].
constexpr size_t single_cta_align_smem_bytes(int num_experts) {
  return (static_cast<size_t>(kAlignWarps) * num_experts + kAlignWarps + 2) * sizeof(int);
}

using route_device::RouteParams;
using route_device::route_token_warp;

__global__ void route_kernel(RouteParams p) {
  pdl_chain_entry();
  extern __shared__ float route_smem[];  // [warps][2 * E]: selection score, then value (sigmoid / logit)
  const int warp = threadIdx.x / 32;
  const int64_t token = static_cast<int64_t>(blockIdx.x) * kRouteWarpsPerBlock + warp;
  if (token >= p.tokens) return;
  float* score = route_smem + static_cast<size_t>(warp) * 2 * p.num_experts;
  route_token_warp(p, token, score, score + p.num_experts, p.ids + token * p.top_k, p.weights + token * p.top_k);
}

struct AlignParams {
  MoeRouteBuffers b;
  int64_t slots;
  int num_experts;
  MTile tile;
  int chunks;  // kAlignChunk-slot chunks (multi-CTA path; 1 on the single-CTA path)
};

// M tiles of an expert with `count` rows (MTile): ceil(count / rows), one fewer when the last takes a tail.
__device__ __forceinline__ int mtile_count(int count, MTile tile) {
  return count == 0 ? 0 : max(1, (count - tile.tail_rows + tile.rows - 1) / tile.rows);
}

// Expert e's `tiles` M tiles in the tile list from index first_tile: tile t starts at sorted row
// first_row + t * tile.rows (the last may hold up to tile.rows + tile.tail_rows rows).
__device__ __forceinline__ void write_expert_tiles(const AlignParams& p, int e, int first_tile, int first_row,
                                                   int tiles) {
  for (int t = 0; t < tiles; ++t) {
    p.b.tile_expert[first_tile + t] = e;
    p.b.tile_row_begin[first_tile + t] = first_row + t * p.tile.rows;
  }
}

// Expert of slot i, or -1 past `end` and for ids outside [0, E) (routed nowhere).
__device__ __forceinline__ int align_expert(const AlignParams& p, int64_t i, int64_t end) {
  const int e = i < end ? p.b.topk_ids[i] : -1;
  return e >= 0 && e < p.num_experts ? e : -1;
}

// Block-wide: every expert's count (count_of(e)) -> expert_counts, expert_offsets, the M-tile list and
// num_tiles, in expert order; then first_row_of(e, first) hands each expert its first sorted row (the
// callers turn their per-warp or per-chunk counts into starts there). scratch: kAlignWarps + 2 ints.
template <typename CountOf, typename FirstRowOf>
__device__ void assign_rows_and_tiles(const AlignParams& p, CountOf count_of, FirstRowOf first_row_of, int* scratch) {
  const int E = p.num_experts;
  int* bases = scratch + kAlignWarps;  // [0] rows, [1] tiles before the current batch of experts
  if (threadIdx.x == 0) bases[0] = bases[1] = 0;
  __syncthreads();
  int expert_total_tiles = 0;
  for (int e0 = 0; e0 < E; e0 += blockDim.x) {
    const int e = e0 + threadIdx.x;
    const int count = e < E ? count_of(e) : 0;
    int total = 0;
    const int offset = block_exclusive_scan<kAlignWarps>(count, scratch, total);
    const int tiles = mtile_count(count, p.tile);
    int tiles_total = 0;
    const int tile_offset = block_exclusive_scan<kAlignWarps>(tiles, scratch, tiles_total);
    const int row_base = bases[0], tile_base = bases[1];
    if (e < E) {
      const int first = row_base + offset;
      p.b.expert_counts[e] = count;
      p.b.expert_offsets[e] = first;
      first_row_of(e, first);
      write_expert_tiles(p, e, tile_base + tile_offset, first, tiles);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      bases[0] = row_base + total;
      bases[1] = tile_base + tiles_total;
    }
    __syncthreads();
    expert_total_tiles = tile_base + tiles_total;
  }
  if (threadIdx.x == 0) {
    p.b.expert_offsets[E] = bases[0];
    *p.b.num_tiles = expert_total_tiles;
  }
}

// Writes the sorted row of every slot in [begin, end) (one warp, slot order): row = start[e] + the
// slot's rank among the earlier slots of e in the range; start[e] advances past the range's slots.
__device__ __forceinline__ void scatter_slots_warp(const AlignParams& p, int64_t begin, int64_t end, int* start) {
  const uint32_t lower_lanes = (1u << (threadIdx.x % 32)) - 1u;
  for (int64_t base = begin; base < end; base += 32) {
    const int64_t i = base + threadIdx.x % 32;
    const int e = align_expert(p, i, end);
    const uint32_t peers = __match_any_sync(0xFFFFFFFFu, e);
    if (e >= 0) {
      const int row = start[e] + __popc(peers & lower_lanes);
      p.b.sorted_slots[row] = static_cast<int32_t>(i);
      p.b.slot_rows[i] = row;
    } else if (i < end) {
      p.b.slot_rows[i] = -1;
    }
    __syncwarp();
    if (e >= 0 && (peers & lower_lanes) == 0) start[e] += __popc(peers);
    __syncwarp();
  }
}

// Single-CTA path (few slots): per-warp counts of contiguous slot ranges, the expert assignment, then
// each warp scatters its range from its start in every expert.
__global__ void __launch_bounds__(kAlignWarps * 32) align_kernel(AlignParams p) {
  pdl_chain_entry();
  extern __shared__ int align_smem[];  // hist [kAlignWarps][E], scratch [kAlignWarps + 2]
  const int E = p.num_experts;
  int* hist = align_smem;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int i = threadIdx.x; i < kAlignWarps * E; i += blockDim.x) hist[i] = 0;
  __syncthreads();

  const int64_t chunk = (p.slots + kAlignWarps - 1) / kAlignWarps;
  const int64_t begin = min(p.slots, warp * chunk);
  const int64_t end = min(p.slots, begin + chunk);
  int* my_hist = hist + warp * E;
  const uint32_t lower_lanes = (1u << lane) - 1u;
  for (int64_t base = begin; base < end; base += 32) {
    const int e = align_expert(p, base + lane, end);
    const uint32_t peers = __match_any_sync(0xFFFFFFFFu, e);
    if (e >= 0 && (peers & lower_lanes) == 0) my_hist[e] += __popc(peers);
    __syncwarp();
  }
  __syncthreads();
  assign_rows_and_tiles(
      p, [&](int e) {
        int count = 0;
        for (int w = 0; w < kAlignWarps; ++w) count += hist[w * E + e];
        return count;
      },
      [&](int e, int first) {  // hist[w][e] becomes warp w's first row in expert e
        for (int w = 0; w < kAlignWarps; ++w) {
          const int c = hist[w * E + e];
          hist[w * E + e] = first;
          first += c;
        }
      },
      hist + kAlignWarps * E);
  __syncthreads();
  scatter_slots_warp(p, begin, end, my_hist);
}

// Few tokens (decode): routing and the align in one CTA, one launch and one global round trip less.
// Warp w < T routes token w into shared memory (its scratch: 2E floats). With at most
// kFusedRouteAlignMaxTokens * kMaxTopK = 256 slots the align needs no histograms: thread i ranks slot i
// against the others (rank = slots of lower experts + earlier slots of the same expert: stable), four
// slots per shared-memory read; the first slot of each expert lays out its M tiles; and each expert's
// offset and count are binary searches in the sorted experts. Shared memory: route scratch [T][2E] floats
// | slot experts [256] (-1 past S) | slot weights [256] | tiles at each expert's first slot [256] | sorted
// experts [256] (INT_MAX past the routed slots).
constexpr int kFewSlots = 256;
static_assert(kFusedRouteAlignMaxTokens * kMaxTopK <= kFewSlots && kFewSlots <= kAlignWarps * 32 && kFewSlots % 4 == 0,
              "the fused kernel's slots fit one pass of its threads");
// The route scratch in ints, rounded up so that the slot arrays after it are 16-byte aligned.
__host__ __device__ constexpr size_t route_scratch_ints(int64_t tokens, int num_experts) {
  return (static_cast<size_t>(tokens) * 2 * num_experts + 3) / 4 * 4;
}
constexpr size_t route_align_smem_bytes(int64_t tokens, int num_experts) {
  return (route_scratch_ints(tokens, num_experts) + 4 * kFewSlots) * sizeof(int);
}

__global__ void __launch_bounds__(kAlignWarps * 32, 1) route_align_kernel(RouteParams route, AlignParams p) {
  pdl_chain_entry();
  extern __shared__ int align_smem[];
  const int warp = threadIdx.x / 32, E = route.num_experts, K = route.top_k;
  const int S = static_cast<int>(p.slots), T = static_cast<int>(route.tokens);
  int* slot_expert = align_smem + route_scratch_ints(T, E);
  float* slot_weight = reinterpret_cast<float*>(slot_expert + kFewSlots);
  int* leader_tiles = slot_expert + 2 * kFewSlots;
  int* sorted_expert = slot_expert + 3 * kFewSlots;
  const int i = threadIdx.x;
  if (warp < T) {
    float* score = reinterpret_cast<float*>(align_smem) + static_cast<size_t>(warp) * 2 * E;
    route_token_warp(route, warp, score, score + E, slot_expert + warp * K, slot_weight + warp * K);
  }
  if (i >= S && i < kFewSlots) slot_expert[i] = -1;  // past the slots: no expert (read four at a time below)
  if (i < kFewSlots) sorted_expert[i] = INT_MAX;
  __syncthreads();  // every slot's expert and weight is in shared memory
  const int e = i < S ? slot_expert[i] : -1;
  const bool valid = e >= 0 && e < E;  // ids outside [0, E) (not from the routing) are routed nowhere
  int below = 0, same_before = 0, same = 0, above = 0;
  if (i < S) {
    route.ids[i] = e;
    route.weights[i] = slot_weight[i];
    const int4* experts4 = reinterpret_cast<const int4*>(slot_expert);
#pragma unroll 4
    for (int j4 = 0; j4 < (S + 3) / 4; ++j4) {
      const int4 q = experts4[j4];
      const int ej[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const bool vj = ej[u] >= 0 && ej[u] < E;
        below += vj && ej[u] < e;
        above += vj && ej[u] > e;
        same += ej[u] == e;
        same_before += ej[u] == e && 4 * j4 + u < i;
      }
    }
    const int rank = below + same_before;
    p.b.slot_rows[i] = valid ? rank : -1;
    if (valid) {
      p.b.sorted_slots[rank] = i;
      sorted_expert[rank] = e;
    }
  }
  const bool leader = i < S && valid && same_before == 0;  // the expert's first slot
  if (i < kFewSlots) leader_tiles[i] = leader ? mtile_count(same, p.tile) : 0;
  if (i == 0) *p.b.num_tiles = 0, p.b.expert_offsets[E] = 0;  // no routed slot (overwritten below if any)
  __syncthreads();
  if (leader) {  // its tiles follow those of the lower experts
    int tile_base = 0;
    const int4* experts4 = reinterpret_cast<const int4*>(slot_expert);
    const int4* tiles4 = reinterpret_cast<const int4*>(leader_tiles);
#pragma unroll 4
    for (int j4 = 0; j4 < (S + 3) / 4; ++j4) {
      const int4 q = experts4[j4], n = tiles4[j4];
      tile_base += (q.x < e ? n.x : 0) + (q.y < e ? n.y : 0) + (q.z < e ? n.z : 0) + (q.w < e ? n.w : 0);
    }
    const int tiles = leader_tiles[i];
    write_expert_tiles(p, e, tile_base, below, tiles);
    if (above == 0) {  // the highest expert: the totals (after thread 0's zeros: the barrier orders them)
      *p.b.num_tiles = tile_base + tiles;
      p.b.expert_offsets[E] = below + same;
    }
  }
  // Expert x: its first sorted row is the number of routed slots of lower experts (a lower bound in the
  // sorted experts), its count the distance to the next expert's.
  auto lower_bound = [&](int x) {  // in [0, kFewSlots]
    int pos = 0;
#pragma unroll
    for (int step = kFewSlots / 2; step >= 1; step /= 2) pos += sorted_expert[pos + step - 1] < x ? step : 0;
    return pos + (sorted_expert[pos] < x ? 1 : 0);  // pos <= kFewSlots - 1 here
  };
  for (int x = threadIdx.x; x < E; x += blockDim.x) {
    const int first = lower_bound(x);
    p.b.expert_offsets[x] = first;
    p.b.expert_counts[x] = lower_bound(x + 1) - first;
  }
}

// Multi-CTA path, launch 1 of 3: CTA c counts chunk c's slots per expert into chunk_rows[c][E].
__global__ void __launch_bounds__(kAlignWarps * 32) align_count_kernel(AlignParams p) {
  pdl_chain_entry();
  extern __shared__ int align_smem[];  // counts [E]
  const int E = p.num_experts;
  for (int e = threadIdx.x; e < E; e += blockDim.x) align_smem[e] = 0;
  __syncthreads();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kAlignChunk + threadIdx.x;  // one slot per thread
  const int e = align_expert(p, i, p.slots);
  const uint32_t peers = __match_any_sync(0xFFFFFFFFu, e);
  if (e >= 0 && (peers & ((1u << (threadIdx.x % 32)) - 1u)) == 0) atomicAdd(&align_smem[e], __popc(peers));
  __syncthreads();  // integer adds: the counts do not depend on their order
  for (int x = threadIdx.x; x < E; x += blockDim.x) p.b.chunk_rows[static_cast<int64_t>(blockIdx.x) * E + x] = align_smem[x];
}

// Multi-CTA path, launch 2 of 3 (one CTA): expert totals over the chunks, the expert assignment, and
// chunk_rows[c][e] becomes chunk c's first row in expert e.
__global__ void __launch_bounds__(kAlignWarps * 32) align_scan_kernel(AlignParams p) {
  pdl_chain_entry();
  __shared__ int scratch[kAlignWarps + 2];
  const int E = p.num_experts, C = p.chunks;
  int32_t* rows = p.b.chunk_rows;
  assign_rows_and_tiles(
      p, [&](int e) {
        int count = 0;
#pragma unroll 8
        for (int c = 0; c < C; ++c) count += rows[static_cast<int64_t>(c) * E + e];
        return count;
      },
      [&](int e, int first) {
        for (int c = 0; c < C; ++c) {
          const int n = rows[static_cast<int64_t>(c) * E + e];
          rows[static_cast<int64_t>(c) * E + e] = first;
          first += n;
        }
      },
      scratch);
}

// Multi-CTA path, launch 3 of 3: CTA c scatters chunk c; warp w starts, in expert e, at the chunk's
// start plus the counts of the chunk's warps before w.
__global__ void __launch_bounds__(kAlignWarps * 32) align_scatter_kernel(AlignParams p) {
  pdl_chain_entry();
  extern __shared__ int align_smem[];  // hist [kAlignWarps][E]
  const int E = p.num_experts, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int* hist = align_smem;
  for (int x = threadIdx.x; x < kAlignWarps * E; x += blockDim.x) hist[x] = 0;
  __syncthreads();
  const int64_t begin = min(p.slots, static_cast<int64_t>(blockIdx.x) * kAlignChunk + warp * 32);
  const int64_t end = min(p.slots, begin + 32);
  const int e = align_expert(p, begin + lane, end);
  const uint32_t peers = __match_any_sync(0xFFFFFFFFu, e);
  const bool leader = e >= 0 && (peers & ((1u << lane) - 1u)) == 0;  // one lane per expert of the warp
  if (leader) hist[warp * E + e] = __popc(peers);
  __syncthreads();
  int start = 0;
  if (leader) {
    start = p.b.chunk_rows[static_cast<int64_t>(blockIdx.x) * E + e];
    for (int w = 0; w < warp; ++w) start += hist[w * E + e];
  }
  __syncthreads();  // every warp has read the counts before they become starts
  if (leader) hist[warp * E + e] = start;
  __syncwarp();     // the scatter reads only this warp's row
  scatter_slots_warp(p, begin, end, hist + warp * E);
}

__global__ void gather_kernel(const __nv_bfloat16* hidden, MoeRouteBuffers b, int top_k, int64_t hidden_size,
                              int num_experts, const float* input_scales, __nv_bfloat16* rows) {
  pdl_chain_entry();
  const int64_t row = blockIdx.x;
  const int64_t routed = b.expert_offsets[num_experts];
  __nv_bfloat16* dst = rows + row * hidden_size;
  const int64_t blocks = hidden_size / 16;
  if (row >= routed) {
    for (int64_t blk = threadIdx.x; blk < blocks; blk += blockDim.x) {
      uint4 zero = make_uint4(0, 0, 0, 0);
      reinterpret_cast<uint4*>(dst + blk * 16)[0] = zero;
      reinterpret_cast<uint4*>(dst + blk * 16)[1] = zero;
    }
    return;
  }
  const int32_t slot = b.sorted_slots[row];
  const __nv_bfloat16* src = hidden + static_cast<int64_t>(slot / top_k) * hidden_size;
  const float scale = input_scales ? input_scales[b.topk_ids[slot]] : 0.0f;
  for (int64_t blk = threadIdx.x; blk < blocks; blk += blockDim.x) {
    uint4 v0 = reinterpret_cast<const uint4*>(src + blk * 16)[0];
    uint4 v1 = reinterpret_cast<const uint4*>(src + blk * 16)[1];
    if (input_scales) {
      float x[16], q[16];
      const __nv_bfloat16* h0 = reinterpret_cast<const __nv_bfloat16*>(&v0);
      const __nv_bfloat16* h1 = reinterpret_cast<const __nv_bfloat16*>(&v1);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        x[i] = __bfloat162float(h0[i]);
        x[i + 8] = __bfloat162float(h1[i]);
      }
      nvfp4_qdq_block(x, scale, q);
      __nv_bfloat16* o0 = reinterpret_cast<__nv_bfloat16*>(&v0);
      __nv_bfloat16* o1 = reinterpret_cast<__nv_bfloat16*>(&v1);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        o0[i] = __float2bfloat16_rn(q[i]);  // exact: e2m1 * e4m3
        o1[i] = __float2bfloat16_rn(q[i + 8]);
      }
    }
    reinterpret_cast<uint4*>(dst + blk * 16)[0] = v0;
    reinterpret_cast<uint4*>(dst + blk * 16)[1] = v1;
  }
}

// Four consecutive expert-output values as floats (i % 4 == 0; the launchers check the alignment).
template <typename In>
__device__ __forceinline__ float4 load4_as_float(const In* p, int64_t i);
template <>
__device__ __forceinline__ float4 load4_as_float<float>(const float* p, int64_t i) {
  return *reinterpret_cast<const float4*>(p + i);
}
template <>
__device__ __forceinline__ float4 load4_as_float<__nv_bfloat16>(const __nv_bfloat16* p, int64_t i) {
  const uint2 u = *reinterpret_cast<const uint2*>(p + i);
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

// Expert rows a combine thread loads before its first add: a thread's loads must be in flight together
// (one memory latency per batch, not per slot) for the combine to stream at the copy bandwidth.
constexpr int kCombineBatch = 8;

// One CTA per (token, 1024 columns); each thread owns 4 columns. The token's K rows and weights are
// read once into shared memory; each thread then issues the vector loads of up to kCombineBatch slots
// before adding them, in slot order (the same __fmul_rn / __fadd_rn sequence as the CPU reference).
// route_final_at_launch: the route buffers were final before this launch (launches lie between their
// writer and it), so the rows and weights are read before the programmatic-launch wait, through L2
// (they must not hit lines an earlier kernel left in this SM's L1): one memory latency less after the
// expert GEMM ends. The expert outputs are read after the wait.
template <typename In>
__global__ void combine_kernel(const In* expert_out, MoeRouteBuffers b, int top_k, int64_t hidden_size,
                               __nv_bfloat16* out, int route_final_at_launch) {
  const bool early = route_final_at_launch != 0;
  if (!early) pdl_chain_entry();
  __shared__ int32_t rows[kMaxTopK];
  __shared__ float weights[kMaxTopK];
  const int64_t token = blockIdx.x;
  if (threadIdx.x < top_k) {
    const int64_t slot = token * top_k + threadIdx.x;
    rows[threadIdx.x] = early ? __ldcg(b.slot_rows + slot) : b.slot_rows[slot];
    weights[threadIdx.x] = early ? __ldcg(b.topk_weights + slot) : b.topk_weights[slot];
  }
  if (early) pdl_chain_entry();
  __syncthreads();
  const int64_t c = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * 4;
  if (c >= hidden_size) return;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int k0 = 0; k0 < top_k; k0 += kCombineBatch) {
    float4 v[kCombineBatch];
#pragma unroll
    for (int j = 0; j < kCombineBatch; ++j) {
      const int k = k0 + j;
      if (k < top_k && rows[k] >= 0) v[j] = load4_as_float(expert_out, static_cast<int64_t>(rows[k]) * hidden_size + c);
    }
#pragma unroll
    for (int j = 0; j < kCombineBatch; ++j) {
      const int k = k0 + j;
      if (k >= top_k || rows[k] < 0) continue;  // unrouted slot: no contribution (as the reference)
      const float w = weights[k];
      acc = make_float4(__fadd_rn(acc.x, __fmul_rn(w, v[j].x)), __fadd_rn(acc.y, __fmul_rn(w, v[j].y)),
                        __fadd_rn(acc.z, __fmul_rn(w, v[j].z)), __fadd_rn(acc.w, __fmul_rn(w, v[j].w)));
    }
  }
  __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(out + token * hidden_size + c);
  dst[0] = __floats2bfloat162_rn(acc.x, acc.y);
  dst[1] = __floats2bfloat162_rn(acc.z, acc.w);
}

__global__ void swiglu_kernel(const float* gate_up, int64_t rows, int64_t inter, __nv_bfloat16* h) {
  pdl_chain_entry();
  const int64_t total = rows * inter;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / inter, c = i % inter;
    h[i] = __float2bfloat16_rn(swiglu_fp32(gate_up[r * 2 * inter + c], gate_up[r * 2 * inter + inter + c]));
  }
}

size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Chunks of the multi-CTA align for `slots` (0 when one CTA aligns them: no chunk buffer needed).
size_t align_chunks(size_t slots) {
  return slots <= static_cast<size_t>(kAlignSingleCtaSlots) ? 0 : (slots + kAlignChunk - 1) / kAlignChunk;
}

}  // namespace

int64_t moe_max_tiles(int64_t tokens, int top_k, int num_experts, int tile_m) {
  const int64_t slots = tokens * top_k;
  return (slots + tile_m - 1) / tile_m + std::min<int64_t>(num_experts, slots);
}

size_t moe_route_workspace_bytes(int64_t max_tokens, int top_k, int num_experts, int tile_m) {
  const size_t slots = static_cast<size_t>(max_tokens * top_k);
  const size_t tiles = static_cast<size_t>(std::max<int64_t>(1, moe_max_tiles(max_tokens, top_k, num_experts, tile_m)));
  return 4 * align_up(slots * 4) + align_up(num_experts * 4) + align_up((num_experts + 1) * 4) +
         2 * align_up(tiles * 4) + align_up(4) + align_up(align_chunks(slots) * num_experts * 4);
}

MoeRouteBuffers carve_moe_route_workspace(void* workspace, int64_t max_tokens, int top_k, int num_experts,
                                          int tile_m) {
  const size_t slots = static_cast<size_t>(max_tokens * top_k);
  const size_t tiles = static_cast<size_t>(std::max<int64_t>(1, moe_max_tiles(max_tokens, top_k, num_experts, tile_m)));
  char* p = static_cast<char*>(workspace);
  auto take = [&p](size_t bytes) {
    char* q = p;
    p += align_up(bytes);
    return q;
  };
  MoeRouteBuffers b;
  b.topk_ids = reinterpret_cast<int32_t*>(take(slots * 4));
  b.topk_weights = reinterpret_cast<float*>(take(slots * 4));
  b.sorted_slots = reinterpret_cast<int32_t*>(take(slots * 4));
  b.slot_rows = reinterpret_cast<int32_t*>(take(slots * 4));
  b.expert_counts = reinterpret_cast<int32_t*>(take(num_experts * 4));
  b.expert_offsets = reinterpret_cast<int32_t*>(take((num_experts + 1) * 4));
  b.tile_expert = reinterpret_cast<int32_t*>(take(tiles * 4));
  b.tile_row_begin = reinterpret_cast<int32_t*>(take(tiles * 4));
  b.num_tiles = reinterpret_cast<int32_t*>(take(4));
  b.chunk_rows = reinterpret_cast<int32_t*>(take(align_chunks(slots) * num_experts * 4));
  return b;
}

void check_cuda_routing_config(const RoutingConfig& config) {
  const int E = config.num_experts, K = config.top_k;
  FP4MOE_CHECK(E >= 1 && E <= kMaxExperts, "CUDA routing: num_experts must be in [1, ", kMaxExperts, "], got ", E);
  FP4MOE_CHECK(K >= 1 && K <= kMaxTopK && K <= E, "CUDA routing: top_k must be in [1, min(32, E)], got ", K);
  if (config.method == RoutingMethod::kSigmoidGroupedTopk) {
    FP4MOE_CHECK(config.n_group >= 1 && config.n_group <= 32 && E % config.n_group == 0,
                 "CUDA routing: n_group must divide E and be <= 32, got ", config.n_group);
    FP4MOE_CHECK(config.topk_group >= 1 && config.topk_group <= config.n_group,
                 "CUDA routing: topk_group must be in [1, n_group], got ", config.topk_group);
    FP4MOE_CHECK(config.topk_group * (E / config.n_group) >= K,
                 "CUDA routing: the kept groups hold fewer experts than top_k");
  }
}

void launch_moe_route(const RoutingConfig& config, const float* router_logits, const float* correction_bias,
                      int64_t tokens, int32_t* topk_ids, float* topk_weights, cudaStream_t stream) {
  check_cuda_routing_config(config);
  FP4MOE_CHECK(tokens >= 0, "launch_moe_route: negative token count ", tokens);
  if (tokens == 0) return;
  const int E = config.num_experts;
  const RouteParams p = route_device::make_route_params(config, router_logits, correction_bias, tokens, topk_ids,
                                                        topk_weights);
  const size_t smem = static_cast<size_t>(kRouteWarpsPerBlock) * 2 * E * sizeof(float);
  const unsigned blocks = static_cast<unsigned>((tokens + kRouteWarpsPerBlock - 1) / kRouteWarpsPerBlock);
  launch_maybe_programmatic(route_kernel, blocks, kRouteWarpsPerBlock * 32, smem, stream, p);
}

namespace {

// The kernels with [kAlignWarps][E] shared histograms need more than 48 KB at E = 1024; the attribute is
// per function and device.
void configure_align_kernels() {
  static std::atomic<uint64_t> configured_devices{0};
  int device = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (configured_devices.load() & bit)) return;
  const int max_smem = static_cast<int>(single_cta_align_smem_bytes(kMaxExperts));
  FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(align_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
  FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(route_align_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(route_align_smem_bytes(kFusedRouteAlignMaxTokens, kMaxExperts))));
  FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(align_scatter_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
  configured_devices.fetch_or(bit);
}

AlignParams checked_align_params(const MoeRouteBuffers& buffers, int64_t tokens, int top_k, int num_experts, MTile tile) {
  FP4MOE_CHECK(num_experts >= 1 && num_experts <= kMaxExperts, "launch_moe_align: bad num_experts ", num_experts);
  FP4MOE_CHECK(tile.rows >= 1, "launch_moe_align: the M tile's rows must be >= 1, got ", tile.rows);
  FP4MOE_CHECK(tile.tail_rows >= 0 && tile.tail_rows <= tile.rows, "launch_moe_align: the M tile's tail_rows (",
               tile.tail_rows, ") must be in [0, rows = ", tile.rows, "]");
  FP4MOE_CHECK(tokens >= 0 && tokens * top_k < (int64_t{1} << 30), "launch_moe_align: bad token count ", tokens);
  const int64_t slots = tokens * top_k;
  return AlignParams{buffers, slots, num_experts, tile, static_cast<int>((slots + kAlignChunk - 1) / kAlignChunk)};
}

}  // namespace

void launch_moe_align(const MoeRouteBuffers& buffers, int64_t tokens, int top_k, int num_experts, MTile tile,
                      cudaStream_t stream) {
  const AlignParams p = checked_align_params(buffers, tokens, top_k, num_experts, tile);
  const int64_t slots = p.slots;
  const int chunks = p.chunks;
  configure_align_kernels();
  const size_t hist_bytes = static_cast<size_t>(kAlignWarps) * num_experts * sizeof(int);
  if (slots <= kAlignSingleCtaSlots) {
    launch_maybe_programmatic(align_kernel, 1, kAlignWarps * 32, single_cta_align_smem_bytes(num_experts), stream, p);
    return;
  }
  launch_maybe_programmatic(align_count_kernel, chunks, kAlignWarps * 32, num_experts * sizeof(int), stream, p);
  launch_maybe_programmatic(align_scan_kernel, 1, kAlignWarps * 32, 0, stream, p);
  launch_maybe_programmatic(align_scatter_kernel, chunks, kAlignWarps * 32, hist_bytes, stream, p);
}

void launch_moe_route_align(const RoutingConfig& config, const float* router_logits, const float* correction_bias,
                            const MoeRouteBuffers& buffers, int64_t tokens, MTile tile, cudaStream_t stream) {
  if (tokens > kFusedRouteAlignMaxTokens) {
    launch_moe_route(config, router_logits, correction_bias, tokens, buffers.topk_ids, buffers.topk_weights, stream);
    launch_moe_align(buffers, tokens, config.top_k, config.num_experts, tile, stream);
    return;
  }
  check_cuda_routing_config(config);
  const AlignParams p = checked_align_params(buffers, tokens, config.top_k, config.num_experts, tile);
  if (tokens == 0) return;
  const RouteParams route = route_device::make_route_params(config, router_logits, correction_bias, tokens,
                                                            buffers.topk_ids, buffers.topk_weights);
  configure_align_kernels();
  launch_maybe_programmatic(route_align_kernel, 1, kAlignWarps * 32, route_align_smem_bytes(tokens, config.num_experts),
                            stream, route, p);
}

void launch_moe_gather(const void* hidden_bf16, const MoeRouteBuffers& buffers, int64_t tokens, int top_k,
                       int num_experts, int64_t hidden_size, const float* input_scales, void* rows_bf16,
                       cudaStream_t stream) {
  FP4MOE_CHECK(hidden_size > 0 && hidden_size % 16 == 0,
               "launch_moe_gather: hidden size must be a positive multiple of 16, got ", hidden_size);
  const int64_t rows = tokens * top_k;
  if (rows == 0) return;
  const int threads = static_cast<int>(std::min<int64_t>(256, (hidden_size / 16 + 31) / 32 * 32));
  launch_maybe_programmatic(gather_kernel, static_cast<unsigned>(rows), threads, 0, stream,
                            static_cast<const __nv_bfloat16*>(hidden_bf16), buffers, top_k, hidden_size, num_experts,
                            input_scales, static_cast<__nv_bfloat16*>(rows_bf16));
}

void launch_moe_combine(const float* expert_out, const MoeRouteBuffers& buffers, int64_t tokens, int top_k,
                        int64_t hidden_size, void* out_bf16, bool route_final_at_launch, cudaStream_t stream) {
  FP4MOE_CHECK(hidden_size > 0 && hidden_size % 4 == 0, "launch_moe_combine: hidden size must be a multiple of 4, got ", hidden_size);
  FP4MOE_CHECK(top_k >= 1 && top_k <= kMaxTopK, "launch_moe_combine: top_k must be in [1, 32], got ", top_k);
  FP4MOE_CHECK(reinterpret_cast<uintptr_t>(expert_out) % 16 == 0, "launch_moe_combine: expert outputs must be 16-byte aligned");
  if (tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((hidden_size / 4 + 255) / 256));
  launch_maybe_programmatic(combine_kernel<float>, grid, 256, 0, stream, expert_out, buffers, top_k, hidden_size,
                            static_cast<__nv_bfloat16*>(out_bf16), route_final_at_launch ? 1 : 0);
}

void launch_moe_combine_bf16(const void* expert_out_bf16, const MoeRouteBuffers& buffers, int64_t tokens,
                             int top_k, int64_t hidden_size, void* out_bf16, bool route_final_at_launch,
                             cudaStream_t stream) {
  FP4MOE_CHECK(hidden_size > 0 && hidden_size % 4 == 0, "launch_moe_combine_bf16: hidden size must be a multiple of 4, got ", hidden_size);
  FP4MOE_CHECK(top_k >= 1 && top_k <= kMaxTopK, "launch_moe_combine_bf16: top_k must be in [1, 32], got ", top_k);
  FP4MOE_CHECK(reinterpret_cast<uintptr_t>(expert_out_bf16) % 8 == 0, "launch_moe_combine_bf16: expert outputs must be 8-byte aligned");
  if (tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((hidden_size / 4 + 255) / 256));
  launch_maybe_programmatic(combine_kernel<__nv_bfloat16>, grid, 256, 0, stream,
                            static_cast<const __nv_bfloat16*>(expert_out_bf16), buffers, top_k, hidden_size,
                            static_cast<__nv_bfloat16*>(out_bf16), route_final_at_launch ? 1 : 0);
}

void launch_moe_swiglu(const float* gate_up, int64_t rows, int64_t inter, void* h_bf16, cudaStream_t stream) {
  if (rows * inter == 0) return;
  const int64_t blocks = std::min<int64_t>((rows * inter + 255) / 256, 65535);
  launch_maybe_programmatic(swiglu_kernel, static_cast<unsigned>(blocks), 256, 0, stream, gate_up, rows, inter,
                            static_cast<__nv_bfloat16*>(h_bf16));
}

}  // namespace fp4moe
