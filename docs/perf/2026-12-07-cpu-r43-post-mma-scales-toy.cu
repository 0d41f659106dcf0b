// PAPER CHECK r43 (compiled on the CPU, never run: neither its results nor its time were checked):
// how many SASS instructions does launch 1's one-token chunk step lose if the block scales are applied after
// the mma (docs/fused-decode.md, road item 12)? step_today is the two-tile step as today (mma_chunk<true>,
// table-free scales, decode + HMUL2 before each mma); step_post feeds the mma a block-diagonal activation
// operand (lane (g, t) gives activations only to block column g, the other lanes read zeros), starts each chunk's mma chain from zero and applies the 4 fp32 block scales to the chunk's dots
// with 4 FFMA. Weights, codes and activations come from global memory in both (the ring is left out).
// step_post's loads and chunk are load_activations_block_diagonal and mma_chunk_post of
// 2026-12-07-cpu-r43-post-mma-scales-diag.patch (one copy of that code), so build against a copy of the tree with the patch applied. Count, from the repository root
// (CUDA 13.0):
//   rm -rf /tmp/toy-src && git worktree add /tmp/toy-src HEAD && (cd /tmp/toy-src && git apply \
//     docs/perf/2026-12-07-cpu-r43-post-mma-scales-diag.patch)
//   nvcc -DFP4MOE_WITH_CUDA=1 -I/tmp/toy-src/src -I<a build folder>/generated -O3 -DNDEBUG \
//     --generate-code=arch=compute_90a,code=sm_90a -std=c++17 -x cu -c THIS.cu -o /tmp/toy.o
//   cuobjdump -sass /tmp/toy.o > /tmp/toy.sass && python3 tools/gpu/sass_loops.py --with HMMA /tmp/toy.sass
// 2026-12-07: step_today's loop 271 instructions (LOP3 96, HMUL2 64, IMAD 51, HMMA 16, SHF 16, LDG 10),
// step_post's 231 (LOP3 104, IMAD 60, SHF 18, HMMA 16, LDG 10, FFMA 8).
#include "kernels/cuda/moe_fused_decode_sm80_steps.cuh"
using namespace fp4moe;
using namespace fp4moe::fused_decode;

// Two 16-row tiles per step, as launch 1's one-token twin; weights and scales from global (the same in both).
__global__ void step_today(const uint4* w, const uint32_t* codes, const uint4* x, float* out, int chunks) {
  const int lane = threadIdx.x & 31;
  float acc0[4] = {}, acc1[4] = {};
  for (int c = 0; c < chunks; ++c) {
    uint32_t b[16];
    load_activations(reinterpret_cast<const __nv_bfloat16*>(x + c * 128 + lane * 4), b);
    const uint4* t = w + c * 128 + lane;
    mma_chunk<true>(acc0, t[0], t[32], codes[c * 64 + lane], nullptr, b);
    mma_chunk<true>(acc1, t[64], t[96], codes[c * 64 + 32 + lane], nullptr, b);
  }
  out[threadIdx.x] = acc0[0] + acc0[1] + acc0[2] + acc0[3] + acc1[0] + acc1[1] + acc1[2] + acc1[3];
}

__global__ void step_post(const uint4* w, const uint32_t* codes, const uint4* x, float* out, int chunks) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float acc0[4] = {}, acc1[4] = {};
  for (int c = 0; c < chunks; ++c) {
    uint32_t b[16];
    load_activations_block_diagonal(reinterpret_cast<const __nv_bfloat16*>(x + c * 128 + lane * 4), g, t, b);
    const uint4* tw = w + c * 128 + lane;
    mma_chunk_post(acc0, tw[0], tw[32], codes[c * 64 + lane], b);
    mma_chunk_post(acc1, tw[64], tw[96], codes[c * 64 + 32 + lane], b);
  }
  out[threadIdx.x] = acc0[0] + acc0[2] + acc1[0] + acc1[2];
}
