// cuda.sm90.prefill.v1 and its two sm_90a grouped GEMMs (TMA + wgmma; weights dequantized to shared
// memory, or into wgmma registers at token tiles 64/128/256). GEMM level, each kernel and tile:
// uneven experts (empty, 1 row, 64, 130, 257 rows, partial tiles of every 32-token width) against a
// host fp64 reference of the dequantized weights, fp32 output and SwiGLU epilogues, K blocks not a
// multiple of the stage count, an odd N tile count, a small persistent grid (many items per CTA:
// barrier phases across tiles) and the full grid bit-identical; host only: the register-weight
// layout element by element, the per-call tile choice and rejected tiles/epilogues; GEMM1 reading the
// hidden rows through the sorted slots bit-identical to reading gathered rows. Backend level:
// only what the parameterized suite (test_moe_backend_suite.cpp, which runs this backend too: model
// sweeps, adversarial routing, graph replay, bit identity, E4M3 extremes) lacks: the qwen3-235b-a22b
// shape at 1..4096 tokens W4A16 and W4A4 and all its tokens on one expert, against moe_reference,
// the supports() rules and the measurement knobs. GPU tests skip with the reason unless the GPU is SM 9.0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/registry.h"
#include "common/rng.h"
#include "format/fp_codes.h"
#include "format/synthetic.h"
#include "backend_runner.h"
#include "gpu_test_util.h"
#include "io/presets.h"
#include "kernels/cpu/moe_reference.h"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm90a.h"
#include "kernels/cuda/nvfp4_decode_layout.h"
#include "kernels/cuda/moe_route_permute.h"
#include "kernels/cuda/nvfp4_mma_layout.h"

namespace fp4moe {
namespace {

using test::check_case;
using test::Runner;
using test::with_mode;

constexpr const char* kBackendId = "cuda.sm90.prefill.v1";

const DeviceInfo* sm90_device(std::string& why) {
  const DeviceInfo* d = test::sm80_device(why);
  if (!d) return nullptr;
  if (d->sm() != 90) {
    why = "needs an SM 9.0 GPU (sm_90a code); device is SM" + std::to_string(d->sm());
    return nullptr;
  }
  return d;
}

#define REQUIRE_SM90(device_var)                                      \
  std::string why_;                                                   \
  const ::fp4moe::DeviceInfo* device_var = sm90_device(why_);         \
  if (!device_var) GTEST_SKIP() << why_;                              \
  FP4MOE_CUDA_CHECK(cudaSetDevice(device_var->ordinal))

// ---------------------------------------------------------------- GEMM level

// Random NVFP4 matrix [n, k]: all 16 codes, block scales mixing subnormal (1..7) and normal codes.
Nvfp4Matrix random_nvfp4(int64_t n, int64_t k, Rng& rng) {
  Nvfp4Matrix m;
  m.rows = n, m.cols = k, m.tensor_scale = 1.0f;
  m.packed.resize(static_cast<size_t>(n * k / 2));
  m.scales.resize(static_cast<size_t>(n * k / 16));
  for (uint8_t& b : m.packed) b = static_cast<uint8_t>(rng.below(256));
  for (uint8_t& s : m.scales) s = static_cast<uint8_t>(rng.below(4) == 0 ? 1 + rng.below(7) : 0x30 + rng.below(24));
  return m;
}
double nvfp4_value(const Nvfp4Matrix& m, int64_t r, int64_t c) {
  const uint8_t byte = m.packed[static_cast<size_t>((r * m.cols + c) / 2)];
  const uint8_t code = (c & 1) ? byte >> 4 : byte & 0xF;
  return double(e2m1_decode(code)) * double(e4m3_decode(m.scales[static_cast<size_t>((r * m.cols + c) / 16)]));
}

struct GemmFixture {
  int64_t E = 0, T = 0, K = 0;
  std::vector<int32_t> offsets;  // [E + 1] from the device
  std::vector<float> a;          // [T, K] bf16-exact
  DeviceBuffer a_dev, route_ws;
  MoeRouteBuffers route;

