// CUDA fault-injection backends (tests only): a kernel that writes through a wild pointer (illegal
// address: the CUDA context of the process is lost), a kernel that never finishes (hang), and one
// that writes NaN. Qualification must reject each for the right reason and survive.
#include <cuda_runtime.h>

#include <string>
#include <string_view>
#include <vector>

#include "backends/moe_backend.h"
#include "common/error.h"
#include "kernels/cuda/common/cuda_check.h"

namespace fp4moe::testing {
namespace {

__global__ void write_wild_pointer_kernel(int64_t n) {
  // A small non-null address no allocation covers.
  auto* wild = reinterpret_cast<uint16_t*>(static_cast<uintptr_t>(0x1000));
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) wild[i] = 1;
}

__global__ void spin_forever_kernel(volatile int* never_set) {
  while (*never_set == 0) {
  }
}

__global__ void write_nan_kernel(uint16_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = 0x7FC0;
}

enum class CudaFault { kIllegalAddressAt64, kHangAt257, kNan };

class CudaFaultPrepared final : public PreparedMoe {
 public:
  CudaFaultPrepared(CudaFault fault, int64_t hidden, int64_t max_tokens)
      : fault_(fault), hidden_(hidden), max_tokens_(max_tokens) {
    FP4MOE_CUDA_CHECK(cudaMalloc(&flag_, sizeof(int)));
    FP4MOE_CUDA_CHECK(cudaMemset(flag_, 0, sizeof(int)));
  }
  ~CudaFaultPrepared() override { cudaFree(flag_); }
  size_t workspace_bytes() const override { return 0; }
  int64_t max_tokens() const override { return max_tokens_; }
  void run(const MoeRunArgs& args) override {
    auto stream = static_cast<cudaStream_t>(args.stream);
    const int64_t n = args.tokens * hidden_;
    if (fault_ == CudaFault::kIllegalAddressAt64 && args.tokens == 64) {
      write_wild_pointer_kernel<<<1, 256, 0, stream>>>(n);
    } else if (fault_ == CudaFault::kHangAt257 && args.tokens == 257) {
      spin_forever_kernel<<<1, 1, 0, stream>>>(flag_);
    } else {
      write_nan_kernel<<<64, 256, 0, stream>>>(static_cast<uint16_t*>(args.out), n);
    }
    FP4MOE_CUDA_CHECK_LAUNCH();
  }

 private:
  CudaFault fault_;
  int64_t hidden_, max_tokens_;
  int* flag_ = nullptr;
};

class CudaFaultBackend final : public MoeBackend {
 public:
  CudaFaultBackend(std::string_view id, CudaFault fault) : id_(id), fault_(fault) {}
  std::string_view id() const override { return id_; }
  Support supports(const MoeProblem&, const DeviceInfo& device) const override {
    return device.sm() >= 80 ? Support::yes() : Support::no("needs SM80+");
  }
  std::unique_ptr<PreparedMoe> prepare(const MoeProblem& problem, const MoeWeights&, int64_t max_tokens,
                                       const DeviceInfo&) const override {
    return std::make_unique<CudaFaultPrepared>(fault_, problem.hidden, max_tokens);
  }

 private:
  std::string id_;
  CudaFault fault_;
};

}  // namespace

std::unique_ptr<MoeBackend> make_cuda_fault_backend(std::string_view id) {
  // Note: the NaN fault writes every element, but garbage at some token counts only is covered by the
  // host backends; here what matters is the process-level failure modes.
  if (id == "test.fault.cuda_illegal_address.v1") return std::make_unique<CudaFaultBackend>(id, CudaFault::kIllegalAddressAt64);
  if (id == "test.fault.cuda_hang.v1") return std::make_unique<CudaFaultBackend>(id, CudaFault::kHangAt257);
  if (id == "test.fault.cuda_nan.v1") return std::make_unique<CudaFaultBackend>(id, CudaFault::kNan);
  return nullptr;
}

std::vector<std::string> cuda_fault_backend_ids() {
  return {"test.fault.cuda_illegal_address.v1", "test.fault.cuda_hang.v1", "test.fault.cuda_nan.v1"};
}

}  // namespace fp4moe::testing
