// CPU MoE reference (moe_reference_routed, moe_reference): the oracle for every GPU MoE kernel.
// Inputs: hidden [T, H] (BF16 values as float), topk ids/weights [T, K], MoeWeights (w13 [E, 2I, H]
// gate rows first, w2 [E, H, I], linear E4M3 block scales). Output [T, H] BF16 values as float.
// The exact numerics are written in moe_reference.h; this file implements them.
//
// Speed (the oracle must handle the 397B shape in seconds): the (token, slot) pairs of a chunk of
// tokens are grouped by expert; each touched expert's weight rows are decoded once per chunk, into a
// small per-thread double buffer, and used for all of that expert's pairs while in L1. Work items
// are (expert, block of rows), split over threads by estimated cost; every output value is computed
// by one item in a fixed order, so results are bitwise independent of the thread count.
// Phases per chunk: [W4A4: quantize x per pair] -> GEMM1 + SwiGLU -> round/quantize h -> GEMM2 ->
// combine in slot order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "common/parallel.h"
#include "format/bf16.h"
#include "kernels/cpu/moe_reference.h"
#include "kernels/cpu/reference_detail.h"

namespace fp4moe {

namespace {

constexpr int64_t kGemm1RowBlock = 32;   // rows of I per GEMM1 work item
constexpr int64_t kGemm2RowBlock = 64;   // rows of H per GEMM2 work item
constexpr double kDecodeCost = 2.0;      // decoding a row costs about two dot products
constexpr int64_t kChunkBytes = 256ll << 20;  // working memory per chunk of tokens

// Deterministic uniform in [-1, 1) for the perturbation study (splitmix64 finalizer).
double perturbation_unit(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t z = seed ^ (a * 0x9E3779B97F4A7C15ull) ^ (b * 0xC2B2AE3D27D4EB4Full) ^ (c * 0x165667B19E3779F9ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0;
}

struct Perturb {
  double relative = 0.0;
  uint64_t seed = 0;
  // value (a double about to be rounded to fp32) times (1 + relative * u).
  double apply(double value, uint64_t token, uint64_t expert, uint64_t index) const {
    if (relative == 0.0) return value;
    return value * (1.0 + relative * perturbation_unit(seed, token, expert, index));
  }
};

struct Inputs {
  const MoeProblem& problem;
  const MoeWeights& weights;
  std::span<const float> hidden;
  std::span<const int32_t> ids;
  std::span<const float> topk_weights;
  std::span<float> out;
  int threads;
  Perturb perturb;
};

void check_weights_match(const MoeProblem& p, const MoeWeights& w) {
  FP4MOE_CHECK(w.num_experts == p.num_experts && w.hidden == p.hidden && w.inter == p.inter,
               "MoE reference: weights are [E=", w.num_experts, ", H=", w.hidden, ", I=", w.inter,
               "] but the problem is ", p.describe());
  const auto E = static_cast<size_t>(p.num_experts), H = static_cast<size_t>(p.hidden),
             I = static_cast<size_t>(p.inter);
  auto check_size = [](const char* name, size_t got, size_t want) {
    FP4MOE_CHECK(got == want, "MoE reference: weights.", name, " has ", got, " elements, expected ", want);
  };
  check_size("w13_packed", w.w13_packed.size(), E * 2 * I * H / 2);
  check_size("w13_scales", w.w13_scales.size(), E * 2 * I * H / 16);
  check_size("w2_packed", w.w2_packed.size(), E * H * I / 2);
  check_size("w2_scales", w.w2_scales.size(), E * H * I / 16);
  const bool w4a4 = p.activation_mode == ActivationMode::kW4A4;
  auto check_scales = [&](const char* name, const std::vector<float>& v, bool needed) {
    check_size(name, v.size(), E);
    if (!needed) return;
    for (size_t e = 0; e < E; ++e) {
      FP4MOE_CHECK(std::isfinite(v[e]) && v[e] > 0.0f, "MoE reference: weights.", name, "[", e,
                   "] must be finite and > 0, got ", v[e]);
    }
  };
  check_scales("gate_scale2", w.gate_scale2, true);
  check_scales("up_scale2", w.up_scale2, true);
  check_scales("down_scale2", w.down_scale2, true);
  check_scales("w13_input_scale", w.w13_input_scale, w4a4);
  check_scales("w2_input_scale", w.w2_input_scale, w4a4);
}

[[noreturn]] void fail_nan_scale(const char* projection, int64_t expert, int64_t row) {
  fail("MoE reference: expert ", expert, " ", projection, " row ", row,
       " has an E4M3 NaN block scale (code 0x7F/0xFF); NVFP4 weights must have finite scales");
}

// One chunk of token rows (indices into the full [T, ...] arrays).
void run_chunk(const Inputs& in, const int64_t* rows, int64_t n_rows) {
  const MoeProblem& p = in.problem;
  const MoeWeights& w = in.weights;
  const int64_t H = p.hidden, I = p.inter, E = p.num_experts, K = p.top_k;
  const bool w4a4 = p.activation_mode == ActivationMode::kW4A4;

  // Group the chunk's (row, slot) pairs by expert: counting sort, stable in (row, slot) order.
  std::vector<int64_t> expert_begin(static_cast<size_t>(E) + 1, 0);
  for (int64_t i = 0; i < n_rows; ++i) {
    for (int64_t k = 0; k < K; ++k) expert_begin[in.ids[rows[i] * K + k] + 1]++;
  }
  for (int64_t e = 0; e < E; ++e) expert_begin[e + 1] += expert_begin[e];
  const int64_t n_pairs = n_rows * K;
  std::vector<int64_t> pair_local(static_cast<size_t>(n_pairs));  // chunk-local row * K + slot
  {
    std::vector<int64_t> fill(expert_begin.begin(), expert_begin.end() - 1);
    for (int64_t i = 0; i < n_rows; ++i) {
      for (int64_t k = 0; k < K; ++k) pair_local[fill[in.ids[rows[i] * K + k]]++] = i * K + k;
    }
  }
  std::vector<int32_t> pair_expert(static_cast<size_t>(n_pairs));
  std::vector<int32_t> touched;
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t q = expert_begin[e]; q < expert_begin[e + 1]; ++q) pair_expert[q] = static_cast<int32_t>(e);
    if (expert_begin[e + 1] > expert_begin[e]) touched.push_back(static_cast<int32_t>(e));
  }
  auto token_of = [&](int64_t q) { return rows[pair_local[q] / K]; };

