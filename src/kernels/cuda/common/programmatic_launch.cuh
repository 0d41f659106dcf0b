// Programmatic dependent launch (SM90+), for kernels that run one after another on a stream: a kernel
// launched with launch_maybe_programmatic may be scheduled while the kernel before it drains (its launch
// latency and CTA ramp overlap the other's tail), and waits in pdl_wait_for_primary() until that kernel
// has completed and its writes are visible. Rule for every kernel launched this way: call
// pdl_wait_for_primary() before its first global-memory access other than constant inputs (weights),
// reads and writes alike (the kernel before may still read what this one overwrites), and
// pdl_trigger_dependents() once the next kernel may be scheduled. Waiting is transitive: the kernel before
// waited for its own predecessor before it could complete. On devices before SM90, and for kernels
// launched without the attribute, both calls are no-ops and launches are ordinary stream launches.
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kernels/cuda/common/cuda_check.h"

namespace fp4moe {

__device__ __forceinline__ void pdl_trigger_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait_for_primary() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The entry of a kernel in a chain of such launches, before any global-memory access and before any
// early return (so that no CTA completes ahead of the kernel before): wait for that kernel, then let the
// next one be scheduled (its CTAs take the SM slots this grid leaves and wait there).
__device__ __forceinline__ void pdl_chain_entry() {
  pdl_wait_for_primary();
  pdl_trigger_dependents();
}

// Whether launches on the current device are programmatic: it has programmatic dependent launch
// (compute capability 9.0 or later; queried once per device) and FP4MOE_PROGRAMMATIC_LAUNCH is not 0
// (a measurement and escape knob: unset or 1 = where available, 0 = never; any other value is an error).
inline bool programmatic_launch_available() {
  static const bool allowed = [] {
    const char* env = std::getenv("FP4MOE_PROGRAMMATIC_LAUNCH");
    if (env == nullptr || std::string_view(env) == "1") return true;
    FP4MOE_CHECK(std::string_view(env) == "0", "FP4MOE_PROGRAMMATIC_LAUNCH must be 0 or 1, got '", env, "'");
    return false;
  }();
  if (!allowed) return false;
  static std::atomic<uint64_t> known{0}, capable{0};
  int device = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= 64) return false;
  const uint64_t bit = uint64_t{1} << device;
  if (!(known.load() & bit)) {
    int major = 0;
    FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    if (major >= 9) capable.fetch_or(bit);
    known.fetch_or(bit);
  }
  return (capable.load() & bit) != 0;
}

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch where the device
// has it. Checks the launch.
template <typename... KernelParams, typename... Args>
void launch_maybe_programmatic(void (*kernel)(KernelParams...), dim3 grid, dim3 block, size_t smem,
                               cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute programmatic{};
  programmatic.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  programmatic.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &programmatic;
  config.numAttrs = programmatic_launch_available() ? 1 : 0;
  FP4MOE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace fp4moe
