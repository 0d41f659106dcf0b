#include "qualify/probes.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/rng.h"
#include "format/bf16.h"
#include "format/synthetic.h"
#include "io/moe_loader.h"

namespace fp4moe {

std::string_view to_string(ProbeInput input) {
  switch (input) {
    case ProbeInput::kRandom: return "random";
    case ProbeInput::kHeavyTailed: return "heavy_tailed";
    case ProbeInput::kSingleExpert: return "single_expert";
    case ProbeInput::kLastExpert: return "last_expert";
    case ProbeInput::kEmptyExperts: return "empty_experts";
  }
  fail("unknown ProbeInput ", static_cast<int>(input));
}

std::string_view to_string(ProbeWeights weights) {
  switch (weights) {
    case ProbeWeights::kStandard: return "standard";
    case ProbeWeights::kExtremeScales: return "extreme_scales";
  }
  fail("unknown ProbeWeights ", static_cast<int>(weights));
}

ProbeInput parse_probe_input(std::string_view name) {
  for (auto v : {ProbeInput::kRandom, ProbeInput::kHeavyTailed, ProbeInput::kSingleExpert, ProbeInput::kLastExpert,
                 ProbeInput::kEmptyExperts})
    if (to_string(v) == name) return v;
  fail("unknown probe input kind '", name, "'");
}

ProbeWeights parse_probe_weights(std::string_view name) {
  for (auto v : {ProbeWeights::kStandard, ProbeWeights::kExtremeScales})
    if (to_string(v) == name) return v;
  fail("unknown probe weights kind '", name, "'");
}

std::vector<Probe> default_probes(int64_t max_tokens, uint64_t seed, const std::vector<int64_t>& variant_tokens) {
  FP4MOE_CHECK(max_tokens >= 1, "qualification: the serving maximum must be >= 1 token, got ", max_tokens);
  std::vector<Probe> probes;
  auto add = [&](ProbeInput input, ProbeWeights weights, int64_t tokens) {
    tokens = std::min(tokens, max_tokens);
    for (const Probe& p : probes)
      if (p.input == input && p.weights == weights && p.tokens == tokens) return;  // clamped duplicate
    Probe p;
    p.tokens = tokens;
    p.input = input;
    p.weights = weights;
    p.seed = seed * 1000003 + probes.size();
    p.name = detail::concat(to_string(input), weights == ProbeWeights::kStandard ? "" : "+extreme_scales", "/T=", tokens);
    probes.push_back(p);
  };
  // Token counts from 1 to the maximum: small (decode paths), odd (tails of tiles), large (prefill).
  for (int64_t t : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{8}, int64_t{16}, int64_t{33}, int64_t{64},
                    int64_t{257}, int64_t{1024}, max_tokens})
    add(ProbeInput::kRandom, ProbeWeights::kStandard, t);
  add(ProbeInput::kHeavyTailed, ProbeWeights::kStandard, 17);
  add(ProbeInput::kHeavyTailed, ProbeWeights::kStandard, 300);
  for (int64_t t : {int64_t{1}, int64_t{64}, int64_t{513}}) {
    add(ProbeInput::kSingleExpert, ProbeWeights::kStandard, t);
    add(ProbeInput::kLastExpert, ProbeWeights::kStandard, t);
  }
  add(ProbeInput::kEmptyExperts, ProbeWeights::kStandard, 5);
  add(ProbeInput::kEmptyExperts, ProbeWeights::kStandard, 200);
  add(ProbeInput::kRandom, ProbeWeights::kExtremeScales, 1);
  add(ProbeInput::kRandom, ProbeWeights::kExtremeScales, 64);
  add(ProbeInput::kHeavyTailed, ProbeWeights::kExtremeScales, 100);
  for (int64_t t : variant_tokens) {
    FP4MOE_CHECK(t >= 1 && t <= max_tokens, "qualification: variant token count ", t, " outside [1, ", max_tokens, "]");
    add(ProbeInput::kRandom, ProbeWeights::kStandard, t);
  }
  return probes;
}

