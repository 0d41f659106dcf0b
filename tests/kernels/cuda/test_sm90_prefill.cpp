// cuda.sm90.prefill.v1 and its sm_90a grouped GEMM (TMA + wgmma). GEMM level: uneven experts (empty,
// 1 row, 64, 130, 257 rows) against a host fp64 reference of the dequantized weights, fp32 output
// and SwiGLU epilogues, K blocks not a multiple of the stage count, a small persistent grid (many
// items per CTA: barrier phases across tiles) and the full grid bit-identical. Backend level: only
// what the parameterized suite (test_moe_backend_suite.cpp, which runs this backend too: model sweeps,
// adversarial routing, graph replay, bit identity, E4M3 extremes) lacks: the qwen3-235b-a22b shape at
// 1..4096 tokens W4A16 and W4A4 and all its tokens on one expert, against moe_reference, and the
// supports() rules. GPU tests skip with the reason unless the GPU is SM 9.0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>

#include "backends/registry.h"
#include "common/rng.h"
#include "format/fp_codes.h"
#include "format/synthetic.h"
#include "backend_runner.h"
#include "gpu_test_util.h"
#include "io/presets.h"
#include "kernels/cpu/moe_reference.h"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm90a.h"
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
  GemmFixture(const std::vector<int>& counts, int64_t k, uint64_t seed) : E(int64_t(counts.size())), K(k) {
    std::vector<int32_t> ids;
    for (int64_t e = 0; e < E; ++e) ids.insert(ids.end(), counts[e], static_cast<int32_t>(e));
    T = static_cast<int64_t>(ids.size());
    Rng rng(seed);
    for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.below(i)]);
    route_ws = DeviceBuffer(moe_route_workspace_bytes(T, 1, int(E), kSm90TileM));
    route = carve_moe_route_workspace(route_ws.get(), T, 1, int(E), kSm90TileM);
    FP4MOE_CUDA_CHECK(cudaMemcpy(route.topk_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
    launch_moe_align(route, T, 1, int(E), kSm90TileM, nullptr);
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
    g.max_tiles = moe_max_tiles(T, 1, int(E), kSm90TileM);
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

// Repacks every expert's matrix (optionally with a row order) and uploads packed + scales.
std::pair<DeviceBuffer, DeviceBuffer> upload_repacked(const std::vector<Nvfp4Matrix>& ws, std::span<const int64_t> order) {
  const size_t pb = ws[0].packed.size(), sb = ws[0].scales.size();
  std::vector<uint8_t> packed(pb * ws.size()), scales(sb * ws.size());
  for (size_t e = 0; e < ws.size(); ++e) repack_nvfp4_for_sm90(ws[e].view(), order, packed.data() + e * pb, scales.data() + e * sb);
  return {DeviceBuffer::from_host(packed), DeviceBuffer::from_host(scales)};
}

const std::vector<int> kUnevenCounts = {0, 1, 130, 64, 257, 7, 128, 0};

TEST(CudaSm90PrefillGemm, ScaledFp32OutputOnUnevenExperts) {
  REQUIRE_SM90(device);
  configure_sm90_grouped_gemm_kernels();
  const int64_t K = 320, N = 256;  // 5 K blocks (not a multiple of the stage count), 2 N tiles
  GemmFixture fx(kUnevenCounts, K, 11);
  Rng rng(12);
  std::vector<Nvfp4Matrix> w;
  std::vector<float> scale(static_cast<size_t>(fx.E));
  for (int64_t e = 0; e < fx.E; ++e) {
    w.push_back(random_nvfp4(N, K, rng));
    scale[static_cast<size_t>(e)] = 0.01f * static_cast<float>(1 + e);
  }
  auto [packed, scales] = upload_repacked(w, {});
  DeviceBuffer scale_dev = DeviceBuffer::from_host(scale);
  std::vector<std::vector<float>> outs;
  for (int sms : {3, device->multiprocessors}) {  // 3 CTAs: many work items per CTA
    DeviceBuffer out(static_cast<size_t>(fx.T * N * 4));
    FP4MOE_CUDA_CHECK(cudaMemset(out.get(), 0xFF, out.bytes()));  // NaN poison
    Sm90GemmArgs g = fx.args(packed, scales, N, sms);
    g.scale_first = scale_dev.as<float>();
    g.out = out.get();
    launch_grouped_gemm_nvfp4w_bf16_sm90a(g, GemmEpilogue::kScaleFp32, nullptr);
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
  std::printf("[ result ] sm90 GEMM fp32: T=%lld max |err| / sum|terms| = %.3e\n", static_cast<long long>(fx.T), max_rel);
}

TEST(CudaSm90PrefillGemm, SwigluEpilogueOnUnevenExperts) {
  REQUIRE_SM90(device);
  configure_sm90_grouped_gemm_kernels();
  const int64_t K = 256, I = 128;  // GEMM1: N = 2I, gate/up interleaved by 8 rows
  GemmFixture fx(kUnevenCounts, K, 21);
  Rng rng(22);
  std::vector<Nvfp4Matrix> w13;
  std::vector<float> fg(static_cast<size_t>(fx.E)), fu(static_cast<size_t>(fx.E));
  for (int64_t e = 0; e < fx.E; ++e) {
    w13.push_back(random_nvfp4(2 * I, K, rng));
    fg[static_cast<size_t>(e)] = 0.002f * static_cast<float>(1 + e);
    fu[static_cast<size_t>(e)] = 0.003f * static_cast<float>(2 + e);
  }
  const std::vector<int64_t> order = gate_up_interleaved_rows(I);
  auto [packed, scales] = upload_repacked(w13, order);
  DeviceBuffer fg_dev = DeviceBuffer::from_host(fg), fu_dev = DeviceBuffer::from_host(fu);
  DeviceBuffer out(static_cast<size_t>(fx.T * I * 2));
  std::vector<uint16_t> poison(static_cast<size_t>(fx.T * I), kBf16Poison);
  FP4MOE_CUDA_CHECK(cudaMemcpy(out.get(), poison.data(), out.bytes(), cudaMemcpyHostToDevice));
  Sm90GemmArgs g = fx.args(packed, scales, 2 * I, 5);
  g.scale_first = fg_dev.as<float>();
  g.scale_second = fu_dev.as<float>();
  g.out = out.get();
  launch_grouped_gemm_nvfp4w_bf16_sm90a(g, GemmEpilogue::kSwiglu, nullptr);
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

}  // namespace
}  // namespace fp4moe
