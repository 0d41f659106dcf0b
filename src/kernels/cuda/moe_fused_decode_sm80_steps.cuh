// The fused decode kernels' per-lane steps (moe_fused_decode_sm80.cu): activation loads (their W4A4
// quantization is moe_fused_decode_sm80_w4a4.cuh), one chunk's decode + mma, the lane's copies (evict-first
// in L2) and reads of a weight block in the nvfp4_decode_layout.h layout, a flag's acquire (the
// programmatic-dependent-launch hooks are common/programmatic_launch.cuh). Device code for SM80+; included
// by that one file, split off to keep it readable.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/common/programmatic_launch.cuh"
#include "kernels/cuda/nvfp4_decode_layout.h"

namespace fp4moe::fused_decode {

using sm80::bf16x2_mul;
using sm80::bf16x2_mul_by_half;
using sm80::mma_bf16;
using sm80::normal_scale_pair_bf16x2;

// 32 activations of one token for this lane's columns [col0, col0 + 32) of a chunk as 16 bf16x2 words
// (word i = columns 2i, 2i+1). Lanes without a token (mma column g past the item's tokens) load a valid
// row of another token: their output column is never written, and the loads coalesce with lane g = 0's.
// kWrittenThisKernel: the rows were written by this grid (W4A4's quantized rows) and are read after an
// acquire (wait_units_w4a4), so not through the read-only path (ld.global.nc) but with weak loads, which
// the acquire orders after the writes (PTX memory model) and which may hit L1 (an SM's CTAs read the same
// rows).
__device__ __forceinline__ uint4 load_weak_v4(const uint4* address) {
  uint4 q;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w) : "l"(address));
  return q;
}
template <bool kWrittenThisKernel = false>
__device__ __forceinline__ void load_activations(const __nv_bfloat16* row, uint32_t (&b)[16]) {
  const uint4* src = reinterpret_cast<const uint4*>(row);
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    const uint4 q = kWrittenThisKernel ? load_weak_v4(src + v) : __ldg(src + v);
    b[4 * v] = q.x, b[4 * v + 1] = q.y, b[4 * v + 2] = q.z, b[4 * v + 3] = q.w;
  }
}

// A flag another CTA released (a fence, then an atomic store): what it wrote before is visible after this.
__device__ __forceinline__ int32_t load_acquire_gpu(const int32_t* address) {
  int32_t value;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
  return value;
}

// A flag read without ordering (polls; the caller fences once after the last).
__device__ __forceinline__ uint32_t load_relaxed_gpu(const uint32_t* address) {
  uint32_t value;
  asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
  return value;
}

// The block scales of a lane's scale word `codes` (nvfp4_decode_layout.h: E4M3 codes of (row g, the
// lane's first block of the chunk), (row g, its second), then the same for row g + 8) as bf16 multipliers
// of the decoded codes, multiplied in with scale_by.
// kTableFree (every scale of the matrix a positive normal code, checked at prepare): built as the sm80
// pipeline's table-free instances do (e4m3_scale_bits.h: (code << 4) + bias), two codes per word, one in
// each half (a byte permute and a multiply-add per two scales; the multiply takes its half for both
// lanes, bf16x2_mul_by_half). Else loaded from the kernel's table, one code per word in both halves (a
// shift, a mask and a shared-memory load per scale). Both give the same bits for such codes.
template <bool kTableFree>
struct BlockScales {
  uint32_t rows_g[kTableFree ? 1 : 2], rows_g8[kTableFree ? 1 : 2];  // [block], or both blocks' halves
  __device__ __forceinline__ BlockScales(uint32_t codes, const uint32_t* lut) {
    if constexpr (kTableFree) {
      rows_g[0] = normal_scale_pair_bf16x2<0>(codes);
      rows_g8[0] = normal_scale_pair_bf16x2<2>(codes);
    } else {
#pragma unroll
      for (int kb = 0; kb < 2; ++kb) {
        rows_g[kb] = lut[(codes >> (8 * kb)) & 0xFFu];
        rows_g8[kb] = lut[(codes >> (8 * (kb + 2))) & 0xFFu];
      }
    }
  }
  // Decoded codes `o` (bf16x2) of row g (row8 false) or g + 8 in the lane's block kb, times its scale.
  template <int kb>
  __device__ __forceinline__ uint32_t scale_by(uint32_t o, bool row8) const {
    static_assert(kb == 0 || kb == 1, "two k blocks per chunk step");
    if constexpr (kTableFree) return bf16x2_mul_by_half<kb == 1>(o, row8 ? rows_g8[0] : rows_g[0]);
    else return bf16x2_mul(o, row8 ? rows_g8[kb] : rows_g[kb]);
  }
};

