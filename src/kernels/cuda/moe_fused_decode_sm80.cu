// Fused decode MoE kernels, SM80+ (mma.sync m16n8k16 BF16, fp32 accumulation). API: moe_fused_decode_sm80.h.
//
// Inputs: hidden [T, H] BF16 and router logits [T, E] for T <= kFusedDecodeMaxTokens tokens, expert
// weights in the nvfp4_decode_layout.h layout (weights are the mma A operand: 16 rows x 128-wide K
// chunks; tokens are the N = 8 columns). Why this shape: at decode the layer is a read of the touched
// experts' weights, so (1) every SM must stream weights (persistent grids over fine work items),
// (2) bytes in flight come from a private 4-stage cp.async ring per warp (each lane copies and later
// reads only its own bytes: no barriers in the K loop), and (3) instructions per weight are few: 11
// integer ops decode 8 FP4 values to bf16x2, one HMUL2 per pair applies the block scale from a 1 KB
// table (4 scales per lane and chunk), and tokens fill the N dimension instead of padding M.
// Launch 1 (route + GEMM1 + SwiGLU): each CTA routes all T tokens itself (one warp per token, the
// pipeline's routing code) and sorts the slots by expert (stable), so no routing launch is needed;
// items = (expert, 8-token group, 16 rows of W13 = 8 gate + 8 up rows; 32 rows for W4A4, whose h
// quantization needs a whole 16-column NVFP4 block in one warp), K split over the 8 warps, summed in
// warp order. Launch 2 (GEMM2 + combine): items = 16 rows of H; the 8 warps share the (expert,
// K chunk) units, each folds weight * down_scale2 * partial dot into its own fp32 token x row
// accumulators, summed in warp order at the end. All orders are fixed: bit-identical reruns.
#include <cuda_bf16.h>

#include <algorithm>

#include "common/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/moe_fused_decode_sm80.h"
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

constexpr int kGemm1Warps = 8;  // launch 1: the K chunks of an item are split over the CTA's warps
constexpr int kGemm2Warps = 8;
constexpr int kStages1 = 4;
constexpr int kStages2 = 4;
constexpr int kTokenGroup = 8;  // tokens per GEMM1 item: one n8 tile (decode has ~1 token per expert)
constexpr int kLutBytes = 256 * 4;
constexpr int kStage2Bytes = kDecodeBlockBytes;
constexpr int kRing2Bytes = kGemm2Warps * kStages2 * kStage2Bytes;
static_assert(kFusedDecodeMaxTokens % kTokenGroup == 0, "token chunks are whole token groups");

__host__ __device__ constexpr size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

// Launch 1's ring for MT 16-row tiles per item (1: W4A16; 2: W4A4, whose h quantization needs the 16
// columns of an NVFP4 block, i.e. 32 rows of W13, in one warp). The routing scratch (2 floats per
// expert and warp) shares it: routing is over before the first copy.
__host__ __device__ constexpr size_t ring1_bytes(int mt, int num_experts) {
  return size_t(kGemm1Warps) * kStages1 * mt * kDecodeBlockBytes > size_t(kGemm1Warps) * 2 * num_experts * 4
             ? size_t(kGemm1Warps) * kStages1 * mt * kDecodeBlockBytes
             : size_t(kGemm1Warps) * 2 * num_experts * 4;
}

// Byte offsets of launch 1's shared memory for E experts and tk_cap = kFusedDecodeMaxTokens * K slots.
struct Gemm1Smem {
  size_t lut, ring, red, route_ids, route_weights, scan, counts, ids, sorted, touched, toff, gprefix, g2j, misc, total;
};
__host__ __device__ inline Gemm1Smem gemm1_smem(int num_experts, int tk_cap, int mt) {
  Gemm1Smem s{};
  s.lut = 0;
  s.ring = kLutBytes;
  s.red = s.ring + ring1_bytes(mt, num_experts);  // [2 item parities][warps][32 lanes][4 * mt] fp32
  s.route_ids = s.red + size_t(2) * kGemm1Warps * 32 * 4 * mt * 4;
  s.route_weights = s.route_ids + kGemm1Warps * 32 * 4;
  s.scan = s.route_weights + kGemm1Warps * 32 * 4;
  s.counts = s.scan + (kGemm1Warps + 1) * 8;
  s.ids = align16(s.counts + size_t(num_experts) * 4);
  s.sorted = align16(s.ids + size_t(tk_cap) * 2);
  s.touched = align16(s.sorted + size_t(tk_cap) * 2);
  s.toff = align16(s.touched + size_t(tk_cap) * 2);
  s.gprefix = align16(s.toff + size_t(tk_cap + 1) * 2);
  s.g2j = align16(s.gprefix + size_t(tk_cap + 1) * 2);  // token group -> touched expert index
  s.misc = align16(s.g2j + size_t(tk_cap) * 2);
  s.total = s.misc + 16;
  return s;
}

