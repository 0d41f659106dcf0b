#include "common/device_info.h"

#ifdef FP4MOE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace fp4moe {

DeviceList query_cuda_devices() {
  DeviceList list;
#ifndef FP4MOE_WITH_CUDA
  list.why_none = "this fp4moe build has no CUDA support (configured with FP4MOE_CUDA=OFF or without nvcc)";
#else
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    list.why_none = std::string("no usable CUDA device: ") + cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return list;
  }
  if (count == 0) {
    list.why_none = "the CUDA driver reports no GPU";
    return list;
  }
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    DeviceInfo info;
    info.ordinal = i;
    info.name = prop.name;
    info.sm_major = prop.major;
    info.sm_minor = prop.minor;
    info.multiprocessors = prop.multiProcessorCount;
    info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    info.l2_bytes = prop.l2CacheSize;
    info.shared_memory_per_block_optin = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
    info.driver_version = driver;
    info.runtime_version = runtime;
    list.devices.push_back(info);
  }
  if (list.devices.empty()) list.why_none = "cudaGetDeviceProperties failed for every device";
#endif
  return list;
}

}  // namespace fp4moe
