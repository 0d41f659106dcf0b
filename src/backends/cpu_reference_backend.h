// cpu.reference.v1: the fp64 CPU reference (kernels/cpu/moe_reference.h) behind the MoeBackend
// interface. A host backend (host pointers, no stream), slow by design: it is the oracle, and the
// known-good backend that qualification tests run next to the fault-injection backends. It is not in
// the serving registry (all_moe_backends) because it would never win a timing.
#pragma once
#include <memory>

#include "backends/moe_backend.h"

namespace fp4moe {

std::unique_ptr<MoeBackend> make_cpu_reference_backend();

}  // namespace fp4moe