// Launch 2: LUT | ring | accumulators [warps][kFusedDecodeMaxTokens][16] | touched, toff, sorted (int16),
// slot weights (fp32).
struct Gemm2Smem {
  size_t lut, ring, acc, touched, toff, sorted, sorted_token, weights, factor, total;
};
__host__ __device__ inline Gemm2Smem gemm2_smem(int tk_cap) {
  Gemm2Smem s{};
  s.lut = 0;
  s.ring = kLutBytes;
  s.acc = s.ring + kRing2Bytes;
  s.touched = s.acc + size_t(kGemm2Warps) * kFusedDecodeMaxTokens * 16 * 4;
  s.toff = align16(s.touched + size_t(tk_cap) * 2);
  s.sorted = align16(s.toff + size_t(tk_cap + 1) * 2);
  s.sorted_token = align16(s.sorted + size_t(tk_cap) * 2);
  s.weights = align16(s.sorted_token + size_t(tk_cap) * 2);
  s.factor = align16(s.weights + size_t(tk_cap) * 4);  // per touched expert: down_scale2 * 2^9 (* input scale)
  s.total = s.factor + size_t(tk_cap) * 4;
  return s;
}

// u / d for the unit counts of launch 2 (u < 2^20, 2 <= d <= 256): one multiply-high with
// magic = ceil(2^32 / d), exact in that range (the error u / 2^32 stays below 1/d's margin).
__host__ __device__ inline uint32_t division_magic(int d) {
  return d <= 1 ? 0u : static_cast<uint32_t>(((uint64_t(1) << 32) + d - 1) / d);
}
__device__ __forceinline__ int divide(int u, uint32_t magic) {
  return magic == 0u ? u : static_cast<int>(__umulhi(static_cast<uint32_t>(u), magic));
}

// What launch 1 leaves for launch 2 (device workspace, one chunk).
struct RoutingRecord {
  float* weights;       // [T*K] routing weight of each slot
  int32_t* touched;     // [n] touched experts, ascending
  int32_t* toff;        // [n + 1] first sorted slot of each touched expert
  int32_t* sorted;      // [T*K] slots sorted by expert, stable
  int32_t* num_touched; // [1]
};

struct Gemm1Params {
  route_device::RouteParams route;  // tokens = this chunk's T
  const __nv_bfloat16* hidden;
  const uint8_t* w13;
  const float* gate_scale2;
  const float* up_scale2;
  const float* in_scale;   // w13_input_scale (W4A4) or null
  const float* out_scale;  // w2_input_scale (W4A4) or null
  int hidden_size, inter, top_k, num_experts, tk_cap;
  __nv_bfloat16* h;  // [T*K, I]
  RoutingRecord record;
};

struct Gemm2Params {
  const uint8_t* w2;
  const float* down_scale2;
  const float* in_scale;  // w2_input_scale (W4A4) or null
  const __nv_bfloat16* h;
  RoutingRecord record;
  int tokens, hidden_size, inter, top_k, tk_cap;
  uint32_t chunks_magic;  // division_magic(inter / 128)
  __nv_bfloat16* out;  // [T, H]
};

// 32 activations of one token for this lane's columns [col0, col0 + 32) of a chunk as 16 bf16x2 words
// (word i = columns 2i, 2i+1); zeros for no token (row == nullptr).
__device__ __forceinline__ void load_activations(const __nv_bfloat16* row, uint32_t (&b)[16]) {
  if (!row) {
#pragma unroll
    for (int i = 0; i < 16; ++i) b[i] = 0u;
    return;
  }
  const uint4* src = reinterpret_cast<const uint4*>(row);
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    const uint4 q = __ldg(src + v);
    b[4 * v] = q.x, b[4 * v + 1] = q.y, b[4 * v + 2] = q.z, b[4 * v + 3] = q.w;
  }
}

// W4A4: NVFP4 quantize-dequantize of the lane's two whole 16-value blocks with the expert's input
// scale, without the scale itself (the epilogue multiplies it).
__device__ __forceinline__ void quantize_activations_w4a4(float tensor_scale, uint32_t (&b)[16]) {
#pragma unroll
  for (int blk = 0; blk < 2; ++blk) {
    float x[16], y[16];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      x[2 * i] = __uint_as_float(b[8 * blk + i] << 16);
      x[2 * i + 1] = __uint_as_float(b[8 * blk + i] & 0xFFFF0000u);
    }
    nvfp4_qdq_block(x, tensor_scale, y);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const __nv_bfloat162 pair = __floats2bfloat162_rn(y[2 * i], y[2 * i + 1]);
      b[8 * blk + i] = *reinterpret_cast<const uint32_t*>(&pair);
    }
  }
}

