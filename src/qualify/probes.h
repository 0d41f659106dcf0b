// Qualification probes (architecture.md, "Qualification and dispatch", step 2): token counts from 1
// to the serving maximum; random, heavy-tailed and adversarial inputs; routing to a single expert,
// to the last expert index, with empty experts; block scales at the E4M3 extremes. Inputs are
// generated deterministically from (problem, probe), so the parent (which computes the reference)
// and the child (which runs the backend) build identical inputs without passing them around.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/moe_weights.h"
#include "kernels/moe_problem.h"

namespace fp4moe {

enum class ProbeInput {
  kRandom,         // hidden ~ N(0,1), router logits ~ N(0, 2^2)
  kHeavyTailed,    // hidden with rare values 30-100x larger (past the W4A4 calibration: saturation)
  kSingleExpert,   // every token picks the same K experts 0..K-1: expert 0 gets every token
  kLastExpert,     // every token picks the last K experts: expert E-1 gets every token
  kEmptyExperts,   // only even experts can win: half the experts get no token
};

enum class ProbeWeights {
  kStandard,       // synthetic weights (format/synthetic.h)
  kExtremeScales,  // the same with 1/8 of the block scales at 448 (0x7E) and 1/8 subnormal (0x01-0x07)
};

struct Probe {
  std::string name;  // "random/T=64"
  int64_t tokens = 0;
  ProbeInput input = ProbeInput::kRandom;
  ProbeWeights weights = ProbeWeights::kStandard;
  uint64_t seed = 0;
};

std::string_view to_string(ProbeInput input);
std::string_view to_string(ProbeWeights weights);
ProbeInput parse_probe_input(std::string_view name);
ProbeWeights parse_probe_weights(std::string_view name);

// The standard probe set for a serving maximum of max_tokens (>= 1), then a random-input probe at each
// of variant_tokens (the backends' kernel-variant switches, QualifyRequest::variant_tokens) that the
// set does not already have. The standard probes keep their seeds whatever variant_tokens holds.
std::vector<Probe> default_probes(int64_t max_tokens, uint64_t seed, const std::vector<int64_t>& variant_tokens = {});

struct ProbeInputs {
  std::vector<uint16_t> hidden_bf16;    // [T, H] BF16 bits
  std::vector<float> hidden;            // the same values as floats (for the reference)
  std::vector<float> router_logits;     // [T, E]
  std::vector<float> correction_bias;   // [E] (sigmoid_grouped_topk; zeros otherwise)
};
ProbeInputs make_probe_inputs(const MoeProblem& problem, const Probe& probe);

// Where qualification takes the expert weights from: seeded synthetic weights of the problem's shape,
// or one MoE layer of a ModelOpt NVFP4 checkpoint (`fp4moe qualify --model DIR --layer N`), so the
// backends are judged on the exact quantized values that will be served.
struct WeightSource {
  uint64_t seed = 1;
  std::string model_dir;  // empty: synthetic
  int64_t layer = 0;      // with model_dir: the layer whose routed experts are loaded
};

// Weights for a probe variant (the extreme-scales variant rewrites block scales of the source's).
MoeWeights make_probe_weights(const MoeProblem& problem, ProbeWeights variant, const WeightSource& source);
// In place: turns a standard weight set into the extreme-scales variant (deterministic).
void apply_extreme_block_scales(MoeWeights& weights);

// Rows of a T-token probe the reference evaluates: all rows up to 256 tokens, else 128 rows spread
// over the batch (first, last and evenly spaced): MoE is per-token independent, and the fp64
// reference for thousands of tokens of a 512-expert layer would dominate qualification time.
std::vector<int64_t> reference_rows(int64_t tokens);

}  // namespace fp4moe
