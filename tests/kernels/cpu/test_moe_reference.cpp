// MoE, expert MLP and linear references: a hand-computed case, an independent straightforward
// double loop (format/nvfp4.h exact values, its own SwiGLU), thread-count and token_rows
// invariance, and bad input.
#include <gtest/gtest.h>

#include <chrono>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/parallel.h"
#include "common/rng.h"
#include "format/bf16.h"
#include "format/nvfp4.h"
#include "format/synthetic.h"
#include "kernels/cpu/moe_reference.h"
#include "kernels/cpu/reference_detail.h"

namespace fp4moe {
namespace {

struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// Random distinct experts per token, random positive weights.
Routing random_routing(int64_t T, int64_t E, int64_t K, uint64_t seed) {
  Rng rng(seed);
  Routing r;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> chosen;
    while (static_cast<int64_t>(chosen.size()) < K) {
      const auto e = static_cast<int32_t>(rng.below(static_cast<uint64_t>(E)));
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (int32_t e : chosen) {
      r.ids.push_back(e);
      r.weights.push_back(static_cast<float>(rng.uniform(0.05, 1.0)));
    }
  }
  return r;
}

// ---- The independent oracle: one token and one expert at a time, exact values from format/. ----

std::vector<double> exact_row_values(const Nvfp4View& m, int64_t r) {
  std::vector<double> v(static_cast<size_t>(m.cols));
  for (int64_t c = 0; c < m.cols; ++c) v[c] = nvfp4_exact_value(m, r, c);
  return v;
}

// x as the GEMM input: itself (W4A16) or its NVFP4 quantization with the scale, exactly (W4A4).
std::vector<double> gemm_input(const float* x, int64_t n, bool w4a4, float input_scale) {
  if (!w4a4) return std::vector<double>(x, x + n);
  const Nvfp4Matrix q = quantize_nvfp4(std::span<const float>(x, static_cast<size_t>(n)), 1, n, input_scale);
  return exact_row_values(q.view(), 0);
}

double my_silu(double g) { return g / (1.0 + std::exp(-g)); }

std::vector<float> naive_moe(const MoeProblem& p, const MoeWeights& w, const std::vector<float>& hidden, int64_t T,
                             const Routing& routing) {
  const int64_t H = p.hidden, I = p.inter, K = p.top_k;
  const bool w4a4 = p.activation_mode == ActivationMode::kW4A4;
  std::vector<float> out(static_cast<size_t>(T * H));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> acc(static_cast<size_t>(H), 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t e = routing.ids[t * K + k];
      const std::vector<double> x = gemm_input(hidden.data() + t * H, H, w4a4, w.w13_input_scale[e]);
      std::vector<float> h32(static_cast<size_t>(I));
      for (int64_t i = 0; i < I; ++i) {
        const std::vector<double> gate = exact_row_values(w.gate(e), i), up = exact_row_values(w.up(e), i);
        double g = 0.0, u = 0.0;
        for (int64_t j = 0; j < H; ++j) {
          g += x[j] * gate[j];
          u += x[j] * up[j];
        }
        h32[i] = static_cast<float>(my_silu(static_cast<float>(g)) * static_cast<double>(static_cast<float>(u)));
      }
      std::vector<double> h(static_cast<size_t>(I));
      if (w4a4) {
        h = gemm_input(h32.data(), I, true, w.w2_input_scale[e]);
      } else {
        for (int64_t i = 0; i < I; ++i) h[i] = round_to_bf16(h32[i]);
      }
      for (int64_t c = 0; c < H; ++c) {
        const std::vector<double> down = exact_row_values(w.down(e), c);
        double o = 0.0;
        for (int64_t i = 0; i < I; ++i) o += h[i] * down[i];
        const float product = routing.weights[t * K + k] * static_cast<float>(o);
        acc[c] = acc[c] + product;
      }
    }
    for (int64_t c = 0; c < H; ++c) out[t * H + c] = round_to_bf16(acc[c]);
  }
  return out;
}

std::vector<float> run_routed(const MoeProblem& p, const MoeWeights& w, const std::vector<float>& hidden, int64_t T,
                              const Routing& r, const MoeReferenceOptions& options = {}) {
  std::vector<float> out(static_cast<size_t>(T * p.hidden), -7.0f);
  moe_reference_routed(p, w, hidden, T, r.ids, r.weights, out, options);
  return out;
}

// ---- Hand-computed case ----

// Every element of a projection set to one E2M1 code with block scale 1.0 (E4M3 0x38).
void fill_uniform(MoeWeights& w, int64_t e, int which /*0 gate, 1 up, 2 down*/, uint8_t code) {
  const int64_t n = w.inter * w.hidden;
  uint8_t* packed = which == 2 ? w.w2_packed.data() + e * n / 2 : w.w13_packed.data() + (2 * e + which) * n / 2;
  uint8_t* scales = which == 2 ? w.w2_scales.data() + e * n / 16 : w.w13_scales.data() + (2 * e + which) * n / 16;
  std::fill(packed, packed + n / 2, static_cast<uint8_t>(code | (code << 4)));
  std::fill(scales, scales + n / 16, static_cast<uint8_t>(0x38));
}

TEST(MoeReference, HandComputedUniformWeights) {
  // H = I = 64, two experts. x = 1/64 everywhere, so sum_j x_j * c = c for a constant row c.
  // Expert 0: gate 1.0 (code 2) x gate_scale2 2 -> g = 2; up 0.5 (code 1) x up_scale2 0.25 -> u = 1/8;
  //           down 1.5 (code 3) x down_scale2 1 -> o = 64 * 1.5 * bf16(silu(2) / 8).
  // Expert 1: gate -1.0 (code 0xA) x 1 -> g = -1; up 6.0 (code 7) x 0.5 -> u = 3;
  //           down 0.5 x 0.25 -> o = 64 * 0.125 * bf16(silu(-1) * 3).
  const int64_t H = 64, I = 64;
  MoeProblem p = make_moe_problem(H, I, 2, 2, ActivationMode::kW4A16);
  MoeWeights w;
  w.allocate(2, H, I);
  fill_uniform(w, 0, 0, 0x2);
  fill_uniform(w, 0, 1, 0x1);
  fill_uniform(w, 0, 2, 0x3);
  fill_uniform(w, 1, 0, 0xA);
  fill_uniform(w, 1, 1, 0x7);
  fill_uniform(w, 1, 2, 0x1);
  w.gate_scale2 = {2.0f, 1.0f};
  w.up_scale2 = {0.25f, 0.5f};
  w.down_scale2 = {1.0f, 0.25f};
  w.w13_input_scale = {1.0f, 1.0f};
  w.w2_input_scale = {1.0f, 1.0f};
  const std::vector<float> hidden(static_cast<size_t>(H), 1.0f / 64.0f);
  const Routing r{{1, 0}, {0.25f, 0.75f}};  // slot 0 = expert 1, slot 1 = expert 0
  const std::vector<float> out = run_routed(p, w, hidden, 1, r);

  const float h0 = round_to_bf16(static_cast<float>(2.0 / (1.0 + std::exp(-2.0)) * 0.125));
  const float h1 = round_to_bf16(static_cast<float>(-1.0 / (1.0 + std::exp(1.0)) * 3.0));
  const float o0 = 64.0f * 1.5f * h0, o1 = 64.0f * 0.125f * h1;  // exact in float
  const float expected = round_to_bf16(0.0f + 0.25f * o1 + 0.75f * o0);
  for (int64_t c = 0; c < H; ++c) ASSERT_EQ(out[c], expected) << "column " << c;
  // By hand: 0.75 * 96 * 0.2202 + 0.25 * 8 * (-0.8068) = 14.24, within a BF16 ulp (1/16 here).
  EXPECT_NEAR(expected, 14.24, 0.0625);

  // Using the gate's tensor scale for up would change the result: the scales are separate.
  MoeWeights shared = w;
  shared.up_scale2 = shared.gate_scale2;
  EXPECT_NE(run_routed(p, shared, hidden, 1, r)[0], expected);
}

// ---- Against the independent loop ----

TEST(MoeReference, MatchesIndependentDoubleLoopW4A16AndW4A4) {
  const int64_t H = 128, I = 64, E = 4, K = 2, T = 5;
  const MoeWeights w = synthetic_moe_weights(E, H, I, 5);
  const std::vector<float> hidden = synthetic_activations(T, H, 6, 2.0);
  const Routing r = random_routing(T, E, K, 7);
  for (ActivationMode mode : {ActivationMode::kW4A16, ActivationMode::kW4A4}) {
    SCOPED_TRACE(to_string(mode));
    const MoeProblem p = make_moe_problem(H, I, E, K, mode);
    const std::vector<float> ref = run_routed(p, w, hidden, T, r);
    const std::vector<float> naive = naive_moe(p, w, hidden, T, r);
    int64_t nonzero = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_EQ(ref[i], naive[i]) << "element " << i;
      nonzero += ref[i] != 0.0f;
    }
    EXPECT_GT(nonzero, static_cast<int64_t>(ref.size()) * 9 / 10);
  }
  // W4A4 really differs from W4A16 (the activations are quantized).
  EXPECT_NE(run_routed(make_moe_problem(H, I, E, K, ActivationMode::kW4A4), w, hidden, T, r),
            run_routed(make_moe_problem(H, I, E, K, ActivationMode::kW4A16), w, hidden, T, r));
}

