#include "backends/backend_checks.h"

#include "common/error.h"

namespace fp4moe {

std::string cuda_moe_shape_unsupported_reason(const MoeProblem& problem) {
  try {
    problem.validate();
  } catch (const Error& e) {
    return std::string("invalid problem: ") + e.what();
  }
  if (problem.hidden % 128 != 0) return "hidden size " + std::to_string(problem.hidden) + " is not a multiple of 128";
  if (problem.inter % 128 != 0) return "expert intermediate size " + std::to_string(problem.inter) + " is not a multiple of 128";
  if (problem.num_experts > 1024) return "more than 1024 experts (" + std::to_string(problem.num_experts) + ")";
  if (problem.top_k > 32) return "top_k above 32 (" + std::to_string(problem.top_k) + ")";
  if (problem.routing.method == RoutingMethod::kSigmoidGroupedTopk && problem.routing.n_group > 32)
    return "more than 32 expert groups (" + std::to_string(problem.routing.n_group) + ")";
  return {};
}

void check_prepare_arguments(std::string_view backend_id, const MoeProblem& problem, const MoeWeights& weights,
                             int64_t max_tokens) {
  weights.validate();
  FP4MOE_CHECK(weights.num_experts == problem.num_experts && weights.hidden == problem.hidden &&
                   weights.inter == problem.inter,
               backend_id, ": weights are [E=", weights.num_experts, ", H=", weights.hidden, ", I=", weights.inter,
               "] but the problem is ", problem.describe());
  FP4MOE_CHECK(max_tokens >= 1, backend_id, ": max_tokens must be >= 1, got ", max_tokens);
  FP4MOE_CHECK(problem.activation_mode != ActivationMode::kW4A4 || weights.has_input_scales(), backend_id,
               ": W4A4 needs every expert's static activation scales (input_scale); these weights have none (a "
               "W4A16_NVFP4 checkpoint): run it as W4A16");
}

}  // namespace fp4moe
