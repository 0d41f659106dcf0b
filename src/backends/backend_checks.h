// Checks shared by the CUDA backends: the shape rules of the SM80-family kernels (routing limits,
// 128-multiples) and the arguments of prepare(), each failing with a message that names the backend.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "format/moe_weights.h"
#include "kernels/moe_problem.h"

namespace fp4moe {

// Why the CUDA MoE kernels cannot run `problem` (invalid problem, H or I not a multiple of 128,
// E > 1024, K > 32, more than 32 expert groups), or empty when they can.
std::string cuda_moe_shape_unsupported_reason(const MoeProblem& problem);

// Throws Error naming `backend_id` when the weights do not match the problem, max_tokens < 1, or W4A4 is
// asked of weights without static activation scales.
void check_prepare_arguments(std::string_view backend_id, const MoeProblem& problem, const MoeWeights& weights,
                             int64_t max_tokens);

}  // namespace fp4moe