TEST(MoeReference, SameBitsForEveryThreadCount) {
  const int64_t H = 256, I = 128, E = 8, K = 3, T = 17;
  const MoeWeights w = synthetic_moe_weights(E, H, I, 9);
  const std::vector<float> hidden = synthetic_activations(T, H, 10);
  Routing r = random_routing(T, E, K, 11);
  for (int64_t t = 0; t < 6; ++t) r.ids[t * K] = 3;  // a crowded expert, uneven work
  for (ActivationMode mode : {ActivationMode::kW4A16, ActivationMode::kW4A4}) {
    const MoeProblem p = make_moe_problem(H, I, E, K, mode);
    MoeReferenceOptions one;
    one.num_threads = 1;
    const std::vector<float> base = run_routed(p, w, hidden, T, r, one);
    for (int threads : {2, 3, 5}) {
      MoeReferenceOptions o;
      o.num_threads = threads;
      const std::vector<float> out = run_routed(p, w, hidden, T, r, o);
      ASSERT_EQ(std::memcmp(out.data(), base.data(), out.size() * sizeof(float)), 0) << threads << " threads";
    }
    // The default thread count comes from FP4MOE_NUM_THREADS.
    const char* saved = std::getenv("FP4MOE_NUM_THREADS");
    const std::string saved_value = saved ? saved : "";
    setenv("FP4MOE_NUM_THREADS", "4", 1);
    const std::vector<float> from_env = run_routed(p, w, hidden, T, r);
    if (saved) setenv("FP4MOE_NUM_THREADS", saved_value.c_str(), 1);
    else unsetenv("FP4MOE_NUM_THREADS");
    ASSERT_EQ(std::memcmp(from_env.data(), base.data(), base.size() * sizeof(float)), 0) << "FP4MOE_NUM_THREADS=4";
  }
}