  // GEMM1 inputs in double: W4A16 one row per token (BF16 values, exact); W4A4 one row per pair,
  // quantized with the expert's w13_input_scale, without the scale (applied after the dot).
  std::vector<double> x(static_cast<size_t>((w4a4 ? n_pairs : n_rows) * H));
  if (w4a4) {
    parallel_for(n_pairs, [&](int64_t b, int64_t e) {
      for (int64_t q = b; q < e; ++q) {
        detail::quantize_row_unscaled(in.hidden.data() + token_of(q) * H, H, w.w13_input_scale[pair_expert[q]],
                                      x.data() + q * H);
      }
    }, 16, in.threads);
  } else {
    for (int64_t i = 0; i < n_rows; ++i) {
      std::copy_n(in.hidden.data() + rows[i] * H, H, x.data() + i * H);
    }
  }
  auto x_of = [&](int64_t q) { return x.data() + (w4a4 ? q : pair_local[q] / K) * H; };

  // GEMM1 + SwiGLU: items are (touched expert, block of kGemm1RowBlock rows of I).
  const int64_t blocks1 = (I + kGemm1RowBlock - 1) / kGemm1RowBlock;
  std::vector<double> costs;
  for (int32_t e : touched) {
    const double pairs = static_cast<double>(expert_begin[e + 1] - expert_begin[e]);
    costs.insert(costs.end(), static_cast<size_t>(blocks1), 2.0 * (kDecodeCost + pairs));
  }
  std::vector<float> h32(static_cast<size_t>(n_pairs * I));
  detail::parallel_items(costs, in.threads, [&](int64_t item) {
    const int64_t e = touched[item / blocks1];
    const int64_t r0 = (item % blocks1) * kGemm1RowBlock, r1 = std::min(I, r0 + kGemm1RowBlock);
    const Nvfp4View gate = w.gate(e), up = w.up(e);
    const double gate_scale = static_cast<double>(w.gate_scale2[e]) * (w4a4 ? w.w13_input_scale[e] : 1.0);
    const double up_scale = static_cast<double>(w.up_scale2[e]) * (w4a4 ? w.w13_input_scale[e] : 1.0);
    std::vector<double> gate_row(static_cast<size_t>(H)), up_row(static_cast<size_t>(H));
    for (int64_t r = r0; r < r1; ++r) {
      if (!detail::decode_row_unscaled(gate, r, gate_row.data())) fail_nan_scale("gate_proj", e, r);
      if (!detail::decode_row_unscaled(up, r, up_row.data())) fail_nan_scale("up_proj", e, r);
      for (int64_t q = expert_begin[e]; q < expert_begin[e + 1]; ++q) {
        const double* xq = x_of(q);
        const uint64_t t = static_cast<uint64_t>(token_of(q));
        const auto g = static_cast<float>(
            in.perturb.apply(detail::dot_f64(xq, gate_row.data(), H) * gate_scale, t, e, 2 * r));
        const auto u = static_cast<float>(
            in.perturb.apply(detail::dot_f64(xq, up_row.data(), H) * up_scale, t, e, 2 * r + 1));
        const double silu = static_cast<double>(g) / (1.0 + std::exp(-static_cast<double>(g)));
        h32[q * I + r] = static_cast<float>(silu * static_cast<double>(u));
      }
    }
  });
  x.clear();
  x.shrink_to_fit();