ProbeInputs make_probe_inputs(const MoeProblem& problem, const Probe& probe) {
  problem.validate();
  FP4MOE_CHECK(probe.tokens >= 0, "probe ", probe.name, ": negative token count");
  const int64_t T = probe.tokens, H = problem.hidden, E = problem.num_experts, K = problem.top_k;
  ProbeInputs in;
  in.hidden.resize(static_cast<size_t>(T * H));
  in.hidden_bf16.resize(in.hidden.size());
  in.router_logits.resize(static_cast<size_t>(T * E));
  in.correction_bias.assign(static_cast<size_t>(E), 0.0f);
  Rng rng(probe.seed ^ 0x5151);
  for (size_t i = 0; i < in.hidden.size(); ++i) {
    double v = rng.normal_fast();
    if (probe.input == ProbeInput::kHeavyTailed && rng.uniform() < 0.002) v *= rng.uniform(30.0, 100.0);
    const uint16_t bits = float_to_bf16(static_cast<float>(v));
    in.hidden_bf16[i] = bits;
    in.hidden[i] = bf16_to_float(bits);
  }
  const bool sigmoid = problem.routing.method == RoutingMethod::kSigmoidGroupedTopk;
  if (sigmoid) {
    for (float& b : in.correction_bias) b = static_cast<float>(rng.uniform(-0.05, 0.05));
  }
  for (int64_t t = 0; t < T; ++t) {
    float* row = in.router_logits.data() + t * E;
    for (int64_t e = 0; e < E; ++e) row[e] = static_cast<float>(2.0 * rng.normal_fast());
    switch (probe.input) {
      case ProbeInput::kRandom:
      case ProbeInput::kHeavyTailed: break;
      case ProbeInput::kSingleExpert:
        // Experts 0..K-1 win for every token (expert 0 first); for grouped routing they sit in group 0..
        for (int64_t k = 0; k < K; ++k) row[k] = 12.0f - 0.5f * static_cast<float>(k);
        break;
      case ProbeInput::kLastExpert:
        for (int64_t k = 0; k < K; ++k) row[E - 1 - k] = 12.0f - 0.5f * static_cast<float>(k);
        break;
      case ProbeInput::kEmptyExperts:
        for (int64_t e = 1; e < E; e += 2) row[e] = -30.0f;
        break;
    }
  }
  return in;
}

void apply_extreme_block_scales(MoeWeights& w) {
  // Deterministic pattern over block index: 1/8 of blocks at the E4M3 maximum 448, 1/8 at subnormal
  // codes 0x01..0x07 (2^-9 .. 7 * 2^-9). Decoders that widen E4M3 by bit shifts without handling
  // subnormals (vLLM #34694) fail here.
  auto rewrite = [](std::vector<uint8_t>& scales) {
    for (size_t i = 0; i < scales.size(); ++i) {
      const uint64_t h = (i * 0x9E3779B97F4A7C15ull) >> 58;  // 6 pseudo-random bits
      if (h % 8 == 0) scales[i] = 0x7E;
      else if (h % 8 == 1) scales[i] = static_cast<uint8_t>(1 + (h / 8) % 7);
    }
  };
  rewrite(w.w13_scales);
  rewrite(w.w2_scales);
}

MoeWeights make_probe_weights(const MoeProblem& problem, ProbeWeights variant, const WeightSource& source) {
  MoeWeights w;
  if (source.model_dir.empty()) {
    w = synthetic_moe_weights(problem.num_experts, problem.hidden, problem.inter, source.seed);
  } else {
    w = open_nvfp4_checkpoint(source.model_dir).load_moe_layer(source.layer);
    FP4MOE_CHECK(w.num_experts == problem.num_experts && w.hidden == problem.hidden && w.inter == problem.inter,
                 source.model_dir, " layer ", source.layer, ": experts [E=", w.num_experts, ", H=", w.hidden, ", I=",
                 w.inter, "] do not match the problem ", problem.describe());
  }
  if (variant == ProbeWeights::kExtremeScales) apply_extreme_block_scales(w);
  return w;
}

std::vector<int64_t> reference_rows(int64_t tokens) {
  std::vector<int64_t> rows;
  if (tokens <= 256) {
    for (int64_t t = 0; t < tokens; ++t) rows.push_back(t);
    return rows;
  }
  const int64_t count = 128;
  for (int64_t i = 0; i < count; ++i) rows.push_back(i * (tokens - 1) / (count - 1));
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

}  // namespace fp4moe
