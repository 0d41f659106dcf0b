// Grouped NVFP4-weight x BF16-activation GEMM for MoE prefill on Hopper (sm_90a ONLY: wgmma, setmaxnreg).
//
// Inputs: sorted activation rows A [rows, K] BF16 (launch_moe_gather or GEMM1's h), the weights in the
// layout of repack_nvfp4_for_sm90 (header), the M-tile list of launch_moe_align (tile_m = 128; a tile
// is (expert, first row) and rows past the expert's end are masked at the store, never skipped in A).
// CTA = 4 warpgroups, one CTA per SM, persistent: work item i = (M tile i / N tiles, N tile i % N tiles),
// CTA c takes items c, c + grid, ... (static round robin: deterministic, no atomics, no host sync).
//  * WG0-1 (producers, setmaxnreg 56): thread 0 loads the A block (128 rows x 64 k) with one TMA
//    (cp.async.bulk.tensor, 128-byte swizzle, zero fill past `rows`) onto the stage's full barrier;
//    thread p streams half p / 128 of W row p % 128 (packed FP4 + the row's E4M3 codes) through its
//    own cp.async ring (each thread reads back only what it copied: no barrier) and dequantizes it
//    exactly to BF16 into the stage's B buffer in the same 128-byte swizzled K-major layout, then
//    fences the async proxy and arrives on the full barrier.
//  * WG2, WG3 (consumers, setmaxnreg 200): rows 0..63 / 64..127 of the tile; per stage four
//    wgmma.mma_async m64n128k16 (A and B from shared memory, fp32 accumulators), one wait_group(1)
//    behind, releasing the previous stage on its empty barrier; then the epilogue straight from the
//    accumulators (same fragment layout per warp as mma.sync m16n8, so the sm80 epilogues carry over).
// Exact dequantization as the sm80 kernel: nibble at bf16 bits [15],[8:6] = e2m1 * 2^-126, times a
// shared LUT bf16x2(scale * 2^117) -> e2m1 * scale * 2^-9 exactly; the epilogue multiplies 2^9 * tensor scales.
#include <cuda_bf16.h>

#include <cstring>

#include "common/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm90a.h"
#include "kernels/cuda/nvfp4_device.cuh"
#include "kernels/cuda/sm90a_async.cuh"
#include "kernels/cuda/sm90a_wgmma.cuh"