  // The one intermediate rounding point: BF16 (W4A16) or NVFP4 with w2_input_scale (W4A4, kept
  // without the scale; it is applied after the GEMM2 dot).
  std::vector<double> h(static_cast<size_t>(n_pairs * I));
  parallel_for(n_pairs, [&](int64_t b, int64_t end) {
    for (int64_t q = b; q < end; ++q) {
      const float* src = h32.data() + q * I;
      double* dst = h.data() + q * I;
      if (!w4a4) {
        for (int64_t r = 0; r < I; ++r) dst[r] = round_to_bf16(src[r]);
        continue;
      }
      for (int64_t r = 0; r < I; ++r) {
        FP4MOE_CHECK(std::isfinite(src[r]), "MoE reference: the SwiGLU output of token ", token_of(q), ", expert ",
                     pair_expert[q], ", column ", r, " is ", src[r],
                     " (fp32 overflow in GEMM1); W4A4 cannot quantize it to NVFP4");
      }
      detail::quantize_row_unscaled(src, I, w.w2_input_scale[pair_expert[q]], dst);
    }
  }, 16, in.threads);
  h32.clear();
  h32.shrink_to_fit();

  // GEMM2: items are (touched expert, block of kGemm2RowBlock rows of H). o[(row * K + slot) * H + c].
  const int64_t blocks2 = (H + kGemm2RowBlock - 1) / kGemm2RowBlock;
  costs.clear();
  for (int32_t e : touched) {
    const double pairs = static_cast<double>(expert_begin[e + 1] - expert_begin[e]);
    costs.insert(costs.end(), static_cast<size_t>(blocks2), kDecodeCost + pairs);
  }
  std::vector<float> o(static_cast<size_t>(n_pairs * H));
  detail::parallel_items(costs, in.threads, [&](int64_t item) {
    const int64_t e = touched[item / blocks2];
    const int64_t c0 = (item % blocks2) * kGemm2RowBlock, c1 = std::min(H, c0 + kGemm2RowBlock);
    const Nvfp4View down = w.down(e);
    const double down_scale = static_cast<double>(w.down_scale2[e]) * (w4a4 ? w.w2_input_scale[e] : 1.0);
    std::vector<double> down_row(static_cast<size_t>(I));
    for (int64_t c = c0; c < c1; ++c) {
      if (!detail::decode_row_unscaled(down, c, down_row.data())) fail_nan_scale("down_proj", e, c);
      for (int64_t q = expert_begin[e]; q < expert_begin[e + 1]; ++q) {
        const double sum = detail::dot_f64(h.data() + q * I, down_row.data(), I);
        o[pair_local[q] * H + c] = static_cast<float>(
            in.perturb.apply(sum * down_scale, static_cast<uint64_t>(token_of(q)), e, 2 * I + c));
      }
    }
  });

  // Combine in slot order, in fp32: acc = fp32(acc + fp32(w_k * o_k)), acc starting at +0. The
  // product and sum are formed in double from fp32 operands (exact) and rounded to fp32 explicitly,
  // so no FMA contraction can change them. Then BF16.
  parallel_for(n_rows, [&](int64_t b, int64_t end) {
    for (int64_t i = b; i < end; ++i) {
      const int64_t t = rows[i];
      float* dst = in.out.data() + t * H;
      for (int64_t c = 0; c < H; ++c) {
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
          const auto product = static_cast<float>(static_cast<double>(in.topk_weights[t * K + k]) *
                                                  static_cast<double>(o[(i * K + k) * H + c]));
          acc = static_cast<float>(static_cast<double>(acc) + static_cast<double>(product));
        }
        acc = static_cast<float>(in.perturb.apply(acc, static_cast<uint64_t>(t), E, 3 * I + c));
        dst[c] = round_to_bf16(acc);
      }
    }
  }, 4, in.threads);
}

}  // namespace

