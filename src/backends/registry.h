// The backend registry: every MoE backend of this build, in preferred order (architecture.md,
// "Backends"). Qualification and `fp4moe bench` enumerate it; dispatch picks from it.
#pragma once
#include <memory>
#include <string_view>
#include <vector>

#include "backends/moe_backend.h"

namespace fp4moe {

// The serving backends compiled into this build, most preferred first: what qualification tries and
// dispatch chooses from.
std::vector<std::unique_ptr<MoeBackend>> all_moe_backends();
// Library baselines the benchmark compares against (cuBLAS BF16 on dequantized weights). Not
// serving backends: they are not bound by the numerics contract (BF16-rounded weights) and not
// CUDA-graph capturable, so qualification does not try them unless asked by id.
std::vector<std::unique_ptr<MoeBackend>> baseline_moe_backends();
// The serving or baseline backend with this id; throws Error listing the known ids when there is none.
std::unique_ptr<MoeBackend> find_moe_backend(std::string_view id);

}  // namespace fp4moe