TEST(MoeReference, ZeroTokensAndEmptyExpertsAreFine) {
  const int64_t H = 64, I = 64, E = 4, K = 2;
  const MoeWeights w = synthetic_moe_weights(E, H, I, 24);
  const MoeProblem p = make_moe_problem(H, I, E, K, ActivationMode::kW4A16);
  std::vector<float> none;
  EXPECT_NO_THROW(moe_reference_routed(p, w, none, 0, {}, {}, none));
  // Every token on the last expert, twice (duplicate slots add up): experts 0..2 stay empty.
  const int64_t T = 3;
  const std::vector<float> hidden = synthetic_activations(T, H, 25);
  const Routing last{std::vector<int32_t>(static_cast<size_t>(T * K), 3), std::vector<float>(static_cast<size_t>(T * K), 0.5f)};
  const Routing once{std::vector<int32_t>(static_cast<size_t>(T * K), 3), {1.0f, 0.0f, 1.0f, 0.0f, 1.0f, 0.0f}};
  const std::vector<float> out = run_routed(p, w, hidden, T, last);
  EXPECT_EQ(out, run_routed(p, w, hidden, T, once));  // 0.5 o + 0.5 o == 1.0 o exactly
  EXPECT_EQ(out, naive_moe(p, w, hidden, T, last));
}

TEST(MoeReference, TokenRowsGiveTheSameRowsAndLeaveOthersUntouched) {
  const int64_t H = 128, I = 64, E = 6, K = 2, T = 9;
  const MoeWeights w = synthetic_moe_weights(E, H, I, 12);
  const std::vector<float> hidden = synthetic_activations(T, H, 13);
  std::vector<float> logits(static_cast<size_t>(T * E));
  Rng rng(14);
  for (float& v : logits) v = static_cast<float>(rng.normal());
  const MoeProblem p = make_moe_problem(H, I, E, K, ActivationMode::kW4A4);
  std::vector<float> full(static_cast<size_t>(T * H));
  moe_reference(p, w, hidden, logits, nullptr, T, full);
  MoeReferenceOptions o;
  o.token_rows = {7, 2, 3};
  std::vector<float> part(static_cast<size_t>(T * H), -7.0f);
  moe_reference(p, w, hidden, logits, nullptr, T, part, o);
  for (int64_t t = 0; t < T; ++t) {
    const bool listed = t == 7 || t == 2 || t == 3;
    for (int64_t c = 0; c < H; ++c) {
      ASSERT_EQ(part[t * H + c], listed ? full[t * H + c] : -7.0f) << "token " << t << " column " << c;
    }
  }
}

