#include "common/device_info.h"

#ifdef FP4MOE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace fp4moe {

// The kernel driver version ("580.159.04"): the first dotted number after "Kernel Module" in
// /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04 ...").
std::string nvidia_kernel_driver_version() {
  std::FILE* f = std::fopen("/proc/driver/nvidia/version", "r");
  if (!f) return "unknown";
  char line[512] = {0};
  const bool got = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  if (!got) return "unknown";
  const std::string text(line);
  const size_t module = text.find("Kernel Module");
  if (module == std::string::npos) return "unknown";
  size_t pos = module;
  while (pos < text.size()) {
    const size_t begin = text.find_first_not_of(" \t\n", pos);
    if (begin == std::string::npos) break;
    const size_t end = std::min(text.find_first_of(" \t\n", begin), text.size());
    const std::string token = text.substr(begin, end - begin);
    if (std::isdigit(static_cast<unsigned char>(token[0])) && token.find('.') != std::string::npos &&
        token.find_first_not_of("0123456789.") == std::string::npos)
      return token;
    pos = end;
  }
  return "unknown";
}


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
    info.kernel_driver = nvidia_kernel_driver_version();
    list.devices.push_back(info);
  }
  if (list.devices.empty()) list.why_none = "cudaGetDeviceProperties failed for every device";
#endif
  return list;
}

}  // namespace fp4moe
