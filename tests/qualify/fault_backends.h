// Fault-injection backends, compiled only into the tests: each wraps the CPU reference and breaks
// in one of the ways users have met in the field (moe-landscape.md section 5): NaN output, garbage at
// some token counts only, unwritten elements, a crash (abort, segfault), a hang, gate and up swapped
// (the classic silent bug), and a backend that declares itself unsupported. CUDA builds add GPU
// faults (illegal address, a kernel that never ends) in cuda_fault_backends.cu.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/moe_backend.h"

namespace fp4moe::testing {

// Ids of the host fault backends.
std::vector<std::string> host_fault_backend_ids();
// CUDA fault backend ids (empty in CPU-only builds).
std::vector<std::string> cuda_fault_backend_ids();
// Any test backend by id: cpu.reference.v1, the faults, and the real registry's backends.
std::unique_ptr<MoeBackend> make_test_backend(std::string_view id);

}  // namespace fp4moe::testing
