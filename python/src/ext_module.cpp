// fp4moe._ext: the nanobind extension behind the `fp4moe` Python package (docs/python.md). Arrays
// cross the boundary through DLPack (nanobind ndarray), so building needs no PyTorch; numpy, torch
// (CPU and CUDA), CuPy and any other DLPack producer work. This file: the module, the Error type,
// build and device information, the backend list and CUDA scratch allocation.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "ext_common.h"
#include "ext_moe.h"

#ifdef FP4MOE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace fp4moe::python {
namespace {

nb::dict build_info_dict() {
  nb::dict d;
  d["version"] = build_info::kVersion;
  d["git_commit"] = build_info::kGitCommit;
  d["build_type"] = build_info::kBuildType;
  d["cuda_archs"] = build_info::kCudaArchs;
  d["compiler"] = build_info::kCompiler;
  d["build_id"] = build_id();
#ifdef FP4MOE_WITH_CUDA
  d["cuda"] = true;
#else
  d["cuda"] = false;
#endif
  return d;
}

nb::list devices_list() {
  nb::list out;
  for (const DeviceInfo& dev : query_cuda_devices().devices) {
    nb::dict d;
    d["ordinal"] = dev.ordinal;
    d["name"] = dev.name;
    d["sm"] = dev.sm();
    d["multiprocessors"] = dev.multiprocessors;
    d["memory_bytes"] = dev.memory_bytes;
    d["driver_version"] = dev.driver_version;
    d["runtime_version"] = dev.runtime_version;
    out.append(d);
  }
  return out;
}

std::vector<std::string> backend_ids() {
  std::vector<std::string> ids;
  for (const auto& b : all_moe_backends()) ids.emplace_back(b->id());
  return ids;
}

// Device memory owned by the returned array (freed with cudaFree when Python drops it): outputs and
// workspaces for callers without PyTorch. dtype: "uint8" or "bfloat16".
nb::ndarray<> cuda_empty(const std::vector<int64_t>& shape, const std::string& dtype, int device) {
  size_t count = 1;
  for (int64_t d : shape) {
    FP4MOE_CHECK(d >= 0, "cuda_empty: negative dimension ", d);
    count *= static_cast<size_t>(d);
  }
  nb::dlpack::dtype type;
  if (dtype == "uint8") {
    type = nb::dtype<uint8_t>();
  } else if (dtype == "bfloat16") {
    type = {static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
  } else {
    fail("cuda_empty: dtype must be 'uint8' or 'bfloat16', got '", dtype, "'");
  }
#ifdef FP4MOE_WITH_CUDA
  int previous = 0;
  FP4MOE_CHECK(cudaGetDevice(&previous) == cudaSuccess, "cuda_empty: cannot query the current CUDA device");
  FP4MOE_CHECK(cudaSetDevice(device) == cudaSuccess, "cuda_empty: cannot select CUDA device ", device);
  void* ptr = nullptr;
  const size_t bytes = std::max<size_t>(count * type.bits / 8, 1);
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  cudaSetDevice(previous);
  FP4MOE_CHECK(status == cudaSuccess, "cuda_empty: cudaMalloc of ", bytes, " bytes on device ", device,
               " failed: ", cudaGetErrorString(status));
  nb::capsule owner(ptr, [](void* p) noexcept { cudaFree(p); });
  std::vector<size_t> dims(shape.begin(), shape.end());
  return nb::ndarray<>(ptr, dims.size(), dims.data(), owner, nullptr, type, nb::device::cuda::value, device);
#else
  (void)device;
  (void)count;
  fail("cuda_empty: this extension was built without CUDA");
#endif
}

}  // namespace
}  // namespace fp4moe::python

NB_MODULE(_ext, m) {
  using namespace fp4moe::python;
  m.doc() = "fp4moe C++ extension (nanobind over DLPack); use the fp4moe package, not this module directly.";
  nb::exception<fp4moe::Error>(m, "Error", PyExc_ValueError);
  m.def("build_info", &build_info_dict, "What this build is: version, commit, build type, CUDA archs, build id.");
  m.def("devices", &devices_list, "The CUDA devices this process sees (empty without CUDA or GPU).");
  m.def("why_no_device", [] { return fp4moe::query_cuda_devices().why_none; },
        "Why devices() is empty (empty string when it is not).");
  m.def("backend_ids", &backend_ids, "The CUDA MoE backends of this build, most preferred first.");
  m.def("cuda_empty", &cuda_empty, nb::arg("shape"), nb::arg("dtype"), nb::arg("device"),
        "Uninitialized CUDA memory of `shape` and dtype ('uint8' or 'bfloat16') on `device`, freed "
        "(cudaFree) when the array is dropped.");
  bind_format(m);
  bind_moe(m);
}
