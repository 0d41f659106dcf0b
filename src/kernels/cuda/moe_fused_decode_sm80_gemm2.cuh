// Launch 2 of the fused decode (moe_fused_decode_sm80.cu; API moe_fused_decode_sm80.h): GEMM2 + the
// weighted combine, SM80+ (mma.sync m16n8k16 BF16, fp32 accumulation).
// Inputs: h [T*K slots, I] BF16 from launch 1 (quantize-dequantized for W4A4), W2 in the
// nvfp4_decode_layout.h layout, and launch 1's routing record (sorted slots, their tokens and factors =
// routing weight x down_scale2, the touched experts), read once the record writer has released it.
// Output: out [T, H] BF16, written once per element (no atomics).
// Work: row blocks of 16 (or 32, kGemm2Shapes) rows of H per CTA; the CTA's warps split the block's
// (expert, 128-wide K chunk) units in contiguous ranges, each warp folds an expert's chunks into its own
// fp32 token x row accumulators, and the warps' sums meet in shared memory in warp order: bit-identical
// reruns. On SM90 a programmatic dependent launch: it fills its first W2 ring stages before
// griddepcontrol.wait, and only h waits for launch 1. Why: at decode GEMM2 is a third of the bytes
// (docs/fused-decode.md); split off to keep the launch-1 file under ~800 lines.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/common/programmatic_launch.cuh"
#include "kernels/cuda/moe_fused_decode_sm80_params.cuh"
#include "kernels/cuda/moe_fused_decode_sm80_steps.cuh"

