// DeviceInfo: the CUDA GPUs this process can see. Works in CPU-only builds too (it then reports that
// the build has no CUDA), so `fp4moe info` and qualification can say why nothing runs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fp4moe {

struct DeviceInfo {
  int ordinal = -1;
  std::string name;
  int sm_major = 0;
  int sm_minor = 0;
  int multiprocessors = 0;
  int64_t memory_bytes = 0;
  int64_t l2_bytes = 0;
  int64_t shared_memory_per_block_optin = 0;
  int driver_version = 0;   // e.g. 13000
  int runtime_version = 0;  // e.g. 13000
  std::string kernel_driver;  // the NVIDIA kernel driver release, e.g. "580.159.04" ("unknown" if unreadable)
  int sm() const { return sm_major * 10 + sm_minor; }
};

struct DeviceList {
  std::vector<DeviceInfo> devices;
  std::string why_none;  // set when devices is empty: no CUDA in this build, no driver, no GPU, ...
};

// The NVIDIA kernel driver release from /proc/driver/nvidia/version ("580.159.04"), or "unknown".
std::string nvidia_kernel_driver_version();

// Never throws; a missing driver or GPU is reported in why_none.
DeviceList query_cuda_devices();

}  // namespace fp4moe