  // counts[e] rows per expert; tokens come in shuffled order so the align kernel really sorts.
  MTile m_tile{kSm90TileM, 0};
  GemmFixture(const std::vector<int>& counts, int64_t k, uint64_t seed, MTile tile)
      : E(int64_t(counts.size())), K(k), m_tile(tile) {
    std::vector<int32_t> ids;
    for (int64_t e = 0; e < E; ++e) ids.insert(ids.end(), counts[e], static_cast<int32_t>(e));
    T = static_cast<int64_t>(ids.size());
    Rng rng(seed);
    for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.below(i)]);
    route_ws = DeviceBuffer(moe_route_workspace_bytes(T, 1, int(E), m_tile.rows));
    route = carve_moe_route_workspace(route_ws.get(), T, 1, int(E), m_tile.rows);
    FP4MOE_CUDA_CHECK(cudaMemcpy(route.topk_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
    launch_moe_align(route, T, 1, int(E), m_tile, nullptr);
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    offsets.resize(static_cast<size_t>(E + 1));
    FP4MOE_CUDA_CHECK(cudaMemcpy(offsets.data(), route.expert_offsets, offsets.size() * 4, cudaMemcpyDeviceToHost));
    for (int64_t e = 0; e < E; ++e) EXPECT_EQ(offsets[e + 1] - offsets[e], counts[e]) << "align counts, expert " << e;
    a = synthetic_activations(T, K, seed + 1);
    for (float& v : a) v = round_to_bf16(v);
    a_dev = DeviceBuffer::from_host(test::to_bf16_bits(a));
  }
  int64_t expert_of(int64_t row) const {
    return std::upper_bound(offsets.begin(), offsets.end(), static_cast<int32_t>(row)) - offsets.begin() - 1;
  }
  Sm90GemmArgs args(const DeviceBuffer& packed, const DeviceBuffer& scales, int64_t n, int num_sms) const {
    Sm90GemmArgs g;
    g.a = a_dev.get();
    g.rows = T;
    g.w_packed = packed.as<uint8_t>();
    g.w_scales = scales.as<uint8_t>();
    g.n = n;
    g.k = K;
    g.route = route;
    g.max_tiles = moe_max_tiles(T, 1, int(E), m_tile.rows);
    g.num_sms = num_sms;
    return g;
  }
  // sum_k a[row, k] * W[n, k] in double (and the sum of |terms| for the rounding bound).
  std::pair<double, double> dot(int64_t row, const Nvfp4Matrix& w, int64_t n) const {
    double s = 0.0, abs_sum = 0.0;
    for (int64_t k = 0; k < K; ++k) {
      const double term = double(a[static_cast<size_t>(row * K + k)]) * nvfp4_value(w, n, k);
      s += term;
      abs_sum += std::fabs(term);
    }
    return {s, abs_sum};
  }
};

// The two grouped GEMMs: the smem kernel (tile 128) and the register-weight kernel per token tile.
struct GemmVariant {
  const char* name;
  int tile;  // M tile of launch_moe_align (token rows)
  bool regw;
  MTile m_tile() const { return regw ? sm90_regw_m_tile(tile) : MTile{tile, 0}; }
};
const GemmVariant kSmemKernel{"smem", kSm90TileM, false};
void configure(const GemmVariant& v) {
  if (v.regw)
    configure_sm90_regw_kernels();
  else
    configure_sm90_grouped_gemm_kernels();
}
void launch(const GemmVariant& v, const Sm90GemmArgs& g, GemmEpilogue epi) {
  if (v.regw)
    launch_grouped_gemm_nvfp4w_bf16_sm90a_regw(g, v.m_tile(), epi, nullptr);
  else
    launch_grouped_gemm_nvfp4w_bf16_sm90a(g, epi, nullptr);
}

// Repacks every expert's matrix (optionally with a row order) for the variant and uploads packed + scales.
std::pair<DeviceBuffer, DeviceBuffer> upload_repacked(const GemmVariant& v, const std::vector<Nvfp4Matrix>& ws,
                                                      std::span<const int64_t> order) {
  const size_t pb = ws[0].packed.size(), sb = ws[0].scales.size();
  std::vector<uint8_t> packed(pb * ws.size()), scales(sb * ws.size());
  for (size_t e = 0; e < ws.size(); ++e)
    (v.regw ? repack_nvfp4_for_sm90_regw : repack_nvfp4_for_sm90)(ws[e].view(), order, packed.data() + e * pb,
                                                                  scales.data() + e * sb);
  return {DeviceBuffer::from_host(packed), DeviceBuffer::from_host(scales)};
}

// Rows per expert: empty experts, experts spanning several tiles, and, for every compiled token tile,
// partial tiles of every 32-token column count the register-weight kernel compiles (tile 256: 1, 64,
// 90, 128, 130, 180, 200, 250 rows -> 32 .. 256 columns, and with its 64-row tail 257 and 300 -> one
// item of 288 and 320 columns, 320 (the longest tail), 321 -> 256 + 65 (two tiles), 576 -> 256 + 320;
// tile 128: 1, 64, 90, 128; tile 64: 1, 64).
const std::vector<int> kUnevenCounts = {0, 1, 130, 64, 257, 7, 128, 0, 90, 180, 200, 250, 300, 320, 321, 576};

void scaled_fp32_output_on_uneven_experts(const GemmVariant& v, const DeviceInfo* device) {
  configure(v);
  const int64_t K = 320, N = 384;  // 5 K blocks (not a multiple of the stage count), 3 N tiles (odd: the
                                   // regw 256-row units end with half a unit)
  GemmFixture fx(kUnevenCounts, K, 11, v.m_tile());
  Rng rng(12);
  std::vector<Nvfp4Matrix> w;
  std::vector<float> scale(static_cast<size_t>(fx.E));
  for (int64_t e = 0; e < fx.E; ++e) {
    w.push_back(random_nvfp4(N, K, rng));
    scale[static_cast<size_t>(e)] = 0.01f * static_cast<float>(1 + e);
  }
  auto [packed, scales] = upload_repacked(v, w, {});
  DeviceBuffer scale_dev = DeviceBuffer::from_host(scale);
  std::vector<std::vector<float>> outs;
  for (int sms : {3, device->multiprocessors}) {  // 3 CTAs: many work items per CTA
    DeviceBuffer out(static_cast<size_t>(fx.T * N * 4));
    FP4MOE_CUDA_CHECK(cudaMemset(out.get(), 0xFF, out.bytes()));  // NaN poison
    Sm90GemmArgs g = fx.args(packed, scales, N, sms);
    g.scale_first = scale_dev.as<float>();
    g.out = out.get();
    launch(v, g, GemmEpilogue::kScaleFp32);
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    outs.push_back(out.to_host<float>());
  }
  EXPECT_TRUE(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * 4) == 0)
      << "the grid size changed the results (each tile's arithmetic must not depend on the CTA)";
  int64_t bad = 0;
  double max_rel = 0.0;
  for (int64_t r = 0; r < fx.T; ++r) {
    const int64_t e = fx.expert_of(r);
    for (int64_t n = 0; n < N; ++n) {
      const auto [dot, abs_sum] = fx.dot(r, w[static_cast<size_t>(e)], n);
      const double ref = double(scale[static_cast<size_t>(e)]) * dot;
      const double bound = 4e-5 * double(scale[static_cast<size_t>(e)]) * abs_sum + 1e-30;
      const double got = outs[0][static_cast<size_t>(r * N + n)];
      max_rel = std::max(max_rel, std::fabs(got - ref) / (double(scale[static_cast<size_t>(e)]) * abs_sum + 1e-30));
      if (!(std::fabs(got - ref) <= bound)) {
        if (bad < 5) ADD_FAILURE() << "row " << r << " (expert " << e << ") col " << n << ": got " << got << " want " << ref;
        ++bad;
      }
    }
  }
  EXPECT_EQ(bad, 0) << bad << " of " << fx.T * N << " outputs off";
  std::printf("[ result ] sm90 GEMM fp32 (%s %d): T=%lld max |err| / sum|terms| = %.3e\n", v.name, v.tile,
              static_cast<long long>(fx.T), max_rel);
}

void swiglu_epilogue_on_uneven_experts(const GemmVariant& v) {
  configure(v);
  const int64_t K = 256, I = 128;  // GEMM1: N = 2I, gate/up interleaved by 8 rows
  GemmFixture fx(kUnevenCounts, K, 21, v.m_tile());
  Rng rng(22);
  std::vector<Nvfp4Matrix> w13;
  std::vector<float> fg(static_cast<size_t>(fx.E)), fu(static_cast<size_t>(fx.E));
  for (int64_t e = 0; e < fx.E; ++e) {
    w13.push_back(random_nvfp4(2 * I, K, rng));
    fg[static_cast<size_t>(e)] = 0.002f * static_cast<float>(1 + e);
    fu[static_cast<size_t>(e)] = 0.003f * static_cast<float>(2 + e);
  }
  const std::vector<int64_t> order = gate_up_interleaved_rows(I);
  auto [packed, scales] = upload_repacked(v, w13, order);
  DeviceBuffer fg_dev = DeviceBuffer::from_host(fg), fu_dev = DeviceBuffer::from_host(fu);
  DeviceBuffer out(static_cast<size_t>(fx.T * I * 2));
  std::vector<uint16_t> poison(static_cast<size_t>(fx.T * I), kBf16Poison);
  FP4MOE_CUDA_CHECK(cudaMemcpy(out.get(), poison.data(), out.bytes(), cudaMemcpyHostToDevice));
  Sm90GemmArgs g = fx.args(packed, scales, 2 * I, 5);
  g.scale_first = fg_dev.as<float>();
  g.scale_second = fu_dev.as<float>();
  g.out = out.get();
  launch(v, g, GemmEpilogue::kSwiglu);
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> h = out.to_host<uint16_t>();
  test::expect_all_written_and_finite(h, "sm90 SwiGLU");
  int64_t bad = 0;
  for (int64_t r = 0; r < fx.T; ++r) {
    const size_t e = static_cast<size_t>(fx.expert_of(r));
    for (int64_t c = 0; c < I; ++c) {
      const auto [gd, gabs] = fx.dot(r, w13[e], c);
      const auto [ud, uabs] = fx.dot(r, w13[e], I + c);
      const double gate = fg[e] * gd, up = fu[e] * ud;
      const double ref = gate / (1.0 + std::exp(-gate)) * up;
      // bf16 rounding (2^-8 relative, generous) + fp32 accumulation propagated through silu(g) * u.
      const double bound = std::fabs(ref) * 0x1p-8 + 1e-4 * (fg[e] * gabs * std::fabs(up) + fu[e] * uabs * std::fabs(gate)) + 1e-30;
      const double got = bf16_to_float(h[static_cast<size_t>(r * I + c)]);
      if (!(std::fabs(got - ref) <= bound)) {
        if (bad < 5) ADD_FAILURE() << "row " << r << " (expert " << e << ") h col " << c << ": got " << got << " want " << ref;
        ++bad;
      }
    }
  }
  EXPECT_EQ(bad, 0) << bad << " of " << fx.T * I << " h values off";
}

TEST(CudaSm90PrefillGemm, ScaledFp32OutputOnUnevenExperts) {
  REQUIRE_SM90(device);
  scaled_fp32_output_on_uneven_experts(kSmemKernel, device);
}
TEST(CudaSm90PrefillGemm, SwigluEpilogueOnUnevenExperts) {
  REQUIRE_SM90(device);
  swiglu_epilogue_on_uneven_experts(kSmemKernel);
}
// The register-weight kernel at every compiled token tile (64: the 130- and 257-row experts span
// several tiles; 256: most experts fit one tile, with masked tokens).
TEST(CudaSm90PrefillGemm, RegwScaledFp32OutputOnUnevenExperts) {
  REQUIRE_SM90(device);
  for (const int tile : kSm90RegwTileTokens) scaled_fp32_output_on_uneven_experts(GemmVariant{"regw", tile, true}, device);
}
TEST(CudaSm90PrefillGemm, RegwSwigluEpilogueOnUnevenExperts) {
  REQUIRE_SM90(device);
  for (const int tile : kSm90RegwTileTokens) swiglu_epilogue_on_uneven_experts(GemmVariant{"regw", tile, true});
}
// Host only: every FP4 code and E4M3 scale of a random matrix is found where the register-weight
// kernel reads it (the header's formula: lane (g, t), word s, nibble pair p = rows g + 8 (p & 1),
// k 16s + 8 (p >> 1) + 2t + {0, 1} of its 16-row group), with a non-trivial row order.
TEST(CudaSm90PrefillGemm, RegwRepackLayoutMatchesTheFragmentFormula) {
  Rng rng(41);
  const int64_t N = 256, K = 192;
  const Nvfp4Matrix m = random_nvfp4(N, K, rng);
  std::vector<int64_t> order(static_cast<size_t>(N));
  for (int64_t r = 0; r < N; ++r) order[static_cast<size_t>(r)] = (r * 37 + 11) % N;  // a permutation (37 odd, N = 2^8)
  std::vector<uint8_t> packed(m.packed.size()), scales(m.scales.size());
  repack_nvfp4_for_sm90_regw(m.view(), order, packed.data(), scales.data());
  const int64_t kb_count = K / 64;
  int64_t bad = 0;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t src = order[static_cast<size_t>(r)], nt = r / 128, n = r % 128, grp = n / 16, i = n % 16;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t kb = k / 64, kk = k % 64, s = kk / 16, half = (kk % 16) / 8, t = (kk % 8) / 2, odd = kk % 2;
      const int64_t lane = (i % 8) * 4 + t, pair = (i / 8) + 2 * half;
      const uint8_t* blk = packed.data() + (nt * kb_count + kb) * 4096;
      uint32_t word = 0;
      std::memcpy(&word, blk + ((grp * 32 + lane) * 4 + s) * 4, 4);
      // The kernel's decode: register `pair` of the fragment, half `odd`, is the bf16 pattern of
      // e2m1 * 2^-126 (magnitude bits 8:6, sign bit 15) of the checkpoint's code.
      uint32_t out[4];
      decode_word(word, out);
      const uint32_t half_bits = (out[pair] >> (16 * odd)) & 0xFFFFu;
      const uint8_t byte = m.packed[static_cast<size_t>((src * K + k) / 2)];
      const uint32_t want = (k & 1) ? byte >> 4 : byte & 0xFu;
      const uint32_t want_bits = ((want & 7u) << 6) | ((want & 8u) << 12);
      if (half_bits != want_bits && bad++ < 5)
        ADD_FAILURE() << "row " << r << " k " << k << ": decoded bits " << half_bits << " want " << want_bits << " (code " << want << ")";
      const uint8_t sc = scales[static_cast<size_t>((nt * kb_count + kb) * 512 + n * 4 + s)];
      if (k % 16 == 0 && sc != m.scales[static_cast<size_t>((src * K + k) / 16)] && bad++ < 5)
        ADD_FAILURE() << "row " << r << " k " << k << ": scale code " << int(sc);
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_THROW(repack_nvfp4_for_sm90_regw(random_nvfp4(64, 64, rng).view(), {}, packed.data(), scales.data()), Error);
}

// Host only: the token tile per call for the measured shapes (each pick was the fastest of the
// forced tiles measured on the H200 with partial tiles trimmed to 32 tokens,
// docs/perf/2026-11-30-h200-sm90-prefill-r3.md) and the choice
// is always a compiled tile.
TEST(CudaSm90PrefillGemm, RegwTileChoiceForMeasuredShapes) {
  EXPECT_EQ(sm90_regw_choose_tile_tokens(1024, 8, 128), 128);    // qwen3-235b: 64 rows / expert
  EXPECT_EQ(sm90_regw_choose_tile_tokens(4096, 8, 128), 256);    // 256
  EXPECT_EQ(sm90_regw_choose_tile_tokens(16384, 8, 128), 256);   // 1024
  EXPECT_EQ(sm90_regw_choose_tile_tokens(1024, 10, 512), 64);    // qwen3.5-397b: 20
  EXPECT_EQ(sm90_regw_choose_tile_tokens(4096, 10, 512), 128);   // 80
  EXPECT_EQ(sm90_regw_choose_tile_tokens(16384, 10, 512), 256);  // 320 (256 + a partial tile of ~64)
  // GEMM1 through the slots where measured faster (tiles 64 and 128), gathered rows at 256.
  EXPECT_TRUE(sm90_regw_gemm1_reads_slots(64));
  EXPECT_TRUE(sm90_regw_gemm1_reads_slots(128));
  EXPECT_FALSE(sm90_regw_gemm1_reads_slots(256));
  EXPECT_THROW(sm90_regw_gemm1_reads_slots(96), Error);
  // Only tile 256 takes a tail (its accumulators leave room for 32 more registers per thread).
  EXPECT_EQ(sm90_regw_m_tile(64).tail_rows, 0);
  EXPECT_EQ(sm90_regw_m_tile(128).tail_rows, 0);
  EXPECT_EQ(sm90_regw_m_tile(256).rows, 256);
  EXPECT_EQ(sm90_regw_m_tile(256).tail_rows, 64);
  EXPECT_THROW(sm90_regw_m_tile(96), Error);
  for (int64_t t : {0, 1, 7, 300, 100000}) {
    const int tile = sm90_regw_choose_tile_tokens(t, 8, 128);
    EXPECT_TRUE(std::find(std::begin(kSm90RegwTileTokens), std::end(kSm90RegwTileTokens), tile) != std::end(kSm90RegwTileTokens))
        << t << " tokens -> " << tile;
  }
}

TEST(CudaSm90PrefillGemm, RegwRejectsUnknownTileAndW4A4Epilogue) {
  REQUIRE_SM90(device);
  configure_sm90_regw_kernels();
  GemmFixture fx({3, 5}, 64, 31, sm90_regw_m_tile(64));
  Rng rng(32);
  std::vector<Nvfp4Matrix> w = {random_nvfp4(128, 64, rng), random_nvfp4(128, 64, rng)};
  auto [packed, scales] = upload_repacked(GemmVariant{"regw", 64, true}, w, {});
  DeviceBuffer out(static_cast<size_t>(fx.T * 128 * 4)), scale = DeviceBuffer::from_host(std::vector<float>{1.0f, 1.0f});
  Sm90GemmArgs g = fx.args(packed, scales, 128, device->multiprocessors);
  g.scale_first = g.scale_second = g.out_scale = scale.as<float>();
  g.out = out.get();
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16_sm90a_regw(g, MTile{96, 0}, GemmEpilogue::kScaleFp32, nullptr), Error);
  // M tiles aligned with another tail than the kernel's would lose rows or compute some twice.
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16_sm90a_regw(g, MTile{64, 64}, GemmEpilogue::kScaleFp32, nullptr), Error);
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16_sm90a_regw(g, MTile{256, 0}, GemmEpilogue::kScaleFp32, nullptr), Error);
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16_sm90a_regw(g, sm90_regw_m_tile(64), GemmEpilogue::kSwigluNvfp4, nullptr), Error);
  // One 128-row N tile = one unit per token tile: no pair of units to share it in a 2-CTA cluster.
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16_sm90a_regw(g, sm90_regw_m_tile(64), GemmEpilogue::kScaleFp32, nullptr, 2), Error);
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16_sm90a_regw(g, sm90_regw_m_tile(64), GemmEpilogue::kScaleFp32, nullptr, 3), Error);
  // Rows through the slots: GEMM1 (SwiGLU) only, and the rows must be tokens x top_k.
  g.a_slots = fx.route.sorted_slots, g.top_k = 1;
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16_sm90a_regw(g, sm90_regw_m_tile(64), GemmEpilogue::kScaleFp32, nullptr), Error);
  g.top_k = 3;  // 8 rows
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16_sm90a_regw(g, sm90_regw_m_tile(64), GemmEpilogue::kSwiglu, nullptr), Error);
  g.top_k = 0;
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16_sm90a_regw(g, sm90_regw_m_tile(64), GemmEpilogue::kSwiglu, nullptr), Error);
}