TEST(MoeReference, WholeLayerIsRoutingThenRoutedMoe) {
  const int64_t H = 64, I = 64, E = 8, K = 3, T = 4;
  const MoeWeights w = synthetic_moe_weights(E, H, I, 15);
  const std::vector<float> hidden = synthetic_activations(T, H, 16);
  std::vector<float> logits(static_cast<size_t>(T * E));
  Rng rng(17);
  for (float& v : logits) v = static_cast<float>(rng.normal());
  MoeProblem p = make_moe_problem(H, I, E, K, ActivationMode::kW4A16);
  p.routing.method = RoutingMethod::kSigmoidGroupedTopk;
  p.routing.n_group = 4;
  p.routing.topk_group = 2;
  p.routing.routed_scaling_factor = 2.5f;
  std::vector<float> bias(static_cast<size_t>(E));
  for (float& v : bias) v = static_cast<float>(rng.normal() * 0.1);
  std::vector<float> out(static_cast<size_t>(T * H));
  moe_reference(p, w, hidden, logits, bias.data(), T, out);
  Routing r{std::vector<int32_t>(static_cast<size_t>(T * K)), std::vector<float>(static_cast<size_t>(T * K))};
  route_reference(p.routing, logits, T, bias.data(), r.ids, r.weights);
  EXPECT_EQ(out, run_routed(p, w, hidden, T, r));
}

TEST(MoeReference, BadInputsAreErrors) {
  const int64_t H = 64, I = 64, E = 4, K = 2, T = 3;
  const MoeWeights w = synthetic_moe_weights(E, H, I, 18);
  const std::vector<float> hidden = synthetic_activations(T, H, 19);
  const MoeProblem p = make_moe_problem(H, I, E, K, ActivationMode::kW4A4);
  const Routing good = random_routing(T, E, K, 20);
  std::vector<float> out(static_cast<size_t>(T * H));
  auto expect_error = [&](const std::string& needle, const MoeProblem& pp, const MoeWeights& ww,
                          const std::vector<float>& x, const Routing& r, std::span<float> o,
                          const MoeReferenceOptions& options = {}) {
    try {
      moe_reference_routed(pp, ww, x, T, r.ids, r.weights, o, options);
      ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  Routing r = good;
  r.ids[3] = 4;
  expect_error("topk_ids[1, 1] = 4", p, w, hidden, r, out);
  r = good;
  r.ids[0] = -1;
  expect_error("topk_ids[0, 0]", p, w, hidden, r, out);
  r = good;
  r.weights[5] = NAN;
  expect_error("topk_weights[2, 1]", p, w, hidden, r, out);
  std::vector<float> bad_hidden = hidden;
  bad_hidden[H + 5] = INFINITY;
  expect_error("hidden state [1, 5]", p, w, bad_hidden, good, out);
  expect_error("output has", p, w, hidden, good, std::span<float>(out).first(10));
  r = good;
  r.ids.pop_back();
  expect_error("topk_ids has", p, w, hidden, r, out);
  expect_error("hidden states have", p, w, std::vector<float>(hidden.begin(), hidden.end() - 1), good, out);
  const MoeProblem wrong_shape = make_moe_problem(128, I, E, K, ActivationMode::kW4A4);
  std::vector<float> wide_hidden(static_cast<size_t>(T * 128), 0.5f), wide_out(static_cast<size_t>(T * 128));
  expect_error("weights are", wrong_shape, w, wide_hidden, good, wide_out);
  MoeWeights bad_scale = w;
  bad_scale.up_scale2[2] = 0.0f;
  expect_error("up_scale2[2]", p, bad_scale, hidden, good, out);
  MoeWeights bad_input_scale = w;
  bad_input_scale.w2_input_scale[1] = NAN;
  expect_error("w2_input_scale[1]", p, bad_input_scale, hidden, good, out);
  MoeWeights nan_block = w;
  for (int64_t e = 0; e < E; ++e) nan_block.w2_scales[e * H * I / 16 + 3] = 0x7F;  // row 0 of down, every expert
  expect_error("NaN block scale", p, nan_block, hidden, good, out);
  MoeWeights truncated = w;
  truncated.w13_packed.pop_back();
  expect_error("w13_packed", p, truncated, hidden, good, out);
  MoeReferenceOptions rows;
  rows.token_rows = {0, 3};
  expect_error("token_rows entry 3", p, w, hidden, good, out, rows);
  rows.token_rows = {1, 1};
  expect_error("twice", p, w, hidden, good, out, rows);
  MoeProblem inconsistent = p;
  inconsistent.routing.top_k = 3;
  expect_error("routing config", inconsistent, w, hidden, good, out);
  // Router logits: NaN names the token.
  std::vector<float> logits(static_cast<size_t>(T * E), 0.5f);
  logits[2 * E + 1] = NAN;
  try {
    moe_reference(p, w, hidden, logits, nullptr, T, out);
    ADD_FAILURE() << "NaN logit accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 2"), std::string::npos) << e.what();
  }
}

