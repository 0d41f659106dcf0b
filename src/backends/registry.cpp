#include "backends/registry.h"

#include <string>

#include "common/error.h"

namespace fp4moe {

#ifdef FP4MOE_WITH_CUDA
// Factories of the CUDA backends (each defined next to its backend).
// (added by the backends as they land)
std::unique_ptr<MoeBackend> make_cublas_bf16_baseline_backend();  // backends/cublas_bf16_baseline.h
std::unique_ptr<MoeBackend> make_cuda_sm80_pipeline_backend();     // backends/cuda_sm80_pipeline.h
std::unique_ptr<MoeBackend> make_cuda_sm80_fused_decode_backend();  // backends/cuda_sm80_fused_decode.h
#ifdef FP4MOE_HAVE_SM90A
std::unique_ptr<MoeBackend> make_cuda_sm90_prefill_backend();      // backends/cuda_sm90_prefill.h
#endif
#endif

std::vector<std::unique_ptr<MoeBackend>> all_moe_backends() {
  std::vector<std::unique_ptr<MoeBackend>> backends;
#ifdef FP4MOE_WITH_CUDA
  backends.push_back(make_cuda_sm80_pipeline_backend());
  backends.push_back(make_cuda_sm80_fused_decode_backend());
#ifdef FP4MOE_HAVE_SM90A
  backends.push_back(make_cuda_sm90_prefill_backend());
#endif
#endif
  return backends;
}

std::vector<std::unique_ptr<MoeBackend>> baseline_moe_backends() {
  std::vector<std::unique_ptr<MoeBackend>> backends;
#ifdef FP4MOE_WITH_CUDA
  backends.push_back(make_cublas_bf16_baseline_backend());
#endif
  return backends;
}

std::unique_ptr<MoeBackend> find_moe_backend(std::string_view id) {
  auto all = all_moe_backends();
  auto baselines = baseline_moe_backends();
  std::string known;
  for (auto* list : {&all, &baselines}) {
    for (auto& backend : *list) {
      if (backend->id() == id) return std::move(backend);
      known += (known.empty() ? "" : ", ") + std::string(backend->id());
    }
  }
  fail("unknown MoE backend '", id, "'; this build has: ", known.empty() ? "none (CPU-only build)" : known);
}

}  // namespace fp4moe
