// W4A4 activations of the fused decode's launch 1 (moe_fused_decode_sm80.cu): every routed row (slot
// s = token * K + k) is NVFP4 quantize-dequantized once with its expert's static input scale, into the
// workspace as BF16 (without the tensor scale: the GEMM1 epilogue multiplies it), before any item
// reads it. Units are (slot, 512 columns): one warp, one 16-value block per lane, one reciprocal per
// block instead of a division per value (nvfp4_qdq_fast.h), bit-identical to the CPU reference. Each
// unit publishes a flag with the launch's tag (SharedRoute's epoch scheme); every CTA waits for all
// flags after its weight ring is primed, then its items read the rows like W4A16 reads hidden.
// Why: an expert's activation row is read by all its items (64 per expert at Qwen3.5-397B), and until
// r24 every item quantized it again in its K loop (with a division per value: W4A4 took 3x W4A16's
// time at one token; docs/perf/2026-12-01-h200-r24.md).
// Assumes the grid's first 64 CTAs are resident beside any CTA that waits for them (as the shared
// routing does at 64 tokens): they produce every unit (docs/fused-decode.md, W4A4).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/moe_fused_decode_sm80_params.cuh"
#include "kernels/cuda/moe_fused_decode_sm80_steps.cuh"
#include "kernels/cuda/nvfp4_device.cuh"
#include "kernels/cuda/nvfp4_qdq_fast.h"

namespace fp4moe::fused_decode {

// NVFP4 quantize-dequantize of one 16-value block (8 bf16x2 words) in place, without the tensor scale.
__device__ __forceinline__ void quantize_block_w4a4(uint32_t (&w)[8], float tensor_scale) {
  float x[16], y[16];
  float amax = 0.0f;  // fmaxf drops NaN, as the CPU reference's scan does
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    x[2 * i] = __uint_as_float(w[i] << 16);
    x[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    amax = fmaxf(amax, fmaxf(fabsf(x[2 * i]), fabsf(x[2 * i + 1])));
  }
  const float block_scale = nvfp4_block_scale(amax, tensor_scale);
  const float reciprocal = nvfp4_qdq_reciprocal(__fmul_rn(block_scale, tensor_scale));
  bool unsure = reciprocal == 0.0f || amax == 0.0f;  // no error bound / the all-zero block gives zeros
#pragma unroll
  for (int i = 0; i < 16; ++i) y[i] = __fmul_rn(e2m1_round_by_reciprocal(x[i], reciprocal, unsure), block_scale);
  if (unsure) {  // rare (nvfp4_qdq_fast.h): the block by division, as the reference
#pragma unroll
    for (int i = 0; i < 16; ++i) y[i] = nvfp4_qdq_value(x[i], amax, block_scale, tensor_scale);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(y[2 * i], y[2 * i + 1]);  // exact: <= 5 significant bits
    w[i] = *reinterpret_cast<const uint32_t*>(&pair);
  }
}

// The producers: the grid's first kW4A4Producers CTAs (dispatched first), so that a CTA waiting for the
// units never waits on a CTA that cannot be scheduled while it waits, as long as those CTAs are resident:
// the shared routing's condition at 64 tokens. Unit u = (slot u / parts, part u % parts) goes to CTA
// u % P and warp 1 + (u / P) % warps, wrapping to warp 0 (which sorts the slots meanwhile). A warp
// loads its next unit's hidden values before quantizing the current one, and releases all its units'
// flags after one fence. `slot_expert`: each slot's expert, -1 for none (its row is never read; its flag
// is still set).
inline constexpr int kW4A4Producers = 64;
__device__ __forceinline__ void quantize_units_w4a4(W4A4Rows out, const __nv_bfloat16* hidden, const float* in_scale,
                                                    const int16_t* slot_expert, int slots, int top_k, int hidden_size,
                                                    uint32_t tag, int warps) {
  const int producers = min(static_cast<int>(gridDim.x), kW4A4Producers);
  if (static_cast<int>(blockIdx.x) >= producers) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int parts = w4a4_units_per_row(hidden_size), units = slots * parts;
  const int first = static_cast<int>(blockIdx.x) + producers * ((warp + warps - 1) % warps);
  const int stride = producers * warps;
  // The lane's block of unit u: its hidden values, or nothing (no expert, or past H: H is a multiple of
  // 128, so a lane's block is whole or absent).
  struct Block {
    uint4 q0, q1;
    bool present;
  };
  auto fetch = [&](int u) {
    Block block{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), false};
    if (u >= units) return block;
    const int slot = u / parts, column = (u % parts) * kW4A4UnitColumns + 16 * lane;
    if (slot_expert[slot] < 0 || column >= hidden_size) return block;
    const uint4* src = reinterpret_cast<const uint4*>(hidden + size_t(slot / top_k) * hidden_size + column);
    return Block{__ldg(src), __ldg(src + 1), true};
  };
  Block next = fetch(first);
  for (int u = first; u < units; u += stride) {
    const Block block = next;
    next = fetch(u + stride);
    if (!block.present) continue;
    const int slot = u / parts, column = (u % parts) * kW4A4UnitColumns + 16 * lane;
    uint32_t w[8] = {block.q0.x, block.q0.y, block.q0.z, block.q0.w, block.q1.x, block.q1.y, block.q1.z, block.q1.w};
    quantize_block_w4a4(w, in_scale[slot_expert[slot]]);
    uint4* dst = reinterpret_cast<uint4*>(out.rows + size_t(slot) * hidden_size + column);
    dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
    dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
  }
  // Release: every lane's stores, seen by the whole warp (__syncwarp), precede each lane's fence, which
  // precedes the flags the lanes then set (lane k: the warp's k-th unit, k + 32-th, ...).
  __syncwarp();
  __threadfence();
  for (int u = first + lane * stride; u < units; u += 32 * stride) atomicExch(out.flags + u, tag);
}

// Waits (the whole CTA) until every unit of `slots` rows carries `tag`: relaxed polls, independent so
// they overlap (an acquire per flag in sequence would be up to 20 round trips per thread at 64 tokens
// of Qwen3.5-397B: 5120 units), then one fence.
__device__ __forceinline__ void wait_units_w4a4(const uint32_t* flags, int slots, int hidden_size, uint32_t tag) {
  const int units = slots * w4a4_units_per_row(hidden_size);
  for (;;) {
    bool ready = true;
#pragma unroll 4
    for (int u = threadIdx.x; u < units; u += blockDim.x) ready &= load_relaxed_gpu(flags + u) == tag;
    if (__syncthreads_and(ready)) break;
    __nanosleep(64);
  }
  __threadfence();  // with the polls: acquire (the rows' writes before each release are visible below)
  __syncthreads();
}

}  // namespace fp4moe::fused_decode