namespace fp4moe::fused_decode {

using sm80::cp_async_commit;
using sm80::cp_async_wait;
using sm80::scale_lut_entry;

// kOneTile: at most kTokenGroup tokens (every chunk of decode's usual sizes), so no expert has more than
// one 8-token tile: the step has no tile loop and folds once per expert and range (fewer instructions
// and branches per unit; at one token of Qwen3.5-397B launch 2 issues ~6 M warp instructions), and the
// accumulators hold 8 tokens. RT 16-row tiles of H per CTA (row block), RT = 2 in the one-tile instance only.
// kTableFree: W2's block scales are all positive normal E4M3 codes (BlockScales).
template <int kShape, bool kOneTile, bool kTableFree>
__global__ void __launch_bounds__(kGemm2Shapes[kShape].warps * 32, kGemm2Shapes[kShape].ctas_per_sm)
    fused_gemm2_kernel(Gemm2Params p) {
  constexpr int kGemm2Warps = kGemm2Shapes[kShape].warps, kStages2 = kGemm2Shapes[kShape].stages;
  constexpr int RT = kGemm2Shapes[kShape].row_tiles;
  static_assert(RT == 1 || kOneTile, "32-row CTAs take chunks of at most 8 tokens (8-token accumulators)");
  constexpr int kRows = RT * kDecodeTileRows;                   // rows of H per row block
  constexpr int kAccTokens = gemm2_acc_tokens(kOneTile);
  constexpr int kStageBytes = RT * kDecodeBlockBytes;  // one ring stage: a chunk of each tile
  extern __shared__ __align__(16) uint8_t smem[];
  const Gemm2Smem L = gemm2_smem(p.tk_cap, kGemm2Shapes[kShape], kOneTile);
  uint32_t* lut = reinterpret_cast<uint32_t*>(smem + L.lut);
  float* acc_all = reinterpret_cast<float*>(smem + L.acc);
  int16_t* touched = reinterpret_cast<int16_t*>(smem + L.touched);
  int16_t* toff = reinterpret_cast<int16_t*>(smem + L.toff);
  int16_t* sorted = reinterpret_cast<int16_t*>(smem + L.sorted);
  int16_t* sorted_token = reinterpret_cast<int16_t*>(smem + L.sorted_token);
  float* slot_factor = reinterpret_cast<float*>(smem + L.slot_factor);
  // The warp index through a shuffle (the identity): ptxas cannot recompute it from %tid.x, so the ring's
  // bounds (LaneRing) stay in registers instead of being rebuilt from an S2R in every unit step.
  const int warp = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x / 32), 0);
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int T = p.tokens, K = p.top_k;

  if constexpr (!kTableFree)
    for (int i = threadIdx.x; i < 256; i += blockDim.x) lut[i] = scale_lut_entry(i);
  // The routing record is complete once launch 1's writer released it (long before launch 1 ends):
  // read it, and fill the first W2 ring stages, before waiting for launch 1's h.
  if (threadIdx.x == 0)
    while (load_acquire_gpu(p.record.ready) != kRecordReady) __nanosleep(128);
  __syncthreads();  // orders every thread's record reads after thread 0's acquire
  // One round of independent loads (no load waits for another): every entry T tokens can fill, those
  // past the record's counts read but not used. Per sorted slot: its slot, token and factor.
  const int TK = T * K;
  const int n_touched = __ldcg(p.record.num_touched);
  for (int i = threadIdx.x; i <= TK; i += blockDim.x) {
    toff[i] = static_cast<int16_t>(__ldcg(p.record.toff + i));
    if (i == TK) continue;
    touched[i] = static_cast<int16_t>(__ldcg(p.record.touched + i));
    const int slot = __ldcg(p.record.sorted + i);
    sorted[i] = static_cast<int16_t>(slot);
    sorted_token[i] = static_cast<int16_t>(slot / K);
    slot_factor[i] = __ldcg(p.record.factor + i);
  }
  __syncthreads();

  // Units = (touched expert j, K chunk kc of I), numbered u = j * chunks + kc. Warp w takes the
  // contiguous range [w U / W, (w + 1) U / W), so its consecutive units are chunks of one expert (at one
  // token of Qwen3.5-397B with 10 warps: one whole expert each): the expert's dot accumulates in the mma
  // registers over its chunks and is folded into the token accumulators once per expert and range, and
  // each cursor steps by a stride inside an expert. (Until r17 warp w took u = w, w + W, ...: every unit
  // changed expert and paid a fold through shared memory and three address computations.)
  const int chunks = p.inter / kDecodeChunkK;
  const int tiles = p.hidden_size / kDecodeTileRows;
  const int row_blocks = tiles / RT;  // H is a multiple of 128 (checked on the host)
  const size_t tile_stride = size_t(chunks) * kDecodeBlockBytes;
  const size_t expert_stride = size_t(tiles) * tile_stride;
  const int units = n_touched * chunks;
  const int u_begin = static_cast<int>(int64_t(units) * warp / kGemm2Warps);
  const int my_units = static_cast<int>(int64_t(units) * (warp + 1) / kGemm2Warps) - u_begin;
  LaneRing ring(smem, L.ring, warp, kStages2, kStageBytes, lane);
  float* acc = acc_all + size_t(warp) * kAccTokens * kRows;  // [token][kRows rows]
  // Lane (g, t)'s h row for touched expert j: the row of the expert's slot g (or of its slot 0, see
  // load_activations), from column 32 t.
  auto h_row = [&](int j) -> const __nv_bfloat16* {
    const int first = toff[j];
    const int slot = g < toff[j + 1] - first ? sorted[first + g] : sorted[first];
    return p.h + size_t(slot) * p.inter + 32 * t;
  };
  // The weight cursor of the current row block: zeroes the accumulators and fills kStages2 - 1 stages.
  const uint8_t* w2_rows = nullptr;
  const uint8_t* fetch_src = nullptr;
  int fetch_kc = 0, fetch_j = 0, fetch_left = 0;
  auto issue = [&]() {
    if (fetch_left > 0) {
      copy_lane_stage<RT, CopyAddress::kPlain>(ring, fetch_src, tile_stride);
      fetch_src += kDecodeBlockBytes;
      if (--fetch_left > 0 && ++fetch_kc == chunks) {
        fetch_kc = 0;
        fetch_src = w2_rows + size_t(touched[++fetch_j]) * expert_stride;
      }
    }
    cp_async_commit();
    ring.fill = ring.next(ring.fill);
  };
  auto start_row_block = [&](int rb) {
    for (int i = lane; i < T * kRows; i += 32) acc[i] = 0.0f;
    __syncwarp();
    w2_rows = p.w2 + size_t(rb) * RT * tile_stride + lane * 16;
    fetch_j = u_begin / chunks, fetch_kc = u_begin % chunks, fetch_left = my_units;
    if (my_units > 0) fetch_src = w2_rows + size_t(touched[fetch_j]) * expert_stride + fetch_kc * kDecodeBlockBytes;
    ring.fill = ring.read = ring.begin;
    for (int s = 0; s < kStages2 - 1; ++s) issue();
  };
  if (static_cast<int>(blockIdx.x) < row_blocks) start_row_block(blockIdx.x);
  pdl_wait_for_primary();  // launch 1's h is complete and visible from here on
  for (int rb = blockIdx.x; rb < row_blocks; rb += gridDim.x) {
    if (rb != static_cast<int>(blockIdx.x)) start_row_block(rb);
    // The first token tile's h runs two units ahead in registers (it comes from L2: written by launch 1),
    // in two buffers used alternately. Past the range the cursor stays on a valid row (never used).
    int act_kc = u_begin % chunks, act_j = u_begin / chunks, act_left = my_units;
    const __nv_bfloat16* act_src = my_units > 0 ? h_row(act_j) + act_kc * kDecodeChunkK : p.h + 32 * t;
    auto load_next_h = [&](uint32_t (&b)[16]) {
      load_activations(act_src, b);
      if (act_left > 0 && --act_left > 0) {
        act_src += kDecodeChunkK;
        if (++act_kc == chunks) act_kc = 0, act_src = h_row(++act_j);
      }
    };
    uint32_t b_even[16], b_odd[16];
    load_next_h(b_even);
    load_next_h(b_odd);
    int cur_kc = u_begin % chunks, cur_j = u_begin / chunks;
    int first = my_units > 0 ? toff[cur_j] : 0, ntok = my_units > 0 ? toff[cur_j + 1] - first : 0;
    // The current expert's first token tile (up to 8 tokens) per row tile, over its chunks so far.
    float dot[RT][4] = {};
    // Adds slot_factor * d (routing weight * down_scale2 * 2^9 ...) to the accumulators of token tile nt.
    auto fold = [&](const float (&d)[RT][4], int nt) {
#pragma unroll
      for (int qq = 0; qq < 2; ++qq) {
        const int col = nt * 8 + 2 * t + qq;
        if (col >= ntok) continue;
        const float f = slot_factor[first + col];
        float* a = acc + sorted_token[first + col] * kRows;
#pragma unroll
        for (int mt = 0; mt < RT; ++mt) {
          a[16 * mt + g] = __fadd_rn(a[16 * mt + g], __fmul_rn(d[mt][qq], f));
          a[16 * mt + g + 8] = __fadd_rn(a[16 * mt + g + 8], __fmul_rn(d[mt][2 + qq], f));
        }
      }
      __syncwarp();  // the next fold's lanes may add to the same token's accumulators
    };
    auto clear_dot = [&]() {
#pragma unroll
      for (int mt = 0; mt < RT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) dot[mt][i] = 0.0f;
    };
    auto step = [&](uint32_t (&b_tile0)[16], bool last) {
      cp_async_wait<kStages2 - 2>();
      issue();
      const uint32_t stage = ring.read;
      ring.read = ring.next(ring.read);
      if constexpr (kOneTile) {
#pragma unroll
        for (int mt = 0; mt < RT; ++mt) {
          const LaneBlock block = read_lane_block(smem, stage + mt * kDecodeBlockBytes, ring.scale_delta);
          mma_chunk<kTableFree>(dot[mt], block.row0, block.row1, block.scales, lut, b_tile0);
        }
      } else {
        const LaneBlock block = read_lane_block(smem, stage, ring.scale_delta);  // RT = 1
        // More than 8 tokens on this expert (rare at decode): every tile's chunk dot is folded at once; the
        // further tiles' h are loaded in place (b_tile0 is refilled for the unit two ahead below).
        for (int nt = 0; nt * 8 < ntok; ++nt) {
          if (nt > 0) {
            const int c = nt * 8 + g;
            load_activations(
                p.h + size_t(sorted[c < ntok ? first + c : first]) * p.inter + cur_kc * kDecodeChunkK + 32 * t, b_tile0);
          }
          mma_chunk<kTableFree>(dot[0], block.row0, block.row1, block.scales, lut, b_tile0);
          if (ntok > 8) {
            fold(dot, nt);
            clear_dot();
          }
        }
      }
      if (++cur_kc == chunks || last) {  // the expert's last chunk in this range: fold its dot
        if (kOneTile || ntok <= 8) fold(dot, 0);
        clear_dot();
        if (cur_kc == chunks && !last) cur_kc = 0, first = toff[++cur_j], ntok = toff[cur_j + 1] - first;
      }
      load_next_h(b_tile0);  // this buffer now fetches the unit two ahead
    };
    for (int i = 0; i < my_units; i += 2) {
      step(b_even, i + 1 == my_units);
      if (i + 1 < my_units) step(b_odd, i + 2 == my_units);
    }
    cp_async_wait<0>();
    __syncthreads();
    for (int i = threadIdx.x; i < T * kRows; i += blockDim.x) {
      float y = acc_all[i];
      for (int w = 1; w < kGemm2Warps; ++w) y = __fadd_rn(y, acc_all[size_t(w) * kAccTokens * kRows + i]);
      p.out[size_t(i / kRows) * p.hidden_size + rb * kRows + i % kRows] = __float2bfloat16_rn(y);
    }
    __syncthreads();  // accumulators are zeroed for the next row block
  }
  // Every CTA acquired `ready` before it arrives here: the last to arrive clears it for the next pair.
  if (threadIdx.x == 0 && atomicAdd(p.record.arrivals, 1) == static_cast<int>(gridDim.x) - 1)
    atomicExch(p.record.ready, 0);
  // Launch 1 is over (past pdl_wait_for_primary): the next launch 1's shared-routing tag is new.
  if (blockIdx.x == 0 && threadIdx.x == 0) *p.share_epoch = __ldcg(p.share_epoch) + 1u;
}

}  // namespace fp4moe::fused_decode