void moe_reference_routed(const MoeProblem& problem, const MoeWeights& weights, std::span<const float> hidden,
                          int64_t tokens, std::span<const int32_t> topk_ids, std::span<const float> topk_weights,
                          std::span<float> out, const MoeReferenceOptions& options) {
  problem.validate();
  check_weights_match(problem, weights);
  const int64_t H = problem.hidden, I = problem.inter, E = problem.num_experts, K = problem.top_k;
  FP4MOE_CHECK(tokens >= 0, "MoE reference: negative token count ", tokens);
  FP4MOE_CHECK(static_cast<int64_t>(hidden.size()) == tokens * H, "MoE reference: hidden states have ",
               hidden.size(), " values, expected tokens (", tokens, ") x hidden (", H, ") = ", tokens * H);
  FP4MOE_CHECK(static_cast<int64_t>(topk_ids.size()) == tokens * K, "MoE reference: topk_ids has ", topk_ids.size(),
               " entries, expected tokens (", tokens, ") x top_k (", K, ") = ", tokens * K);
  FP4MOE_CHECK(static_cast<int64_t>(topk_weights.size()) == tokens * K, "MoE reference: topk_weights has ",
               topk_weights.size(), " entries, expected ", tokens * K);
  FP4MOE_CHECK(static_cast<int64_t>(out.size()) == tokens * H, "MoE reference: output has ", out.size(),
               " values, expected ", tokens * H);
  FP4MOE_CHECK(std::isfinite(options.fp32_perturbation) && options.fp32_perturbation >= 0.0 &&
                   options.fp32_perturbation < 0.5,
               "MoE reference: fp32_perturbation must be in [0, 0.5), got ", options.fp32_perturbation);
  FP4MOE_CHECK(options.num_threads >= 0, "MoE reference: num_threads must be >= 0, got ", options.num_threads);

  std::vector<int64_t> rows = options.token_rows;
  if (rows.empty()) {
    rows.resize(static_cast<size_t>(tokens));
    for (int64_t t = 0; t < tokens; ++t) rows[t] = t;
  } else {
    std::vector<char> seen(static_cast<size_t>(tokens), 0);
    for (int64_t t : rows) {
      FP4MOE_CHECK(t >= 0 && t < tokens, "MoE reference: token_rows entry ", t, " is outside [0, ", tokens, ")");
      FP4MOE_CHECK(!seen[t], "MoE reference: token_rows lists token ", t, " twice");
      seen[t] = 1;
    }
  }
  for (int64_t t : rows) {
    for (int64_t k = 0; k < K; ++k) {
      const int32_t id = topk_ids[t * K + k];
      FP4MOE_CHECK(id >= 0 && id < E, "MoE reference: topk_ids[", t, ", ", k, "] = ", id, " is outside [0, ", E, ")");
      FP4MOE_CHECK(std::isfinite(topk_weights[t * K + k]), "MoE reference: topk_weights[", t, ", ", k, "] = ",
                   topk_weights[t * K + k], " is not finite");
    }
    for (int64_t c = 0; c < H; ++c) {
      FP4MOE_CHECK(std::isfinite(hidden[t * H + c]), "MoE reference: hidden state [", t, ", ", c, "] = ",
                   hidden[t * H + c], " is not finite");
    }
  }

  Inputs in{problem, weights, hidden, topk_ids, topk_weights, out,
            options.num_threads > 0 ? options.num_threads : default_num_threads(),
            Perturb{options.fp32_perturbation, options.perturbation_seed}};
  // Per pair: x (W4A4) and o in the largest case, h32 and h; chunk so the buffers stay bounded.
  const int64_t pair_bytes = 12 * H + 12 * I;
  const int64_t chunk_rows = std::max<int64_t>(1, kChunkBytes / (pair_bytes * K));
  for (size_t begin = 0; begin < rows.size(); begin += static_cast<size_t>(chunk_rows)) {
    const int64_t n = std::min<int64_t>(chunk_rows, static_cast<int64_t>(rows.size() - begin));
    run_chunk(in, rows.data() + begin, n);
  }
}

void moe_reference(const MoeProblem& problem, const MoeWeights& weights, std::span<const float> hidden,
                   std::span<const float> router_logits, const float* correction_bias, int64_t tokens,
                   std::span<float> out, const MoeReferenceOptions& options) {
  problem.validate();
  const int64_t E = problem.num_experts, K = problem.top_k;
  FP4MOE_CHECK(tokens >= 0, "MoE reference: negative token count ", tokens);
  FP4MOE_CHECK(static_cast<int64_t>(router_logits.size()) == tokens * E, "MoE reference: router logits have ",
               router_logits.size(), " values, expected tokens (", tokens, ") x experts (", E, ") = ", tokens * E);
  std::vector<int32_t> ids(static_cast<size_t>(tokens * K), 0);
  std::vector<float> topk_weights(static_cast<size_t>(tokens * K), 0.0f);
  // Routing is per token: with token_rows, only those rows are routed (the others keep expert 0,
  // weight 0 and are never read).
  detail::route_rows(problem.routing, router_logits, tokens, correction_bias, options.token_rows, ids, topk_weights);
  moe_reference_routed(problem, weights, hidden, tokens, ids, topk_weights, out, options);
}

}  // namespace fp4moe