// 2-CTA clusters (a multicast token tile, each stage released by both CTAs' consumers) compute every
// item exactly as single CTAs do: same bits at every token tile, on the full grid and on 4 SMs (two
// clusters, many items each: barrier phases across items and the remote arrivals of every stage).
// The last expert's 20 rows end the tensor in a tile of <= T/2 rows at every tile, so rank 1's half
// box lies wholly past the rows (TMA zero fill, its bytes still complete on both CTAs' barriers).
// N = 384 at tiles 64 and 128 (256 weight rows per unit): the second unit holds one N tile, so rank
// 1's second consumer warpgroup only paces the barriers, its remote arrivals included. num_sms = 1:
// auto falls back to single CTAs, a forced cluster is an error.
TEST(CudaSm90PrefillGemm, RegwClustersGiveTheSameBitsAsSingleCtas) {
  REQUIRE_SM90(device);
  configure_sm90_regw_kernels();
  const int64_t K = 320;
  std::vector<int> counts = kUnevenCounts;
  counts.push_back(20);
  Rng rng(41);
  const std::vector<float> scale(counts.size(), 0.5f);
  DeviceBuffer scale_dev = DeviceBuffer::from_host(scale);
  for (const int tile : kSm90RegwTileTokens) {
    GemmFixture fx(counts, K, 42, sm90_regw_m_tile(tile));
    const int64_t unit_rows = tile == 256 ? 128 : 256;  // weight rows per item (RegwConfig::frags x 128)
    for (const int64_t N : {int64_t{384}, int64_t{512}}) {
      if ((N + unit_rows - 1) / unit_rows % 2 != 0) continue;  // odd unit count: no pairs (checked above)
      std::vector<Nvfp4Matrix> w;
      for (size_t e = 0; e < counts.size(); ++e) w.push_back(random_nvfp4(N, K, rng));
      auto [packed, scales] = upload_repacked(GemmVariant{"regw", tile, true}, w, {});
      std::vector<std::vector<float>> outs;
      for (const auto& [sms, cluster] : std::vector<std::pair<int, int>>{
               {device->multiprocessors, 1}, {device->multiprocessors, 2}, {4, 1}, {4, 2}, {1, 0}}) {
        DeviceBuffer out(static_cast<size_t>(fx.T * N * 4));
        FP4MOE_CUDA_CHECK(cudaMemset(out.get(), 0xFF, out.bytes()));  // NaN poison
        Sm90GemmArgs g = fx.args(packed, scales, N, sms);
        g.scale_first = scale_dev.as<float>();
        g.out = out.get();
        launch_grouped_gemm_nvfp4w_bf16_sm90a_regw(g, sm90_regw_m_tile(tile), GemmEpilogue::kScaleFp32, nullptr, cluster);
        FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
        outs.push_back(out.to_host<float>());
        if (sms == 1) {
          EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16_sm90a_regw(g, sm90_regw_m_tile(tile), GemmEpilogue::kScaleFp32, nullptr, 2), Error);
        }
      }
      for (const float v : outs[0])
        ASSERT_TRUE(std::isfinite(v)) << "tile " << tile << " N " << N << ": an output was not written";
      for (size_t i = 1; i < outs.size(); ++i)
        EXPECT_TRUE(std::memcmp(outs[0].data(), outs[i].data(), outs[0].size() * 4) == 0)
            << "tile " << tile << " N " << N << ": run " << i << " (grid, cluster) differs from single CTAs on the full grid";
    }
  }
}