// The 8 k steps of one chunk for one 16-row tile and one 8-token tile: decode and scale the A
// fragments (rows g, g + 8), mma with the activations b. kTableFree: see BlockScales (`lut` unused).
template <bool kTableFree>
__device__ __forceinline__ void mma_chunk(float (&acc)[4], const uint4& row0, const uint4& row1, uint32_t codes,
                                          const uint32_t* lut, const uint32_t (&b)[16]) {
  const BlockScales<kTableFree> scales(codes, lut);
  const uint32_t w0[4] = {row0.x, row0.y, row0.z, row0.w}, w1[4] = {row1.x, row1.y, row1.z, row1.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    uint32_t o0[4], o1[4];
    decode_word(w0[j], o0);
    decode_word(w1[j], o1);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (j < 2) {
        o0[k] = scales.template scale_by<0>(o0[k], false);
        o1[k] = scales.template scale_by<0>(o1[k], true);
      } else {
        o0[k] = scales.template scale_by<1>(o0[k], false);
        o1[k] = scales.template scale_by<1>(o1[k], true);
      }
    }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const uint32_t a[4] = {o0[2 * u], o1[2 * u], o0[2 * u + 1], o1[2 * u + 1]};
      const int s = 2 * j + u;
      mma_bf16(acc, a, b[2 * s], b[2 * s + 1]);
    }
  }
}

// A warp's private cp.async ring as one lane sees it: byte offsets into the kernel's shared memory of
// the lane's bytes in the next stage to fill and the next to read. They are loop-carried, so they stay in
// registers: until r21 ptxas recomputed each step's stage addresses from the thread index and the slot
// numbers (it still rematerializes scale_delta). 24 fewer SASS instructions in launch 1's two-step loop
// (793 -> 769), 0.6-1.4 % less time at 1-64 tokens of Qwen3.5-397B (docs/perf/2026-12-01-h200-r21.md).
struct LaneRing {
  uint32_t begin, end;  // the lane's bytes in the first stage; one stage past the last
  int stage_bytes;
  int scale_delta;  // from the lane's first code byte of a block to its scale bytes: kDecodeScaleOffset - 12 lane
  uint32_t fill, read;
  uint32_t copy_base;    // the shared-window address of `smem`
  uint32_t opaque_zero;  // 0, from a shuffle: ptxas cannot prove it uniform (copy_lane_stage says why)
  // The whole warp constructs it (opaque_zero is a shuffle).
  __device__ __forceinline__ LaneRing(const uint8_t* smem, size_t ring_offset, int warp, int stages, int stage_bytes_,
                                      int lane)
      : begin(static_cast<uint32_t>(ring_offset + size_t(warp) * stages * stage_bytes_) + 16u * lane),
        end(begin + static_cast<uint32_t>(stages * stage_bytes_)),
        stage_bytes(stage_bytes_),
        scale_delta(kDecodeScaleOffset - 12 * lane),
        fill(begin),
        read(begin),
        copy_base(sm80::smem_addr(smem)),
        opaque_zero(__shfl_sync(0xFFFFFFFFu, lane, lane) ^ static_cast<uint32_t>(lane)) {}
  __device__ __forceinline__ uint32_t next(uint32_t at) const {
    at += stage_bytes;
    return at == end ? begin : at;
  }
};