// The 8 k steps of one chunk for one 16-row tile and one 8-token tile: decode and scale the A
// fragments (rows g, g + 8), mma with the activations b.
__device__ __forceinline__ void mma_chunk(float (&acc)[4], const uint4& row0, const uint4& row1, uint32_t codes,
                                          const uint32_t* lut, const uint32_t (&b)[16]) {
  const uint32_t s00 = lut[codes & 0xFFu], s01 = lut[(codes >> 8) & 0xFFu];
  const uint32_t s10 = lut[(codes >> 16) & 0xFFu], s11 = lut[codes >> 24];
  const uint32_t w0[4] = {row0.x, row0.y, row0.z, row0.w}, w1[4] = {row1.x, row1.y, row1.z, row1.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    uint32_t o0[4], o1[4];
    decode_word(w0[j], o0);
    decode_word(w1[j], o1);
    const uint32_t scale0 = j < 2 ? s00 : s01, scale1 = j < 2 ? s10 : s11;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      o0[k] = bf16x2_mul(o0[k], scale0);
      o1[k] = bf16x2_mul(o1[k], scale1);
    }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const uint32_t a[4] = {o0[2 * u], o1[2 * u], o0[2 * u + 1], o1[2 * u + 1]};
      const int s = 2 * j + u;
      mma_bf16(acc, a, b[2 * s], b[2 * s + 1]);
    }
  }
}

// Copies this lane's bytes of one layout block (32 code bytes + 4 scale bytes) into `stage`.
__device__ __forceinline__ void copy_block(uint8_t* stage, const uint8_t* block, int lane) {
  cp_async16(stage + lane * 32, block + lane * 32);
  cp_async16(stage + lane * 32 + 16, block + lane * 32 + 16);
  cp_async4(stage + kDecodeScaleOffset + lane * 4, block + kDecodeScaleOffset + lane * 4);
}

