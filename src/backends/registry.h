// The backend registry: every MoE backend of this build, in preferred order (architecture.md,
// "Backends"). Qualification and `fp4moe bench` enumerate it; dispatch picks from it.
#pragma once
#include <memory>
#include <string_view>
#include <vector>

#include "backends/moe_backend.h"

namespace fp4moe {

// All backends compiled into this build, most preferred first.
std::vector<std::unique_ptr<MoeBackend>> all_moe_backends();
// The backend with this id; throws Error listing the known ids when there is none.
std::unique_ptr<MoeBackend> find_moe_backend(std::string_view id);

}  // namespace fp4moe