namespace fp4moe {
namespace {

using sm80::bf16x2_mul;
using sm80::nibble_pair;
using sm80::nvfp4_qdq_h_quad_blocks;
using sm80::scale_lut_entry;
using namespace sm90a;  // NOLINT(google-build-using-namespace): the PTX wrappers of this kernel family

// cp.async with shared-space addresses (the sm80 wrappers take generic pointers).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Tile configuration as data. Registers: 512 threads at one CTA per SM start at 128 each; the
// producers give some back so the consumers may grow (256 * producer + 256 * consumer <= 16 warps *
// 32 * 128). Two producer warpgroups, because one (64 k of a row per thread) was measured 5 % slower
// end to end on the H200; what bounds the kernel now is discussed in
// docs/perf/2026-11-30-h200-sm90-prefill.md (A re-reads per N tile, shared-memory bandwidth at BN = 128).
struct Sm90Config {
  int bm, bn, bk;           // tile: 2 consumer warpgroups x 64 rows, 128 columns, 64-wide K blocks
  int stages;               // A+B stages (TMA / dequantized BF16) between producers and consumers
  int raw_stages;           // per-thread cp.async ring of packed FP4 + scales (latency hiding)
  int producer_regs, consumer_regs;
};
constexpr Sm90Config kCfg{kSm90TileM, kSm90TileN, kSm90TileK, 5, 8, 56, 200};
constexpr int kProducers = 256;  // thread (row = p % 128, half = p / 128) dequantizes 32 k of one W row
constexpr int kThreads = kProducers + 256;
constexpr int kABytes = kCfg.bm * kCfg.bk * 2;
constexpr int kBBytes = kCfg.bn * kCfg.bk * 2;
constexpr int kRawPacked = kCfg.bn * kCfg.bk / 2;
constexpr int kRawScales = kCfg.bn * kCfg.bk / 16;
constexpr int kRawBytes = kRawPacked + 2 * kRawScales;  // both halves of a row copy its 4 scale codes
static_assert(kCfg.bk * 2 == 128, "one K block must be exactly one 128-byte swizzle row of BF16");
static_assert(kCfg.bm == 128 && kCfg.bn == 128, "two m64 consumer warpgroups x wgmma n128 (the repacked weight block is 128 rows)");
static_assert(kCfg.bk % 16 == 0 && kCfg.bk / 16 == 4, "four k16 wgmma steps and four NVFP4 blocks per K block");
static_assert(kCfg.producer_regs % 8 == 0 && kCfg.consumer_regs % 8 == 0 && kCfg.producer_regs >= 24 &&
                  kCfg.consumer_regs <= 256,
              "setmaxnreg takes multiples of 8 in [24, 256]");
static_assert(kProducers == 2 * kCfg.bn, "two producer threads per W row (halves of the 64-wide K block)");
static_assert(kProducers * kCfg.producer_regs + 256 * kCfg.consumer_regs <= 65536 && 65536 / kThreads >= 128,
              "register redistribution must fit the launch allocation (128 per thread)");
static_assert(kCfg.stages >= 2 && kCfg.raw_stages >= 2, "pipelines need two stages at least");

constexpr int kOffA = 0;
constexpr int kOffB = kOffA + kCfg.stages * kABytes;
constexpr int kOffRaw = kOffB + kCfg.stages * kBBytes;
constexpr int kOffLut = kOffRaw + kCfg.raw_stages * kRawBytes;
constexpr int kOffBar = kOffLut + 1024;
constexpr int kSmemUsed = kOffBar + 2 * kCfg.stages * 8;
constexpr int kSmemBytes = kSmemUsed + 1024;  // slack to align the base to 1024 (128-byte swizzle atoms)
static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "swizzled stages must stay 1024-byte aligned");
static_assert(kSmemBytes <= 227 * 1024, "shared memory above the sm_90 opt-in limit");

struct Params {
  const uint8_t* w;
  const uint8_t* ws;
  int n_tiles, k_blocks, n;
  const float* scale_first;
  const float* scale_second;
  const float* input_scale;
  const float* out_scale;
  const int32_t* tile_expert;
  const int32_t* tile_row_begin;
  const int32_t* num_tiles;
  const int32_t* expert_offsets;
  void* out;
};

template <GemmEpilogue EPI>
__global__ void __launch_bounds__(kThreads, 1) sm90_grouped_gemm_kernel(const __grid_constant__ CUtensorMap tmap_a, Params p) {
  extern __shared__ uint8_t smem_raw[];
  // Align to 1024 by offsetting the shared array itself (a round trip through an integer would turn
  // every later access into a generic LD/ST instead of LDS/STS).
  uint8_t* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  uint32_t* lut = reinterpret_cast<uint32_t*>(smem + kOffLut);
  const uint32_t base = smem_u32(smem);
  const uint32_t bar_full = base + kOffBar, bar_empty = bar_full + 8 * kCfg.stages;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kCfg.stages; ++s) {
      mbar_init(bar_full + 8 * s, kProducers + 1);  // dequantizing threads + the TMA's expect_tx arrival
      mbar_init(bar_empty + 8 * s, 8);       // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  for (int i = threadIdx.x; i < 256; i += kThreads) lut[i] = scale_lut_entry(i);
  __syncthreads();

  const int total_items = *p.num_tiles * p.n_tiles;
  const int my_items = blockIdx.x < total_items ? (total_items - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int KB = p.k_blocks;

  if (threadIdx.x < kProducers) {
    // ---- producer warpgroups ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kCfg.producer_regs));
    const int row = threadIdx.x % kCfg.bn, half = threadIdx.x / kCfg.bn;  // W row, K half (chunks 4h..4h+3)
    const int my_blocks = my_items * KB;
    const uint32_t raw_base = base + kOffRaw;
    // Two cursors over this CTA's (work item, K block) sequence, advanced incrementally (a run-time
    // division per block costs more than the dequantization): `issue` runs raw_stages - 1 blocks ahead.
    auto item_tile = [&](int it) { return (blockIdx.x + it * gridDim.x) / p.n_tiles; };
    auto item_first_block = [&](int it) -> size_t {
      const int item = blockIdx.x + it * gridDim.x, tile = item / p.n_tiles;
      return (size_t(p.tile_expert[tile]) * p.n_tiles + (item - tile * p.n_tiles)) * KB;
    };
    int issue_it = 0, issue_kb = 0, issued = 0;
    size_t issue_blk = my_items > 0 ? item_first_block(0) : 0;
    auto issue_raw = [&]() {
      if (issue_it < my_items) {
        const size_t blk = issue_blk + issue_kb;
        const uint32_t dst = raw_base + (issued % kCfg.raw_stages) * kRawBytes;
        cp_async16(dst + row * 32 + half * 16, p.w + blk * kRawPacked + row * 32 + half * 16);
        cp_async4(dst + kRawPacked + threadIdx.x * 4, p.ws + blk * kRawScales + row * 4);
        if (++issue_kb == KB) {
          issue_kb = 0;
          if (++issue_it < my_items) issue_blk = item_first_block(issue_it);
        }
      }
      ++issued;
      cp_async_commit();  // empty groups keep the wait_group count uniform
    };
#pragma unroll 1
    for (int b = 0; b < kCfg.raw_stages - 1; ++b) issue_raw();
    int kb = 0, it = 0;
    int row0 = my_items > 0 ? p.tile_row_begin[item_tile(0)] : 0;
#pragma unroll 1
    for (int b = 0; b < my_blocks; ++b) {
      issue_raw();  // refills the slot this thread consumed last iteration
      cp_async_wait<kCfg.raw_stages - 1>();
      const int stage = b % kCfg.stages;
      mbar_wait(bar_empty + 8 * stage, ((b / kCfg.stages) & 1) ^ 1);
      if (threadIdx.x == 0) {
        mbar_arrive_expect_tx(bar_full + 8 * stage, kABytes);
        tma_load_2d(base + kOffA + stage * kABytes, &tmap_a, kb * kCfg.bk, row0, bar_full + 8 * stage);
      }
      if (++kb == KB) {
        kb = 0;
        if (++it < my_items) row0 = p.tile_row_begin[item_tile(it)];
      }
      const uint8_t* raw = smem + kOffRaw + (b % kCfg.raw_stages) * kRawBytes;
      const uint4 w = *reinterpret_cast<const uint4*>(raw + row * 32 + half * 16);
      const uint32_t codes = *reinterpret_cast<const uint32_t*>(raw + kRawPacked + threadIdx.x * 4) >> (16 * half);
      const uint32_t words[4] = {w.x, w.y, w.z, w.w};
      uint8_t* brow = smem + kOffB + stage * kBBytes + row * 128;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = 4 * half + i;  // 16-byte chunk (8 k values) of the row
        const uint32_t scale = lut[(codes >> (8 * (i / 2))) & 0xFFu];
        uint4 v;
        v.x = bf16x2_mul(nibble_pair<0>(words[i]), scale);
        v.y = bf16x2_mul(nibble_pair<1>(words[i]), scale);
        v.z = bf16x2_mul(nibble_pair<2>(words[i]), scale);
        v.w = bf16x2_mul(nibble_pair<3>(words[i]), scale);
        *reinterpret_cast<uint4*>(brow + ((c ^ (row & 7)) << 4)) = v;  // the TMA's 128-byte swizzle
      }
      fence_proxy_async();  // make the generic-proxy stores visible to wgmma (async proxy)
      mbar_arrive(bar_full + 8 * stage);
    }
    cp_async_wait<0>();
    return;
  }

  // ---- consumer warpgroups ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kCfg.consumer_regs));
  const int cw = (threadIdx.x - kProducers) / 128;  // 0: tile rows 0..63, 1: rows 64..127
  const int wq = (threadIdx.x / 32) % 4;     // warp within the warpgroup: 16 rows each
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  int b = 0;
#pragma unroll 1
  for (int it = 0; it < my_items; ++it) {
    const int item = blockIdx.x + it * gridDim.x;
    const int tile = item / p.n_tiles, nt = item - tile * p.n_tiles;
    const int expert = p.tile_expert[tile];
    const int row0 = p.tile_row_begin[tile];
    const int rows = min(kCfg.bm, p.expert_offsets[expert + 1] - row0);
    const bool active = cw * 64 < rows;  // an all-masked half skips its MMAs (it still paces the barriers)
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    fence_regs(acc);
#pragma unroll 1
    for (int kb = 0; kb < KB; ++kb, ++b) {
      const int stage = b % kCfg.stages;
      mbar_wait(bar_full + 8 * stage, (b / kCfg.stages) & 1);
      if (active) {
        const uint32_t a_addr = base + kOffA + stage * kABytes + cw * 64 * 128;
        const uint32_t b_addr = base + kOffB + stage * kBBytes;
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kCfg.bk / 16; ++ks) wgmma_ss<128>(acc, smem_desc(a_addr + ks * 32), smem_desc(b_addr + ks * 32));
        wgmma_commit();
      }
      wgmma_wait<1>();  // the previous stage's MMAs are done: release it
      if (kb > 0) {
        __syncwarp();
        if (lane == 0) mbar_arrive(bar_empty + 8 * ((b - 1) % kCfg.stages));
      }
    }
    wgmma_wait<0>();
    fence_regs(acc);
    __syncwarp();
    if (lane == 0) mbar_arrive(bar_empty + 8 * ((b - 1) % kCfg.stages));

    // Epilogue. acc[4j + q]: row cw*64 + wq*16 + g + 8*(q/2), column 8j + 2t + q%2 of the tile.
    const int r_base = cw * 64 + wq * 16 + g;
    const int n0 = nt * kCfg.bn;
    const float in_scale = p.input_scale ? p.input_scale[expert] : 1.0f;
    if constexpr (EPI == GemmEpilogue::kScaleFp32) {
      const float f = __fmul_rn(__fmul_rn(p.scale_first[expert], 512.0f), in_scale);
      float* out = static_cast<float*>(p.out);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = r_base + 8 * half;
        if (r >= rows) continue;
#pragma unroll
        for (int j = 0; j < 16; ++j)
          *reinterpret_cast<float2*>(out + size_t(row0 + r) * p.n + n0 + 8 * j + 2 * t) =
              make_float2(__fmul_rn(acc[4 * j + 2 * half], f), __fmul_rn(acc[4 * j + 2 * half + 1], f));
      }
    } else {
      const float fg = __fmul_rn(__fmul_rn(p.scale_first[expert], 512.0f), in_scale);
      const float fu = __fmul_rn(__fmul_rn(p.scale_second[expert], 512.0f), in_scale);
      const int inter = p.n / 2;
      __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out);
      float h[8][4];  // h column 8q + 2t + i%2 of the tile's 64, row half i/2 (tiles 2q gate, 2q+1 up)
#pragma unroll
      for (int q = 0; q < 8; ++q)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          h[q][i] = swiglu_fp32(__fmul_rn(acc[8 * q + i], fg), __fmul_rn(acc[8 * q + 4 + i], fu));
      if constexpr (EPI == GemmEpilogue::kSwigluNvfp4) nvfp4_qdq_h_quad_blocks(h, p.out_scale[expert]);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = r_base + 8 * half;
        if (r >= rows) continue;
#pragma unroll
        for (int q = 0; q < 8; ++q)
          *reinterpret_cast<__nv_bfloat162*>(out + size_t(row0 + r) * inter + n0 / 2 + 8 * q + 2 * t) =
              __floats2bfloat162_rn(h[q][2 * half], h[q][2 * half + 1]);
      }
    }
  }
}