// Block-wide exclusive scan of one uint64 per thread; `scratch` holds kGemm1Warps + 1 values.
__device__ uint64_t block_exclusive_scan(uint64_t value, uint64_t* scratch, uint64_t& total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint64_t inclusive = value;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const uint64_t other = __shfl_up_sync(0xFFFFFFFFu, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  uint64_t before = 0, all = 0;
  for (int w = 0; w < kGemm1Warps; ++w) {
    if (w < warp) before += scratch[w];
    all += scratch[w];
  }
  total = all;
  return before + inclusive - value;
}

// Per-expert totals packed for one scan: sorted slots | touched experts << 21 | token groups << 42.
__device__ __forceinline__ uint64_t pack_counts(int slots) {
  return slots == 0 ? 0ull
                    : uint64_t(slots) | (1ull << 21) | (uint64_t((slots + kTokenGroup - 1) / kTokenGroup) << 42);
}
__device__ __forceinline__ int unpack_field(uint64_t packed, int field) {
  return static_cast<int>((packed >> (21 * field)) & ((1u << 21) - 1));
}

template <int MT>
__global__ void __launch_bounds__(kGemm1Warps * 32, 2) fused_gemm1_kernel(Gemm1Params p) {
  extern __shared__ __align__(16) uint8_t smem[];
  const Gemm1Smem L = gemm1_smem(p.num_experts, p.tk_cap, MT);
  uint32_t* lut = reinterpret_cast<uint32_t*>(smem + L.lut);
  uint8_t* ring = smem + L.ring;
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
  float* red = reinterpret_cast<float*>(smem + L.red);
  int* misc = reinterpret_cast<int*>(smem + L.misc);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int T = static_cast<int>(p.route.tokens), K = p.top_k, E = p.num_experts, TK = T * K;

  for (int i = threadIdx.x; i < 256; i += blockDim.x) lut[i] = scale_lut_entry(i);
  for (int e = threadIdx.x; e < E; e += blockDim.x) counts[e] = 0;

  // 1. Route every token (warp per token; score scratch in the ring, not yet in use).
  float* score = reinterpret_cast<float*>(ring) + size_t(warp) * 2 * E;
  for (int tok = warp; tok < T; tok += kGemm1Warps) {
    route_token_warp(p.route, tok, score, score + E, route_ids + warp * 32, route_weights + warp * 32);
    __syncwarp();
    if (lane < K) {
      const int e = route_ids[warp * 32 + lane];
      ids[tok * K + lane] = static_cast<int16_t>(e >= 0 && e < E ? e : -1);
      if (blockIdx.x == 0) p.record.weights[tok * K + lane] = route_weights[warp * 32 + lane];
    }
    __syncwarp();
  }
  __syncthreads();

  // 2. Stable counting sort of the slots by expert; touched experts in ascending order.
  for (int s = threadIdx.x; s < TK; s += blockDim.x)
    if (ids[s] >= 0) atomicAdd(&counts[ids[s]], 1);  // integer counts: order-independent
  __syncthreads();
  const int per = (E + blockDim.x - 1) / blockDim.x;
  const int e_begin = min(E, static_cast<int>(threadIdx.x) * per), e_end = min(E, e_begin + per);
  uint64_t local = 0;
  for (int e = e_begin; e < e_end; ++e) local += pack_counts(counts[e]);
  uint64_t total = 0;
  uint64_t running = block_exclusive_scan(local, scan, total);
  for (int e = e_begin; e < e_end; ++e) {
    const int c = counts[e];
    if (c == 0) continue;
    const int index = unpack_field(running, 1);
    touched[index] = static_cast<int16_t>(e);
    toff[index] = static_cast<int16_t>(unpack_field(running, 0));
    gprefix[index] = static_cast<int16_t>(unpack_field(running, 2));
    counts[e] = unpack_field(running, 0);  // becomes the placement cursor
    for (int q = 0; q < (c + kTokenGroup - 1) / kTokenGroup; ++q)
      g2j[unpack_field(running, 2) + q] = static_cast<int16_t>(index);
    running += pack_counts(c);
  }
  if (threadIdx.x == 0) {
    const int n = unpack_field(total, 1);
    toff[n] = static_cast<int16_t>(unpack_field(total, 0));
    gprefix[n] = static_cast<int16_t>(unpack_field(total, 2));
    misc[0] = n;
    misc[1] = unpack_field(total, 2);
  }
  __syncthreads();
  if (warp == 0) {
    const uint32_t lower = (1u << lane) - 1u;
    for (int base = 0; base < TK; base += 32) {
      const int s = base + lane;
      const int e = s < TK ? ids[s] : -1;
      const uint32_t peers = __match_any_sync(0xFFFFFFFFu, e);
      if (e >= 0) sorted[counts[e] + __popc(peers & lower)] = static_cast<int16_t>(s);
      __syncwarp();
      if (e >= 0 && (peers & lower) == 0) counts[e] += __popc(peers);
      __syncwarp();
    }
  }
  __syncthreads();
  int16_t* sorted_token = ids;  // the slots' experts are no longer needed: token of each sorted slot
  for (int i = threadIdx.x; i < TK; i += blockDim.x) sorted_token[i] = static_cast<int16_t>(sorted[i] / K);
  __syncthreads();
  const int n_touched = misc[0], n_groups = misc[1];
  if (blockIdx.x == 0) {
    for (int i = threadIdx.x; i < n_touched; i += blockDim.x) p.record.touched[i] = touched[i];
    for (int i = threadIdx.x; i <= n_touched; i += blockDim.x) p.record.toff[i] = toff[i];
    for (int i = threadIdx.x; i < toff[n_touched]; i += blockDim.x) p.record.sorted[i] = sorted[i];
    if (threadIdx.x == 0) *p.record.num_touched = n_touched;
  }

  // 3. Items: (touched expert, 8-token group, 16*MT rows of W13), dealt round-robin over the CTAs
  // (consecutive items on consecutive CTAs, so on different SMs); an item's K chunks are split over the
  // CTA's warps (warp w: chunks w, w + 8, ...), whose partial sums meet in shared memory at the item's
  // end (fixed warp order). Each warp's cp.async ring and activation prefetch run on across items.
  const int row_blocks = 2 * p.inter / (kDecodeTileRows * MT);
  const int chunks = p.hidden_size / kDecodeChunkK;
  const int per_warp = chunks > warp ? (chunks - warp + kGemm1Warps - 1) / kGemm1Warps : 0;
  const size_t tile_stride = size_t(chunks) * kDecodeBlockBytes;
  const size_t expert_stride = size_t(2 * p.inter / kDecodeTileRows) * tile_stride;
  const int stride_q = gridDim.x / row_blocks, stride_rb = gridDim.x % row_blocks;
  // A position in this warp's sequence of (item, chunk) steps; items advance by gridDim.x.
  struct Cursor {
    int q, rb, c;
  };
  auto start = [&](Cursor& cur) {
    cur.q = blockIdx.x / row_blocks, cur.rb = blockIdx.x % row_blocks, cur.c = 0;
  };
  auto advance = [&](Cursor& cur) {
    if (++cur.c < per_warp) return;
    cur.c = 0;
    cur.q += stride_q, cur.rb += stride_rb;
    if (cur.rb >= row_blocks) cur.rb -= row_blocks, ++cur.q;
  };
  uint8_t* my_ring = smem + L.ring + size_t(warp) * kStages1 * MT * kDecodeBlockBytes;
  uint8_t* const ring_end = my_ring + kStages1 * MT * kDecodeBlockBytes;
  Cursor fetch, prefetch_b, cur;
  start(fetch), start(prefetch_b), start(cur);
  uint8_t* fill = my_ring;
  auto issue = [&]() {  // copies the weights of step `fetch` (if any) into the next ring slot
    if (per_warp > 0 && fetch.q < n_groups) {
      const int e = touched[g2j[fetch.q]];
      const uint8_t* src = p.w13 + size_t(e) * expert_stride + size_t(MT) * fetch.rb * tile_stride +
                           size_t(warp + fetch.c * kGemm1Warps) * kDecodeBlockBytes;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) copy_block(fill + mt * kDecodeBlockBytes, src + mt * tile_stride, lane);
      advance(fetch);
    }
    cp_async_commit();
    fill = fill + MT * kDecodeBlockBytes == ring_end ? my_ring : fill + MT * kDecodeBlockBytes;
  };
  auto activations_of = [&](const Cursor& at) -> const __nv_bfloat16* {  // lane g's token row, or null
    if (per_warp == 0 || at.q >= n_groups) return nullptr;
    const int j = g2j[at.q];
    const int first = toff[j] + (at.q - gprefix[j]) * kTokenGroup;
    if (first + g >= toff[j + 1]) return nullptr;
    return p.hidden + size_t(sorted_token[first + g]) * p.hidden_size + (warp + at.c * kGemm1Warps) * kDecodeChunkK +
           32 * t;
  };
  for (int s = 0; s < kStages1 - 1; ++s) issue();
  uint32_t b_even[16], b_odd[16];  // activations two steps ahead, used alternately (no register moves)
  load_activations(activations_of(prefetch_b), b_even);
  advance(prefetch_b);
  load_activations(activations_of(prefetch_b), b_odd);
  advance(prefetch_b);
  const uint8_t* stage = my_ring;
  int parity = 0;
  float acc[MT][4] = {};
  auto step = [&](uint32_t (&b)[16], float w4a4_scale) {
    cp_async_wait<kStages1 - 2>();
    issue();
    if constexpr (MT == 2) quantize_activations_w4a4(w4a4_scale, b);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const uint8_t* tile = stage + mt * kDecodeBlockBytes;
      mma_chunk(acc[mt], *reinterpret_cast<const uint4*>(tile + lane * 32),
                *reinterpret_cast<const uint4*>(tile + lane * 32 + 16),
                *reinterpret_cast<const uint32_t*>(tile + kDecodeScaleOffset + lane * 4), lut, b);
    }
    stage = stage + MT * kDecodeBlockBytes == ring_end ? my_ring : stage + MT * kDecodeBlockBytes;
    load_activations(activations_of(prefetch_b), b);  // this buffer now fetches the step two ahead
    advance(prefetch_b);
    parity ^= 1;
  };
  for (int item_index = 0; cur.q < n_groups; ++item_index) {
    const int j = g2j[cur.q];
    const int e = touched[j];
    const int first = toff[j] + (cur.q - gprefix[j]) * kTokenGroup;
    const int ntok = min(kTokenGroup, toff[j + 1] - first);
    const int rb = cur.rb;
    const float w4a4_scale = MT == 2 ? p.in_scale[e] : 0.0f;
    for (int c = 0; c < per_warp; ++c) {
      if (parity == 0) step(b_even, w4a4_scale);
      else step(b_odd, w4a4_scale);
      advance(cur);
    }
    if (per_warp == 0) {  // this warp has no chunk of this item (H < 8 chunks): its cursor moves alone
      cur.q += stride_q, cur.rb += stride_rb;
      if (cur.rb >= row_blocks) cur.rb -= row_blocks, ++cur.q;
    }
    // The item's partial sums meet in shared memory (two buffers by item parity: the next item's
    // writes cannot overtake this item's reader, who is held at the next barrier).
    float* my_red = red + ((size_t(item_index & 1) * kGemm1Warps + warp) * 32 + lane) * 4 * MT;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) my_red[4 * mt + i] = acc[mt][i], acc[mt][i] = 0.0f;
    __syncthreads();
    if (warp != item_index % kGemm1Warps) continue;
    // Epilogue (one warp per item, rotating): lane holds gate (row g) and up (row g + 8) of h column
    // 8 * (MT rb + mt) + g for token columns 2t + q.
    float sum[MT][4];
    const float* item_red = red + size_t(item_index & 1) * kGemm1Warps * 32 * 4 * MT;
