#include "kernels/moe_problem.h"

#include <cmath>

#include "common/error.h"

namespace fp4moe {

void MoeProblem::validate() const {
  FP4MOE_CHECK(hidden > 0 && hidden % 64 == 0 && hidden <= kMaxModelWidth, "MoE problem: hidden size ", hidden,
               " must be a positive multiple of 64 and at most ", kMaxModelWidth);
  FP4MOE_CHECK(inter > 0 && inter % 64 == 0 && inter <= kMaxModelWidth, "MoE problem: expert intermediate size ", inter,
               " must be a positive multiple of 64 and at most ", kMaxModelWidth);
  FP4MOE_CHECK(num_experts >= 1 && num_experts <= kMaxModelExperts, "MoE problem: num_experts ", num_experts,
               " must be in [1, ", kMaxModelExperts, "]");
  FP4MOE_CHECK(top_k >= 1 && top_k <= num_experts && top_k <= 32, "MoE problem: top_k ", top_k,
               " must be in [1, min(32, num_experts=", num_experts, ")]");
  FP4MOE_CHECK(routing.num_experts == num_experts && routing.top_k == top_k, "MoE problem: routing config (E=",
               routing.num_experts, ", K=", routing.top_k, ") disagrees with the problem (E=", num_experts, ", K=",
               top_k, ")");
  if (routing.method == RoutingMethod::kSigmoidGroupedTopk) {
    FP4MOE_CHECK(routing.n_group >= 1 && num_experts % routing.n_group == 0, "MoE problem: n_group ", routing.n_group,
                 " must divide num_experts ", num_experts);
    FP4MOE_CHECK(num_experts / routing.n_group >= 2, "MoE problem: each of the n_group=", routing.n_group,
                 " groups needs at least 2 experts (groups are ranked by their top-2 scores)");
    FP4MOE_CHECK(routing.topk_group >= 1 && routing.topk_group <= routing.n_group, "MoE problem: topk_group ",
                 routing.topk_group, " must be in [1, n_group=", routing.n_group, "]");
    FP4MOE_CHECK(routing.topk_group * (num_experts / routing.n_group) >= top_k, "MoE problem: topk_group=",
                 routing.topk_group, " groups of ", num_experts / routing.n_group, " experts cannot hold top_k=", top_k);
    FP4MOE_CHECK(std::isfinite(routing.routed_scaling_factor) && routing.routed_scaling_factor > 0.0f,
                 "MoE problem: routed_scaling_factor must be finite and > 0, got ", routing.routed_scaling_factor);
  }
}

std::string MoeProblem::describe() const {
  return detail::concat("H=", hidden, " I=", inter, " E=", num_experts, " K=", top_k, " ", to_string(routing.method),
                        " ", to_string(activation_mode));
}

std::string_view to_string(RoutingMethod method) {
  switch (method) {
    case RoutingMethod::kSoftmaxTopk: return "softmax_topk";
    case RoutingMethod::kSoftmaxTopkRenorm: return "softmax_topk_renorm";
    case RoutingMethod::kTopkSoftmax: return "topk_softmax";
    case RoutingMethod::kSigmoidGroupedTopk: return "sigmoid_grouped_topk";
  }
  fail("unknown RoutingMethod value ", static_cast<int>(method));
}

std::string_view to_string(ActivationMode mode) {
  switch (mode) {
    case ActivationMode::kW4A16: return "W4A16";
    case ActivationMode::kW4A4: return "W4A4";
  }
  fail("unknown ActivationMode value ", static_cast<int>(mode));
}

RoutingMethod parse_routing_method(std::string_view name) {
  for (auto method : {RoutingMethod::kSoftmaxTopk, RoutingMethod::kSoftmaxTopkRenorm, RoutingMethod::kTopkSoftmax,
                      RoutingMethod::kSigmoidGroupedTopk}) {
    if (name == to_string(method)) return method;
  }
  fail("unknown routing method '", name,
       "'; valid: softmax_topk, softmax_topk_renorm, topk_softmax, sigmoid_grouped_topk");
}

ActivationMode parse_activation_mode(std::string_view name) {
  if (name == "W4A16" || name == "w4a16") return ActivationMode::kW4A16;
  if (name == "W4A4" || name == "w4a4") return ActivationMode::kW4A4;
  fail("unknown activation mode '", name, "'; valid: W4A16, W4A4");
}

MoeProblem make_moe_problem(int64_t hidden, int64_t inter, int64_t num_experts, int64_t top_k, ActivationMode mode,
                            RoutingMethod method) {
  MoeProblem p;
  p.hidden = hidden;
  p.inter = inter;
  p.num_experts = num_experts;
  p.top_k = top_k;
  p.routing.method = method;
  p.routing.num_experts = static_cast<int>(num_experts);
  p.routing.top_k = static_cast<int>(top_k);
  p.activation_mode = mode;
  return p;
}

MoeProblem moe_problem_for(const ModelConfig& model, ActivationMode mode) {
  MoeProblem p = make_moe_problem(model.hidden, model.moe_inter, model.num_experts, model.top_k, mode,
                                  parse_routing_method(model.routing));
  p.routing.n_group = static_cast<int>(model.n_group);
  p.routing.topk_group = static_cast<int>(model.topk_group);
  p.routing.routed_scaling_factor = static_cast<float>(model.routed_scaling_factor);
  p.validate();
  return p;
}

}  // namespace fp4moe