// ---- Activation quantization and the dense linear ----

TEST(QuantizeDequantizeActivations, MatchesTheFormatQuantizer) {
  const int64_t rows = 3, cols = 64;
  const std::vector<float> x = synthetic_activations(rows, cols, 21, 3.0);
  const float scale = nvfp4_tensor_scale_for_amax(8.0f);
  std::vector<float> out(x.size());
  quantize_dequantize_activations(x, rows, cols, scale, out);
  const Nvfp4Matrix q = quantize_nvfp4(x, rows, cols, scale);
  std::vector<float> expected(x.size());
  dequantize_nvfp4(q.view(), expected);
  EXPECT_EQ(out, expected);
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (out[i] - x[i]) * (out[i] - x[i]);
    norm += x[i] * x[i];
  }
  EXPECT_LT(std::sqrt(err / norm), 0.2);  // a quantization, not garbage
  EXPECT_GT(err, 0.0);
  std::vector<float> bad = x;
  bad[70] = NAN;
  EXPECT_THROW(quantize_dequantize_activations(bad, rows, cols, scale, out), Error);
  EXPECT_THROW(quantize_dequantize_activations(x, rows, cols, 0.0f, out), Error);
  EXPECT_THROW(quantize_dequantize_activations(x, rows, cols - 16, scale, out), Error);
}

TEST(LinearReference, MatchesIndependentDoubleLoop) {
  const int64_t T = 3, N = 48, K = 96;
  const Nvfp4Matrix w = quantize_nvfp4(synthetic_weight_matrix(N, K, 22), N, K);
  const std::vector<float> x = synthetic_activations(T, K, 23);
  const float input_scale = nvfp4_tensor_scale_for_amax(4.0f);
  for (ActivationMode mode : {ActivationMode::kW4A16, ActivationMode::kW4A4}) {
    SCOPED_TRACE(to_string(mode));
    std::vector<float> out(static_cast<size_t>(T * N));
    linear_nvfp4_reference(w.view(), x, T, mode, input_scale, out);
    for (int64_t t = 0; t < T; ++t) {
      const std::vector<double> xs = gemm_input(x.data() + t * K, K, mode == ActivationMode::kW4A4, input_scale);
      for (int64_t n = 0; n < N; ++n) {
        double sum = 0.0;
        for (int64_t k = 0; k < K; ++k) sum += xs[k] * nvfp4_exact_value(w.view(), n, k);
        ASSERT_EQ(out[t * N + n], static_cast<float>(sum)) << "[" << t << ", " << n << "]";
      }
    }
  }
  std::vector<float> out(static_cast<size_t>(T * N));
  EXPECT_THROW(linear_nvfp4_reference(w.view(), x, T + 1, ActivationMode::kW4A16, 1.0f, out), Error);
  EXPECT_THROW(linear_nvfp4_reference(w.view(), x, T, ActivationMode::kW4A4, 0.0f, out), Error);
  EXPECT_THROW(linear_nvfp4_reference(w.view(), x, T, ActivationMode::kW4A16, 1.0f, std::span<float>(out).first(5)),
               Error);
  Nvfp4Matrix nan_scale = w;
  nan_scale.scales[7] = 0xFF;
  EXPECT_THROW(linear_nvfp4_reference(nan_scale.view(), x, T, ActivationMode::kW4A16, 1.0f, out), Error);
}