#pragma unroll
    for (int i = 0; i < 4 * MT; ++i) {
      float v = item_red[lane * 4 * MT + i];
      for (int w = 1; w < kGemm1Warps; ++w) v = __fadd_rn(v, item_red[(w * 32 + lane) * 4 * MT + i]);
      sum[i / 4][i % 4] = v;
    }
    const float in_scale = MT == 2 ? p.in_scale[e] : 1.0f;
    const float fg = __fmul_rn(__fmul_rn(p.gate_scale2[e], kScaleLutCompensation), in_scale);
    const float fu = __fmul_rn(__fmul_rn(p.up_scale2[e], kScaleLutCompensation), in_scale);
    float hv[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int qq = 0; qq < 2; ++qq)
        hv[mt][qq] = swiglu_fp32(__fmul_rn(sum[mt][qq], fg), __fmul_rn(sum[mt][2 + qq], fu));
    if constexpr (MT == 2) {
      // W4A4: one NVFP4 block of h = 16 columns of a token = (mt 0..1) x (lanes g = 0..7, same t).
      const float quant_scale = p.out_scale[e];
#pragma unroll
      for (int qq = 0; qq < 2; ++qq) {
        float amax = fmaxf(fabsf(hv[0][qq]), fabsf(hv[1][qq]));
        amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 4));
        amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 8));
        amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 16));
        const float bs = nvfp4_block_scale(amax, quant_scale);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) hv[mt][qq] = nvfp4_qdq_value(hv[mt][qq], amax, bs, quant_scale);
      }
    }
