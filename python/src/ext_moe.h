// Declarations shared by the extension's translation units (see ext_moe.cpp).
#pragma once
#include <cstdint>
#include <string>

#include "common/device_info.h"
#include "ext_common.h"
#include "fp4moe_build_info.h"
#include "kernels/moe_problem.h"
#include "qualify/verdict.h"

namespace fp4moe::python {

// The problem fields Python passes (names as kernels/moe_problem.h's to_string gives them).
struct ProblemArgs {
  int64_t hidden = 0;
  int64_t inter = 0;
  int64_t num_experts = 0;
  int64_t top_k = 0;
  std::string routing = "softmax_topk_renorm";
  std::string activation = "W4A16";
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
};

// Validated MoeProblem (throws Error naming the bad field).
MoeProblem make_problem(const ProblemArgs& args);
// The build id the verdict key carries (qualify/verdict.h this_build_id(), the
// extension and the bundled fp4moe executable come from one CMake build, so their keys match).
std::string build_id();
// The CUDA device with this ordinal; throws Error saying why there is none.
DeviceInfo find_device(int ordinal);
VerdictKey verdict_key(const MoeProblem& problem, const DeviceInfo& device, int64_t max_tokens);

void bind_format(nb::module_& m);
void bind_moe(nb::module_& m);

}  // namespace fp4moe::python