// GEMM1 reading its token rows from the hidden states through the sorted slots (cp.async by the producer
// threads into the swizzled tile, no gather) gives the bits of the same GEMM on the gathered rows, with
// and without 2-CTA clusters there: every token tile, the full grid and 4 SMs (many items per CTA). top_k
// = 2, so sorted row r reads hidden row slot / 2 and the slots of a token may share an expert; partial
// tiles of every 32-token width copy only their rows rounded up to 32. The SwiGLU output is poisoned
// first: every h value must be written. A forced 2-CTA cluster is an error with slots.
TEST(CudaSm90PrefillGemm, RegwGemm1ThroughSlotsGivesTheBitsOfGatheredRows) {
  REQUIRE_SM90(device);
  configure_sm90_regw_kernels();
  const int64_t K = 320, I = 256, top_k = 2;  // N = 2I = 512: 4 N tiles, an even unit count at every tile
  std::vector<int> counts = kUnevenCounts;
  counts.push_back(20);
  counts.push_back(20 + std::accumulate(counts.begin(), counts.end(), 0) % 2);  // an even slot count: tokens x top_k
  Rng rng(51);
  std::vector<Nvfp4Matrix> w13;
  for (size_t e = 0; e < counts.size(); ++e) w13.push_back(random_nvfp4(2 * I, K, rng));
  const std::vector<float> fg(counts.size(), 0.004f), fu(counts.size(), 0.006f);
  DeviceBuffer fg_dev = DeviceBuffer::from_host(fg), fu_dev = DeviceBuffer::from_host(fu);
  const std::vector<int64_t> order = gate_up_interleaved_rows(I);
  for (const int tile : kSm90RegwTileTokens) {
    GemmFixture fx(counts, K, 52, sm90_regw_m_tile(tile));
    ASSERT_EQ(fx.T % top_k, 0);
    const int64_t tokens = fx.T / top_k;
    std::vector<float> hidden = synthetic_activations(tokens, K, 53);
    for (float& v : hidden) v = round_to_bf16(v);
    std::vector<int32_t> sorted(static_cast<size_t>(fx.T));
    FP4MOE_CUDA_CHECK(cudaMemcpy(sorted.data(), fx.route.sorted_slots, sorted.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<float> gathered(static_cast<size_t>(fx.T * K));
    for (int64_t r = 0; r < fx.T; ++r) {
      const int64_t token = sorted[static_cast<size_t>(r)] / top_k;
      ASSERT_TRUE(token >= 0 && token < tokens) << "sorted slot " << sorted[static_cast<size_t>(r)];
      std::copy_n(hidden.begin() + token * K, K, gathered.begin() + r * K);
    }
    DeviceBuffer hidden_dev = DeviceBuffer::from_host(test::to_bf16_bits(hidden));
    DeviceBuffer gathered_dev = DeviceBuffer::from_host(test::to_bf16_bits(gathered));
    auto [packed, scales] = upload_repacked(GemmVariant{"regw", tile, true}, w13, order);
    auto run = [&](bool slots, int sms, int cluster) {
      DeviceBuffer out(static_cast<size_t>(fx.T * I * 2));
      const std::vector<uint16_t> poison(static_cast<size_t>(fx.T * I), kBf16Poison);
      FP4MOE_CUDA_CHECK(cudaMemcpy(out.get(), poison.data(), out.bytes(), cudaMemcpyHostToDevice));
      Sm90GemmArgs g = fx.args(packed, scales, 2 * I, sms);
      g.a = slots ? hidden_dev.get() : gathered_dev.get();
      if (slots) g.a_slots = fx.route.sorted_slots, g.top_k = static_cast<int>(top_k);
      g.scale_first = fg_dev.as<float>();
      g.scale_second = fu_dev.as<float>();
      g.out = out.get();
      launch_grouped_gemm_nvfp4w_bf16_sm90a_regw(g, sm90_regw_m_tile(tile), GemmEpilogue::kSwiglu, nullptr, cluster);
      FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
      return out.to_host<uint16_t>();
    };
    const std::vector<uint16_t> want = run(false, device->multiprocessors, 1);
    test::expect_all_written_and_finite(want, "sm90 regw SwiGLU on gathered rows, tile " + std::to_string(tile));
    EXPECT_TRUE(run(false, device->multiprocessors, 2) == want) << "tile " << tile << ": clusters on gathered rows";
    for (const auto& [sms, cluster] : std::vector<std::pair<int, int>>{{device->multiprocessors, 0}, {4, 1}}) {
      const std::vector<uint16_t> got = run(true, sms, cluster);
      EXPECT_TRUE(got == want) << "tile " << tile << ", " << sms << " SMs, cluster " << cluster
                               << ": rows read through the slots differ from the gathered rows";
    }
    EXPECT_THROW(run(true, device->multiprocessors, 2), Error) << "tile " << tile;
  }
}

// ---------------------------------------------------------------- backend level

void sweep_model(const std::string& preset, uint64_t weight_seed, const DeviceInfo& device) {
  const MoeProblem base = moe_problem_for(model_preset(preset), ActivationMode::kW4A16);
  const MoeWeights weights = synthetic_moe_weights(base.num_experts, base.hidden, base.inter, weight_seed);
  for (ActivationMode mode : {ActivationMode::kW4A16, ActivationMode::kW4A4}) {
    const MoeProblem problem = with_mode(base, mode);
    Runner runner(kBackendId, problem, weights, 4096, device);
    for (int64_t T : {1, 257, 1024, 4096}) {
      const std::vector<float> hidden = synthetic_activations(T, problem.hidden, 1000 + T);
      const std::vector<float> logits = test::random_logits(T, problem.num_experts, 7777 + T);
      check_case(runner, problem, weights, hidden, logits, nullptr, T, 1,
                 preset + " " + std::string(to_string(mode)) + " T=" + std::to_string(T));
    }
  }
}

TEST(CudaSm90Prefill, Qwen3_235B) {
  REQUIRE_SM90(device);
  sweep_model("qwen3-235b-a22b", 235, *device);
}

// All tokens on one expert at the 235B shape: 1024 rows = 8 M tiles of one expert, 127 experts empty.
TEST(CudaSm90Prefill, Qwen3_235B_AllTokensOnOneExpert) {
  REQUIRE_SM90(device);
  const MoeProblem base = moe_problem_for(model_preset("qwen3-235b-a22b"), ActivationMode::kW4A16);
  const MoeWeights weights = synthetic_moe_weights(base.num_experts, base.hidden, base.inter, 236);
  const int64_t E = base.num_experts, T = 1024;
  for (ActivationMode mode : {ActivationMode::kW4A16, ActivationMode::kW4A4}) {
    const MoeProblem problem = with_mode(base, mode);
    Runner runner(kBackendId, problem, weights, T, *device);
    const std::vector<float> hidden = synthetic_activations(T, problem.hidden, 5 + T);
    std::vector<float> logits = test::random_logits(T, E, 6 + T);
    for (int64_t t = 0; t < T; ++t) logits[t * E + 77] = 50.0f;
    check_case(runner, problem, weights, hidden, logits, nullptr, T, 3,
               "qwen3-235b all tokens on expert 77 " + std::string(to_string(mode)) + " T=1024");
  }
}

TEST(CudaSm90Prefill, SupportsRules) {
  const MoeProblem problem = moe_problem_for(model_preset("tiny"), ActivationMode::kW4A16);
  auto backend = find_moe_backend(kBackendId);
  DeviceInfo ampere;
  ampere.sm_major = 8, ampere.sm_minor = 0, ampere.shared_memory_per_block_optin = 232448, ampere.multiprocessors = 108;
  EXPECT_FALSE(backend->supports(problem, ampere).ok) << "sm_90a code must not be offered to SM80";
  DeviceInfo blackwell = ampere;
  blackwell.sm_major = 10;
  EXPECT_FALSE(backend->supports(problem, blackwell).ok) << "sm_90a code does not run on SM100";
  DeviceInfo hopper = ampere;
  hopper.sm_major = 9;
  EXPECT_TRUE(backend->supports(problem, hopper).ok) << backend->supports(problem, hopper).reason;
  MoeProblem odd = problem;
  odd.inter = 96;
  EXPECT_FALSE(backend->supports(odd, hopper).ok);
}

// The measurement knobs (host only, read where the backend chooses its kernel): unknown values are
// errors, and GEMM1 through the slots (single CTAs) cannot be combined with forced 2-CTA clusters.
TEST(CudaSm90Prefill, MeasurementKnobsRejectBadValues) {
  struct EnvRestore {  // the knobs as the process had them
    std::vector<std::pair<std::string, std::optional<std::string>>> saved;
    explicit EnvRestore(std::initializer_list<const char*> names) {
      for (const char* n : names) {
        const char* v = std::getenv(n);
        saved.emplace_back(n, v ? std::optional<std::string>(v) : std::nullopt);
      }
    }
    ~EnvRestore() {
      for (const auto& [n, v] : saved) {
        if (v) setenv(n.c_str(), v->c_str(), 1);
        else unsetenv(n.c_str());
      }
    }
  } restore({"FP4MOE_SM90_GEMM1_ROWS", "FP4MOE_SM90_REGW_CLUSTER", "FP4MOE_SM90_PREFILL_KERNEL"});
  unsetenv("FP4MOE_SM90_PREFILL_KERNEL");
  unsetenv("FP4MOE_SM90_REGW_CLUSTER");
  const MoeProblem problem = moe_problem_for(model_preset("qwen3.5-397b-a17b"), ActivationMode::kW4A16);
  auto backend = find_moe_backend(kBackendId);
  const DeviceInfo any;
  for (const char* ok : {"gathered", "slots", "auto"}) {
    setenv("FP4MOE_SM90_GEMM1_ROWS", ok, 1);
    EXPECT_FALSE(backend->variant_token_counts(problem, 4096, any).empty()) << ok;
  }
  setenv("FP4MOE_SM90_GEMM1_ROWS", "gather", 1);
  EXPECT_THROW(backend->variant_token_counts(problem, 4096, any), Error);
  setenv("FP4MOE_SM90_GEMM1_ROWS", "slots", 1);
  setenv("FP4MOE_SM90_REGW_CLUSTER", "2", 1);
  EXPECT_THROW(backend->variant_token_counts(problem, 4096, any), Error);
  setenv("FP4MOE_SM90_GEMM1_ROWS", "auto", 1);
  EXPECT_FALSE(backend->variant_token_counts(problem, 4096, any).empty()) << "forced clusters with automatic rows";
  setenv("FP4MOE_SM90_REGW_CLUSTER", "3", 1);
  EXPECT_THROW(backend->variant_token_counts(problem, 4096, any), Error);
}

}  // namespace
}  // namespace fp4moe