#pragma unroll
    for (int qq = 0; qq < 2; ++qq) {
      const int c = 2 * t + qq;
      if (c >= ntok) continue;
      __nv_bfloat16* dst = p.h + size_t(sorted[first + c]) * p.inter + 8 * MT * rb + g;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) dst[8 * mt] = __float2bfloat16_rn(hv[mt][qq]);
    }
  }
  cp_async_wait<0>();
}

__global__ void __launch_bounds__(kGemm2Warps * 32) fused_gemm2_kernel(Gemm2Params p) {
  extern __shared__ __align__(16) uint8_t smem[];
  const Gemm2Smem L = gemm2_smem(p.tk_cap);
  uint32_t* lut = reinterpret_cast<uint32_t*>(smem + L.lut);
  uint8_t* ring = smem + L.ring;
  float* acc_all = reinterpret_cast<float*>(smem + L.acc);
  int16_t* touched = reinterpret_cast<int16_t*>(smem + L.touched);
  int16_t* toff = reinterpret_cast<int16_t*>(smem + L.toff);
  int16_t* sorted = reinterpret_cast<int16_t*>(smem + L.sorted);
  float* weights = reinterpret_cast<float*>(smem + L.weights);
  float* factors = reinterpret_cast<float*>(smem + L.factor);
  int16_t* sorted_token = reinterpret_cast<int16_t*>(smem + L.sorted_token);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int T = p.tokens, K = p.top_k, TK = T * K;

  for (int i = threadIdx.x; i < 256; i += blockDim.x) lut[i] = scale_lut_entry(i);
  const int n_touched = *p.record.num_touched;
  for (int i = threadIdx.x; i < n_touched; i += blockDim.x) {
    const int e = p.record.touched[i];
    touched[i] = static_cast<int16_t>(e);
    const float in_scale = p.in_scale ? p.in_scale[e] : 1.0f;
    factors[i] = __fmul_rn(__fmul_rn(p.down_scale2[e], kScaleLutCompensation), in_scale);
  }
  for (int i = threadIdx.x; i <= n_touched; i += blockDim.x) toff[i] = static_cast<int16_t>(p.record.toff[i]);
  for (int i = threadIdx.x; i < TK; i += blockDim.x) {
    sorted[i] = static_cast<int16_t>(p.record.sorted[i]);
    sorted_token[i] = static_cast<int16_t>(p.record.sorted[i] / K);
    weights[i] = p.record.weights[i];
  }
  __syncthreads();

  const int chunks = p.inter / kDecodeChunkK;
  const int tiles = p.hidden_size / kDecodeTileRows;
  const size_t expert_stride = size_t(tiles) * chunks * kDecodeBlockBytes;
  const int units = n_touched * chunks;
  const int my_units = units > warp ? (units - warp + kGemm2Warps - 1) / kGemm2Warps : 0;
  uint8_t* my_ring = ring + warp * kStages2 * kStage2Bytes;
  float* acc = acc_all + size_t(warp) * kFusedDecodeMaxTokens * 16;  // [token][16 rows]
  // h of the unit's first token tile (lane g's token), for unit i of this warp; null past the end.
  auto h_row = [&](int i) -> const __nv_bfloat16* {
    if (i >= my_units) return nullptr;
    const int u = warp + i * kGemm2Warps;
    const int j = divide(u, p.chunks_magic);
    if (g >= toff[j + 1] - toff[j]) return nullptr;
    return p.h + size_t(sorted[toff[j] + g]) * p.inter + (u - j * chunks) * kDecodeChunkK + 32 * t;
  };
  for (int rb = blockIdx.x; rb < tiles; rb += gridDim.x) {
    for (int i = lane; i < T * 16; i += 32) acc[i] = 0.0f;
    __syncwarp();
    auto block_of = [&](int i) {
      const int u = warp + i * kGemm2Warps;
      const int j = divide(u, p.chunks_magic);
      return p.w2 + size_t(touched[j]) * expert_stride + (size_t(rb) * chunks + (u - j * chunks)) * kDecodeBlockBytes;
    };
#pragma unroll
    for (int s = 0; s < kStages2 - 1; ++s) {
      if (s < my_units) copy_block(my_ring + s * kStage2Bytes, block_of(s), lane);
      cp_async_commit();
    }
    // The first token tile's h runs two units ahead in registers (it comes from L2: written by launch
    // 1), in two buffers used alternately.
    uint32_t b_even[16], b_odd[16];
    load_activations(h_row(0), b_even);
    load_activations(h_row(1), b_odd);
    const uint8_t* stage = my_ring;
    uint8_t* fill = my_ring + (kStages2 - 1) * kStage2Bytes;
    auto step = [&](int i, uint32_t (&b_tile0)[16]) {
      cp_async_wait<kStages2 - 2>();
      if (i + kStages2 - 1 < my_units) copy_block(fill, block_of(i + kStages2 - 1), lane);
      cp_async_commit();
      fill = fill + kStage2Bytes == my_ring + kStages2 * kStage2Bytes ? my_ring : fill + kStage2Bytes;
      const int u = warp + i * kGemm2Warps;
      const int j = divide(u, p.chunks_magic), kc = u - j * chunks;
      const int first = toff[j], ntok = toff[j + 1] - first;
      const uint4 row0 = *reinterpret_cast<const uint4*>(stage + lane * 32);
      const uint4 row1 = *reinterpret_cast<const uint4*>(stage + lane * 32 + 16);
      const uint32_t codes = *reinterpret_cast<const uint32_t*>(stage + kDecodeScaleOffset + lane * 4);
      stage = stage + kStage2Bytes == my_ring + kStages2 * kStage2Bytes ? my_ring : stage + kStage2Bytes;
      const float factor = factors[j];
      for (int nt = 0; nt * 8 < ntok; ++nt) {
        float part[4] = {};
        if (nt == 0) {
          mma_chunk(part, row0, row1, codes, lut, b_tile0);
        } else {  // more than 8 tokens on this expert (rare at decode): load in place
          const int c = nt * 8 + g;
          uint32_t b_more[16];
          load_activations(c < ntok ? p.h + size_t(sorted[first + c]) * p.inter + kc * kDecodeChunkK + 32 * t : nullptr,
                           b_more);
          mma_chunk(part, row0, row1, codes, lut, b_more);
        }
#pragma unroll
        for (int qq = 0; qq < 2; ++qq) {
          const int col = nt * 8 + 2 * t + qq;
          if (col >= ntok) continue;
          const float f = __fmul_rn(weights[sorted[first + col]], factor);
          float* a = acc + sorted_token[first + col] * 16;
          a[g] = __fadd_rn(a[g], __fmul_rn(part[qq], f));
          a[g + 8] = __fadd_rn(a[g + 8], __fmul_rn(part[2 + qq], f));
        }
      }
      load_activations(h_row(i + 2), b_tile0);  // this buffer now fetches the unit two ahead
    };
    for (int i = 0; i < my_units; i += 2) {
      step(i, b_even);
      if (i + 1 < my_units) step(i + 1, b_odd);
    }
    cp_async_wait<0>();
    __syncthreads();
    for (int i = threadIdx.x; i < T * 16; i += blockDim.x) {
      float y = acc_all[i];
      for (int w = 1; w < kGemm2Warps; ++w) y = __fadd_rn(y, acc_all[size_t(w) * kFusedDecodeMaxTokens * 16 + i]);
      p.out[size_t(i / 16) * p.hidden_size + rb * kDecodeTileRows + i % 16] = __float2bfloat16_rn(y);
    }
    __syncthreads();  // accumulators are zeroed for the next row block
  }
}

