// MoeProblem: what one MoE layer computes (architecture.md, "The MoE operation"). Shared by the CPU
// reference and the CUDA kernels; backends and qualification key on it.
//
// Inputs: hidden states [T, H] BF16, router logits [T, E] fp32, optional correction bias [E] fp32
// (sigmoid_grouped_topk only), the expert weights (format/moe_weights.h). Output [T, H] BF16.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "io/presets.h"

namespace fp4moe {

enum class RoutingMethod {
  kSoftmaxTopk,         // softmax over all E, top-k, weights = the k probabilities (no renormalization)
  kSoftmaxTopkRenorm,   // same, then divide by their sum (Qwen3, Qwen3.5: norm_topk_prob)
  kTopkSoftmax,         // top-k on logits, softmax over the k selected (Mixtral order)
  kSigmoidGroupedTopk,  // DeepSeek-V3: sigmoid, +bias for selection only, group top-k, renorm, scale
};

enum class ActivationMode {
  kW4A16,  // BF16 activations; GEMM1 output after SwiGLU rounded to BF16
  kW4A4,   // activations quantized to NVFP4 with the static input scales (emulated exactly on SM80/90)
};

struct RoutingConfig {
  RoutingMethod method = RoutingMethod::kSoftmaxTopkRenorm;
  int num_experts = 0;
  int top_k = 0;
  // kSigmoidGroupedTopk only:
  int n_group = 1;                     // experts split into n_group equal groups
  int topk_group = 1;                  // groups kept (ranked by the sum of their top-2 biased scores)
  float routed_scaling_factor = 1.0f;  // multiplies the final weights
  bool renormalize = true;             // divide the selected sigmoid scores by their sum (+1e-20)
};

struct MoeProblem {
  int64_t hidden = 0;       // H
  int64_t inter = 0;        // I, per expert
  int64_t num_experts = 0;  // E
  int64_t top_k = 0;        // K
  RoutingConfig routing;
  ActivationMode activation_mode = ActivationMode::kW4A16;

  // Throws Error naming the field for any inconsistent or absurd value.
  void validate() const;
  std::string describe() const;  // "H=4096 I=1024 E=512 K=10 softmax_topk_renorm W4A16"
};

std::string_view to_string(RoutingMethod method);
std::string_view to_string(ActivationMode mode);
RoutingMethod parse_routing_method(std::string_view name);  // throws Error listing the valid names
ActivationMode parse_activation_mode(std::string_view name);

// A problem of this shape with the routing's expert count and top-k filled in from it (the two must
// agree); the group settings of kSigmoidGroupedTopk keep their defaults. Not validated, so that
// callers (and tests) can still build and check bad ones.
MoeProblem make_moe_problem(int64_t hidden, int64_t inter, int64_t num_experts, int64_t top_k,
                            ActivationMode mode = ActivationMode::kW4A16,
                            RoutingMethod method = RoutingMethod::kSoftmaxTopkRenorm);

// The MoE problem of a model's routed experts (validated).
MoeProblem moe_problem_for(const ModelConfig& model, ActivationMode mode);

}  // namespace fp4moe