template <GemmEpilogue EPI>
void launch_epi(const CUtensorMap& map, const Params& p, int grid, cudaStream_t stream) {
  sm90_grouped_gemm_kernel<EPI><<<grid, kThreads, kSmemBytes, stream>>>(map, p);
  FP4MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void repack_nvfp4_for_sm90(const Nvfp4View& m, std::span<const int64_t> source_rows, uint8_t* packed_out,
                           uint8_t* scales_out) {
  const int64_t N = m.rows, K = m.cols;
  FP4MOE_CHECK(N % kSm90TileN == 0, "repack_nvfp4_for_sm90: N (", N, ") must be a multiple of ", kSm90TileN);
  FP4MOE_CHECK(K % kSm90TileK == 0, "repack_nvfp4_for_sm90: K (", K, ") must be a multiple of ", kSm90TileK);
  FP4MOE_CHECK(source_rows.empty() || static_cast<int64_t>(source_rows.size()) == N,
               "repack_nvfp4_for_sm90: row order has ", source_rows.size(), " entries for ", N, " rows");
  const int64_t k_blocks = K / kSm90TileK;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t src = source_rows.empty() ? r : source_rows[r];
    FP4MOE_CHECK(src >= 0 && src < N, "repack_nvfp4_for_sm90: source row ", src, " out of [0, ", N, ")");
    const uint8_t* row = m.packed + src * K / 2;
    const uint8_t* srow = m.scales + src * K / 16;
    auto code = [row](int64_t k) -> uint32_t { return (k & 1) ? (row[k / 2] >> 4) : (row[k / 2] & 0xF); };
    const int64_t nt = r / kSm90TileN, n = r % kSm90TileN;
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      const int64_t blk = nt * k_blocks + kb;
      for (int c = 0; c < 8; ++c) {
        const int64_t k0 = kb * kSm90TileK + 8 * c;
        uint32_t word = 0;
        for (int i = 0; i < 4; ++i) word |= code(k0 + 2 * i) << (4 * i) | code(k0 + 2 * i + 1) << (4 * i + 16);
        std::memcpy(packed_out + blk * kRawPacked + n * 32 + 4 * c, &word, 4);  // little-endian word
      }
      std::memcpy(scales_out + blk * kRawScales + n * 4, srow + kb * 4, 4);
    }
  }
}