int tk_capacity(const MoeProblem& problem) { return static_cast<int>(kFusedDecodeMaxTokens * problem.top_k); }

// Workspace carve: record (weights, touched, toff, sorted, num_touched) | h.
struct Workspace {
  RoutingRecord record;
  __nv_bfloat16* h;
};
size_t record_bytes(int tk_cap) { return align16(size_t(tk_cap) * 4 * 3 + size_t(tk_cap + 1) * 4 + 4) + 256; }
Workspace carve(void* workspace, int tk_cap) {
  char* base = static_cast<char*>(workspace);
  Workspace w{};
  w.record.weights = reinterpret_cast<float*>(base);
  w.record.touched = reinterpret_cast<int32_t*>(base + size_t(tk_cap) * 4);
  w.record.sorted = reinterpret_cast<int32_t*>(base + size_t(tk_cap) * 8);
  w.record.toff = reinterpret_cast<int32_t*>(base + size_t(tk_cap) * 12);
  w.record.num_touched = reinterpret_cast<int32_t*>(base + size_t(tk_cap) * 16 + 4);
  w.h = reinterpret_cast<__nv_bfloat16*>(base + (record_bytes(tk_cap) + 255) / 256 * 256);
  return w;
}

void check_problem(const MoeProblem& problem) {
  problem.validate();
  check_cuda_routing_config(problem.routing);
  FP4MOE_CHECK(problem.hidden % kDecodeChunkK == 0 && problem.inter % kDecodeChunkK == 0,
               "fused decode: H (", problem.hidden, ") and I (", problem.inter, ") must be multiples of ", kDecodeChunkK);
  FP4MOE_CHECK(problem.hidden <= 32768 && problem.inter <= 32768,
               "fused decode: H and I above 32768 are not supported (int16 row indices)");
}

}  // namespace