// Copies a lane's bytes of one layout block to shared memory at shared-window address `at`: its 16 code
// bytes of each row half (decode_code_offset) and its 4 scale bytes at kDecodeScaleOffset + 4 lane; `at`
// and `src` are the lane's first code bytes (16 lane), so the scale bytes are `scale_delta` from there.
// Each of the three copies of a warp covers contiguous bytes.
// The weights are read once per layer, so their copies carry an L2 evict-first policy: they replace each
// other in L2, not the layer's inputs, workspace and code (docs/perf/2026-12-06-h100-r36.md).
// CUDA 13.0's ptxas miscompiles such a copy when it splits the shared address into a lane register plus a
// uniform register: the LDGSTS gets its descriptor in an odd uniform register that nothing sets, and the
// kernel dies with an illegal instruction (r35; the ptxas bug of triton-lang/triton#11660, fixed in 13.4).
// tools/gpu/sass_odd_descriptors.py finds that form; ctest runs it on the built kernels.
static_assert(decode_code_offset(1, 0) == 16 && decode_code_offset(0, 1) == kDecodeHalfBytes, "layout of the header");
__device__ __forceinline__ void copy_lane_bytes(uint32_t at, const uint8_t* src, int scale_delta) {
  uint64_t evict_first;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(evict_first));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(at), "l"(src), "l"(evict_first));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(at + kDecodeHalfBytes),
               "l"(src + kDecodeHalfBytes), "l"(evict_first));
  asm volatile("cp.async.ca.shared.global.L2::cache_hint [%0], [%1], 4, %2;\n" ::"r"(at + scale_delta),
               "l"(src + scale_delta), "l"(evict_first));
}
// The lane's bytes of one ring stage (at ring.fill): `tiles` layout blocks, one after the other in the
// stage and `tile_stride` bytes apart from `src` on in global memory (launches 1 and 2 hold 16-row tiles
// of their weights, 1 or 2 per item).
// CopyAddress::kOpaque: the stage's address is an exclusive or with LaneRing::opaque_zero, which ptxas can
// neither fold nor split, so no copy takes the miscompiled form (copy_lane_bytes). Launch 1 needs it: its
// unrolled first stages are where ptxas split the address (a shuffled base alone did not stop it: the
// warp's ring offset went to a uniform register again). Launch 2 compiles cleanly with kPlain, and its
// one-tile instance has no register to spare (FusedDecodeRegisters: +3 with kOpaque, and launch 2 no
// longer fits beside launch 1's last CTA; docs/perf/2026-12-06-h100-r36.md).
enum class CopyAddress { kPlain, kOpaque };
template <int tiles, CopyAddress address>
__device__ __forceinline__ void copy_lane_stage(const LaneRing& ring, const uint8_t* src, size_t tile_stride) {
  const uint32_t at = address == CopyAddress::kOpaque ? (ring.copy_base + ring.fill) ^ ring.opaque_zero
                                                      : ring.copy_base + ring.fill;
#pragma unroll
  for (int mt = 0; mt < tiles; ++mt)
    copy_lane_bytes(at + mt * kDecodeBlockBytes, src + mt * tile_stride, ring.scale_delta);
}
// The lane's two code quads and scale word of a block in shared memory (`at`: a byte offset into `smem`;
// `scale_delta` as in copy_lane_bytes).
struct LaneBlock {
  uint4 row0, row1;
  uint32_t scales;
};
__device__ __forceinline__ LaneBlock read_lane_block(const uint8_t* smem, uint32_t at, int scale_delta) {
  return LaneBlock{*reinterpret_cast<const uint4*>(smem + at),
                   *reinterpret_cast<const uint4*>(smem + at + kDecodeHalfBytes),
                   *reinterpret_cast<const uint32_t*>(smem + at + scale_delta)};
}

}  // namespace fp4moe::fused_decode