TEST(ReferenceDetail, ParallelItemsRunsEveryItemOnce) {
  for (int threads : {1, 2, 3, 8}) {
    for (const std::vector<double>& costs :
         {std::vector<double>{}, std::vector<double>{1.0}, std::vector<double>{0.0, 0.0, 0.0},
          std::vector<double>{100.0, 1.0, 1.0, 1.0, 1.0, 50.0, 2.0}}) {
      std::vector<std::atomic<int>> hits(costs.size());
      detail::parallel_items(costs, threads, [&](int64_t i) { hits[i]++; });
      for (size_t i = 0; i < costs.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " threads, item " << i;
    }
  }
}

TEST(ReferenceDetail, DotAndDecodeAreExact) {
  // Row decode equals nvfp4_exact_value / tensor_scale; the dot of exact values is exact here.
  const Nvfp4Matrix m = quantize_nvfp4(synthetic_weight_matrix(2, 64, 26), 2, 64);
  std::vector<double> row(64);
  ASSERT_TRUE(detail::decode_row_unscaled(m.view(), 1, row.data()));
  for (int64_t c = 0; c < 64; ++c) EXPECT_EQ(row[c] * m.tensor_scale, nvfp4_exact_value(m.view(), 1, c));
  std::vector<double> ones(64, 1.0), a(64);
  for (int i = 0; i < 64; ++i) a[i] = i;
  EXPECT_EQ(detail::dot_f64(a.data(), ones.data(), 64), 2016.0);
  Nvfp4Matrix bad = m;
  bad.scales[5] = 0x7F;  // row 1, block 1
  EXPECT_FALSE(detail::decode_row_unscaled(bad.view(), 1, row.data()));
  EXPECT_TRUE(detail::decode_row_unscaled(bad.view(), 0, row.data()));
}

// ---- Speed: the Qwen3.5-397B-A17B MoE layer, 64 tokens ----

// Full shape: H=4096, I=1024, E=512, top-10. Generating the 512 synthetic experts alone takes
// ~25 s on 2 cores, so this is opt-in (--gtest_also_run_disabled_tests); it prints the time.
TEST(MoeReferenceSpeed, DISABLED_Qwen35_397B_64Tokens) {
  const int64_t H = 4096, I = 1024, E = 512, K = 10, T = 64;
  const MoeWeights w = synthetic_moe_weights(E, H, I, 1);
  const std::vector<float> hidden = synthetic_activations(T, H, 2);
  std::vector<float> logits(static_cast<size_t>(T * E));
  Rng rng(3);
  for (float& v : logits) v = static_cast<float>(rng.normal());
  std::vector<float> out(static_cast<size_t>(T * H));
  for (ActivationMode mode : {ActivationMode::kW4A16, ActivationMode::kW4A4}) {
    const MoeProblem p = make_moe_problem(H, I, E, K, mode);
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    moe_reference(p, w, hidden, logits, nullptr, T, out);
    const double cpu_seconds = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("397B MoE reference, %s, %lld tokens, %d threads: %.2f s wall, %.2f s CPU\n",
                std::string(to_string(mode)).c_str(), static_cast<long long>(T), default_num_threads(), seconds,
                cpu_seconds);
    EXPECT_LT(seconds, 60.0);
  }
}

// Same per-expert shape with 8 experts (every expert gets ~16 tokens): fast enough for the suite,
// and a guard against the reference becoming minutes-slow.
TEST(MoeReferenceSpeed, PerExpert397BShape8Experts) {
  const int64_t H = 4096, I = 1024, E = 8, K = 8, T = 16;
  const MoeWeights w = synthetic_moe_weights(E, H, I, 4);
  const std::vector<float> hidden = synthetic_activations(T, H, 5);
  const Routing r = random_routing(T, E, K, 6);
  const MoeProblem p = make_moe_problem(H, I, E, K, ActivationMode::kW4A16);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<float> out = run_routed(p, w, hidden, T, r);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("MoE reference H=4096 I=1024 E=8 K=8, %lld tokens: %.3f s\n", static_cast<long long>(T), seconds);
  EXPECT_LT(seconds, 20.0);
  // Spot-check one token against the independent loop on a single row (token 5).
  MoeReferenceOptions o;
  o.token_rows = {5};
  std::vector<float> row(static_cast<size_t>(T * H), 0.0f);
  moe_reference_routed(p, w, hidden, T, r.ids, r.weights, row, o);
  for (int64_t c = 0; c < H; ++c) ASSERT_EQ(row[5 * H + c], out[5 * H + c]);
}

}  // namespace
}  // namespace fp4moe
