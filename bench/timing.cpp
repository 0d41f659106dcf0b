// CUDA-event timing (bench/timing.h).
#include "bench/timing.h"

#include <cuda_runtime_api.h>

#include "kernels/cuda/common/cuda_check.h"

namespace fp4moe::bench {
namespace {
// Owns the two events of a timed region.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    FP4MOE_CUDA_CHECK(cudaEventCreate(&start));
    FP4MOE_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};
}  // namespace

std::vector<double> time_region_ms(void* stream_ptr, const TimingPlan& plan, const std::function<void()>& region) {
  FP4MOE_CHECK(plan.min_repeats >= 1 && plan.max_repeats >= plan.min_repeats && plan.warmup >= 0,
               "timing plan: need warmup >= 0 and 1 <= min_repeats <= max_repeats");
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  for (int i = 0; i < plan.warmup; ++i) region();
  FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  EventPair events;
  std::vector<double> times;
  double total = 0;
  while (static_cast<int>(times.size()) < plan.max_repeats &&
         (static_cast<int>(times.size()) < plan.min_repeats || total < plan.budget_ms)) {
    FP4MOE_CUDA_CHECK(cudaEventRecord(events.start, stream));
    region();
    FP4MOE_CUDA_CHECK(cudaEventRecord(events.stop, stream));
    FP4MOE_CUDA_CHECK(cudaEventSynchronize(events.stop));
    float ms = 0;
    FP4MOE_CUDA_CHECK(cudaEventElapsedTime(&ms, events.start, events.stop));
    times.push_back(ms);
    total += ms;
  }
  return times;
}

}  // namespace fp4moe::bench
