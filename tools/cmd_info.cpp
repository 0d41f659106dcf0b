// fp4moe info: version, build, CUDA architectures compiled in, GPUs visible.
#include <cstdio>

#include "commands.h"
#include "common/device_info.h"
#include "fp4moe_build_info.h"

namespace fp4moe::cli {

void register_info(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("info", "Show the version, the build and the GPUs this process can see");
  set_action(sub, [] {
    std::printf("fp4moe %s\n", build_info::kVersion);
    std::printf("commit:          %s\n", build_info::kGitCommit);
    std::printf("build type:      %s\n", build_info::kBuildType);
    std::printf("C++ compiler:    %s\n", build_info::kCompiler);
    if (build_info::kCudaArchs[0] != '\0') {
      std::printf("CUDA compiler:   nvcc %s\n", build_info::kCudaCompiler);
      std::printf("CUDA archs:      %s\n", build_info::kCudaArchs);
    } else {
      std::printf("CUDA archs:      none (CPU-only build)\n");
    }
    DeviceList list = query_cuda_devices();
    if (list.devices.empty()) {
      std::printf("GPUs:            none (%s)\n", list.why_none.c_str());
      return 0;
    }
    std::printf("GPUs:            %zu (driver %d.%d, runtime %d.%d)\n", list.devices.size(),
                list.devices[0].driver_version / 1000, list.devices[0].driver_version % 1000 / 10,
                list.devices[0].runtime_version / 1000, list.devices[0].runtime_version % 1000 / 10);
    for (const DeviceInfo& d : list.devices) {
      std::printf("  [%d] %s  SM %d.%d  %d SMs  %.1f GiB  L2 %.0f MiB\n", d.ordinal, d.name.c_str(), d.sm_major,
                  d.sm_minor, d.multiprocessors, d.memory_bytes / 1073741824.0, d.l2_bytes / 1048576.0);
    }
    return 0;
  });
}

}  // namespace fp4moe::cli