size_t sm90_grouped_gemm_smem_bytes() { return kSmemBytes; }

void configure_sm90_grouped_gemm_kernels() {
  encode_tiled_fn();
  FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(sm90_grouped_gemm_kernel<GemmEpilogue::kSwiglu>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(sm90_grouped_gemm_kernel<GemmEpilogue::kSwigluNvfp4>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(sm90_grouped_gemm_kernel<GemmEpilogue::kScaleFp32>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
}

void launch_grouped_gemm_nvfp4w_bf16_sm90a(const Sm90GemmArgs& args, GemmEpilogue epilogue, cudaStream_t stream) {
  FP4MOE_CHECK(args.n > 0 && args.n % kSm90TileN == 0, "sm90 grouped GEMM: N (", args.n, ") must be a positive multiple of ", kSm90TileN);
  FP4MOE_CHECK(args.k > 0 && args.k % kSm90TileK == 0, "sm90 grouped GEMM: K (", args.k, ") must be a positive multiple of ", kSm90TileK);
  FP4MOE_CHECK(args.a && args.w_packed && args.w_scales && args.scale_first && args.out,
               "sm90 grouped GEMM: null operand pointer");
  FP4MOE_CHECK(!args.a_slots, "sm90 grouped GEMM: A must be the sorted rows (a TMA box per token tile); a_slots is not supported");
  FP4MOE_CHECK(reinterpret_cast<uintptr_t>(args.a) % 16 == 0, "sm90 grouped GEMM: A must be 16-byte aligned (TMA)");
  FP4MOE_CHECK(epilogue == GemmEpilogue::kScaleFp32 || args.scale_second,
               "sm90 grouped GEMM: the SwiGLU epilogues need scale_second (up_scale2)");
  FP4MOE_CHECK(epilogue != GemmEpilogue::kSwigluNvfp4 || args.out_scale,
               "sm90 grouped GEMM: the NVFP4 SwiGLU epilogue needs out_scale (w2_input_scale)");
  FP4MOE_CHECK(args.num_sms > 0, "sm90 grouped GEMM: num_sms must be positive");
  if (args.max_tiles <= 0 || args.rows <= 0) return;
  const int64_t n_tiles = args.n / kSm90TileN;
  FP4MOE_CHECK(args.max_tiles * n_tiles < (int64_t{1} << 31), "sm90 grouped GEMM: too many work items");
  const CUtensorMap map = make_bf16_rows_map(args.a, args.rows, args.k, kCfg.bm);
  Params p{args.w_packed, args.w_scales, static_cast<int>(n_tiles), static_cast<int>(args.k / kSm90TileK),
           static_cast<int>(args.n), args.scale_first, args.scale_second, args.input_scale, args.out_scale,
           args.route.tile_expert, args.route.tile_row_begin, args.route.num_tiles, args.route.expert_offsets,
           args.out};
  const int grid = static_cast<int>(std::min<int64_t>(args.num_sms, args.max_tiles * n_tiles));
  switch (epilogue) {
    case GemmEpilogue::kSwiglu: return launch_epi<GemmEpilogue::kSwiglu>(map, p, grid, stream);
    case GemmEpilogue::kSwigluNvfp4: return launch_epi<GemmEpilogue::kSwigluNvfp4>(map, p, grid, stream);
    case GemmEpilogue::kScaleFp32: return launch_epi<GemmEpilogue::kScaleFp32>(map, p, grid, stream);
  }
  fail("sm90 grouped GEMM: unknown epilogue");
}

}  // namespace fp4moe