size_t moe_fused_decode_workspace_bytes(const MoeProblem& problem) {
  check_problem(problem);
  const int tk_cap = tk_capacity(problem);
  return (record_bytes(tk_cap) + 255) / 256 * 256 + size_t(tk_cap) * size_t(problem.inter) * 2;
}

FusedDecodePlan plan_moe_fused_decode(const MoeProblem& problem, int multiprocessors) {
  check_problem(problem);
  FP4MOE_CHECK(multiprocessors >= 1, "fused decode: no multiprocessors");
  const int tk_cap = tk_capacity(problem);
  FusedDecodePlan plan;
  const bool w4a4 = problem.activation_mode == ActivationMode::kW4A4;
  plan.gemm1_smem = gemm1_smem(static_cast<int>(problem.num_experts), tk_cap, w4a4 ? 2 : 1).total;
  plan.gemm2_smem = gemm2_smem(tk_cap).total;
  int device = 0, optin = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  FP4MOE_CHECK(plan.gemm1_smem <= size_t(optin) && plan.gemm2_smem <= size_t(optin), "fused decode: needs ",
               std::max(plan.gemm1_smem, plan.gemm2_smem), " bytes of shared memory per block, the device allows ",
               optin);
  const auto gemm1 = w4a4 ? fused_gemm1_kernel<2> : fused_gemm1_kernel<1>;
  FP4MOE_CUDA_CHECK(
      cudaFuncSetAttribute(gemm1, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.gemm1_smem)));
  FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(fused_gemm2_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(plan.gemm2_smem)));
  int occupancy1 = 0, occupancy2 = 0;
  FP4MOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occupancy1, gemm1, kGemm1Warps * 32,
                                                                  plan.gemm1_smem));
  FP4MOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occupancy2, fused_gemm2_kernel, kGemm2Warps * 32,
                                                                  plan.gemm2_smem));
  FP4MOE_CHECK(occupancy1 >= 1 && occupancy2 >= 1, "fused decode: the kernels cannot be resident on this device");
  // Two CTAs per SM even where three fit: launch 1's items come in rounds over the grid, and with K
  // split over 8 warps a single token's 10 experts x 64 tiles = 640..1280 items make 4.85 rounds on
  // 264 CTAs (the last round 85 % full) but 3.2 on 396 (the last one 23 % full, 24 % longer).
  plan.gemm1_grid = std::min(occupancy1, 2) * multiprocessors;
  plan.gemm2_grid = static_cast<int>(std::min<int64_t>(problem.hidden / kDecodeTileRows, int64_t(occupancy2) * multiprocessors));
  return plan;
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
  FP4MOE_CHECK(plan.gemm1_grid > 0 && plan.gemm2_grid > 0, "fused decode: not planned (plan_moe_fused_decode)");
  const int H = static_cast<int>(problem.hidden), I = static_cast<int>(problem.inter);
  const int E = static_cast<int>(problem.num_experts), K = static_cast<int>(problem.top_k);
  const int tk_cap = tk_capacity(problem);
  const Workspace ws = carve(run.workspace, tk_cap);
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
    p1.in_scale = w4a4 ? weights.w13_input_scale : nullptr;
    p1.out_scale = w4a4 ? weights.w2_input_scale : nullptr;
    p1.hidden_size = H, p1.inter = I, p1.top_k = K, p1.num_experts = E, p1.tk_cap = tk_cap;
    p1.h = ws.h;
    p1.record = ws.record;
    if (w4a4) fused_gemm1_kernel<2><<<plan.gemm1_grid, kGemm1Warps * 32, plan.gemm1_smem, stream>>>(p1);
    else fused_gemm1_kernel<1><<<plan.gemm1_grid, kGemm1Warps * 32, plan.gemm1_smem, stream>>>(p1);
    FP4MOE_CUDA_CHECK_LAUNCH();
    Gemm2Params p2{};
    p2.w2 = weights.w2;
    p2.down_scale2 = weights.down_scale2;
    p2.in_scale = w4a4 ? weights.w2_input_scale : nullptr;
    p2.h = ws.h;
    p2.record = ws.record;
    p2.tokens = T, p2.hidden_size = H, p2.inter = I, p2.top_k = K, p2.tk_cap = tk_cap;
    p2.chunks_magic = division_magic(I / kDecodeChunkK);
    p2.out = out + t0 * H;
    fused_gemm2_kernel<<<plan.gemm2_grid, kGemm2Warps * 32, plan.gemm2_smem, stream>>>(p2);
    FP4MOE_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace fp4moe
