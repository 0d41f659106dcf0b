// PAPER CHECK r43 (compiled on the CPU, never run: neither its results nor its time were checked):
// how many SASS instructions does launch 1's one-token chunk step lose if the block scales are applied after
// the mma (docs/fused-decode.md, road item 12)? step_today is the two-tile step as today (mma_chunk<true>,
// table-free scales, decode + HMUL2 before each mma); step_post feeds the mma a block-diagonal activation
// operand (lane (g, t) gives activations only to block column g: two base addresses, the other lanes read
// zeros), starts each chunk's mma chain from zero and applies the 4 fp32 block scales to the chunk's dots
// with 4 FFMA. Weights, codes and activations come from global memory in both (the ring is left out).
// Count, from the repository root (CUDA 13.0):
//   nvcc -DFP4MOE_WITH_CUDA=1 -Isrc -I<a build folder>/generated -O3 -DNDEBUG \
//     --generate-code=arch=compute_90a,code=sm_90a -std=c++17 -x cu -c THIS.cu -o /tmp/toy.o
//   cuobjdump -sass /tmp/toy.o > /tmp/toy.sass && python3 tools/gpu/sass_loops.py --with HMMA /tmp/toy.sass
// 2026-12-07: step_today's loop 278 instructions (LOP3 97, HMUL2 64, IMAD 55, SHF 18, HMMA 16, LDG 10),
// step_post's 225 (LOP3 104, IMAD 60, SHF 18, HMMA 16, LDG 10, FFMA 8).
#include "kernels/cuda/moe_fused_decode_sm80_steps.cuh"
using namespace fp4moe;
using namespace fp4moe::fused_decode;

__device__ __forceinline__ float scale_f32(uint32_t codes, int byte) {  // e4m3 * 2^-120 (positive normal)
  const uint32_t shifted = byte < 3 ? (codes << (20 - 8 * byte)) : (codes >> 4);
  return __uint_as_float(shifted & 0x07F00000u);
}

__device__ __forceinline__ void mma_chunk_post(float (&acc)[2], const uint4& row0, const uint4& row1, uint32_t codes,
                                               const uint32_t (&b)[16]) {
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  const uint32_t w0[4] = {row0.x, row0.y, row0.z, row0.w}, w1[4] = {row1.x, row1.y, row1.z, row1.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    uint32_t o0[4], o1[4];
    decode_word(w0[j], o0);
    decode_word(w1[j], o1);
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const uint32_t a[4] = {o0[2 * u], o1[2 * u], o0[2 * u + 1], o1[2 * u + 1]};
      const int s = 2 * j + u;
      mma_bf16(d, a, b[2 * s], b[2 * s + 1]);
    }
  }
  acc[0] = fmaf(scale_f32(codes, 0), d[0], acc[0]);
  acc[0] = fmaf(scale_f32(codes, 1), d[1], acc[0]);
  acc[1] = fmaf(scale_f32(codes, 2), d[2], acc[1]);
  acc[1] = fmaf(scale_f32(codes, 3), d[3], acc[1]);
}

__device__ __forceinline__ void load_b(const uint4* lo, const uint4* hi, uint32_t (&b)[16]) {
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    const uint4 q = __ldg((v < 2 ? lo : hi) + (v & 1));
    b[4 * v] = q.x, b[4 * v + 1] = q.y, b[4 * v + 2] = q.z, b[4 * v + 3] = q.w;
  }
}

// Two 16-row tiles per step, as launch 1's one-token twin; weights and scales from global (the same in both).
__global__ void step_today(const uint4* w, const uint32_t* codes, const uint4* x, float* out, int chunks) {
  const int lane = threadIdx.x & 31;
  float acc0[4] = {}, acc1[4] = {};
  for (int c = 0; c < chunks; ++c) {
    uint32_t b[16];
    load_b(x + c * 128 + lane * 4, x + c * 128 + lane * 4 + 2, b);
    const uint4* t = w + c * 128 + lane;
    mma_chunk<true>(acc0, t[0], t[32], codes[c * 64 + lane], nullptr, b);
    mma_chunk<true>(acc1, t[64], t[96], codes[c * 64 + 32 + lane], nullptr, b);
  }
  out[threadIdx.x] = acc0[0] + acc0[1] + acc0[2] + acc0[3] + acc1[0] + acc1[1] + acc1[2] + acc1[3];
}

__global__ void step_post(const uint4* w, const uint32_t* codes, const uint4* x, const uint4* zeros, float* out, int chunks) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // lane (g, t) gives its activations to block column g only: k steps 0-3 use block 2t, 4-7 block 2t + 1
  const uint4* lo = g == 2 * t ? x + lane * 4 : zeros;
  const uint4* hi = g == 2 * t + 1 ? x + lane * 4 + 2 : zeros;
  const int lo_stride = g == 2 * t ? 128 : 0, hi_stride = g == 2 * t + 1 ? 128 : 0;
  float acc0[2] = {}, acc1[2] = {};
  for (int c = 0; c < chunks; ++c) {
    uint32_t b[16];
    load_b(lo, hi, b);
    lo += lo_stride;
    hi += hi_stride;
    const uint4* tw = w + c * 128 + lane;
    mma_chunk_post(acc0, tw[0], tw[32], codes[c * 64 + lane], b);
    mma_chunk_post(acc1, tw[64], tw[96], codes[c * 64 + 32 + lane], b);
  }
  out[threadIdx.x] = acc0[0] + acc0[1] + acc1[0] + acc1[1];
}
