#include "fault_backends.h"

#include <csignal>
#include <cstdlib>
#include <thread>
#include <vector>
#include <algorithm>

#include "backends/cpu_reference_backend.h"
#include "backends/registry.h"
#include "common/error.h"

namespace fp4moe::testing {

#ifdef FP4MOE_WITH_CUDA
std::unique_ptr<MoeBackend> make_cuda_fault_backend(std::string_view id);  // cuda_fault_backends.cu
#endif

namespace {

enum class Fault { kNan, kGarbageAt33, kUnwrittenRow, kAbortAt16, kSegfaultAt3, kHangAt8, kSwapGateUp, kUnsupported,
                   kSlowButCorrect, kBrokenMiddleVariant };

// kBrokenMiddleVariant: a backend with three kernel variants (like tile shapes picked by batch size),
// T < 40, 40 <= T < 64 and T >= 64, whose middle one is wrong. No standard probe lands in [40, 64)
// for a serving maximum of 64: only the variant probe at T = 40 can catch it.
constexpr int64_t kMiddleVariantFirst = 40, kMiddleVariantEnd = 64;

struct FaultSpec {
  const char* id;
  Fault fault;
};
constexpr FaultSpec kFaults[] = {
    {"test.fault.nan.v1", Fault::kNan},
    {"test.fault.garbage_at_33.v1", Fault::kGarbageAt33},
    {"test.fault.unwritten_row.v1", Fault::kUnwrittenRow},
    {"test.fault.abort_at_16.v1", Fault::kAbortAt16},
    {"test.fault.segfault_at_3.v1", Fault::kSegfaultAt3},
    {"test.fault.hang_at_8.v1", Fault::kHangAt8},
    {"test.fault.swap_gate_up.v1", Fault::kSwapGateUp},
    {"test.fault.unsupported.v1", Fault::kUnsupported},
    {"test.slow_but_correct.v1", Fault::kSlowButCorrect},
    {"test.fault.broken_middle_variant.v1", Fault::kBrokenMiddleVariant},
};

class FaultyPrepared final : public PreparedMoe {
 public:
  FaultyPrepared(std::unique_ptr<PreparedMoe> inner, Fault fault, int64_t hidden)
      : inner_(std::move(inner)), fault_(fault), hidden_(hidden) {}
  size_t workspace_bytes() const override { return inner_->workspace_bytes(); }
  int64_t max_tokens() const override { return inner_->max_tokens(); }
  void run(const MoeRunArgs& args) override {
    if (fault_ == Fault::kAbortAt16 && args.tokens == 16) std::abort();
    if (fault_ == Fault::kSegfaultAt3 && args.tokens == 3) std::raise(SIGSEGV);
    if (fault_ == Fault::kHangAt8 && args.tokens == 8) {
      while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    if (fault_ == Fault::kSlowButCorrect) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (fault_ == Fault::kUnwrittenRow && args.tokens >= 2) {
      // Compute everything, but never store the last token's row (a tail-handling bug).
      std::vector<uint16_t> full(static_cast<size_t>(args.tokens * hidden_));
      MoeRunArgs inner_args = args;
      inner_args.out = full.data();
      inner_->run(inner_args);
      std::copy(full.begin(), full.end() - hidden_, static_cast<uint16_t*>(args.out));
      return;
    }
    inner_->run(args);
    auto* out = static_cast<uint16_t*>(args.out);
    const int64_t n = args.tokens * hidden_;
    if (fault_ == Fault::kNan && n > 0) out[n / 2] = 0x7FC0;  // one NaN is enough to be rejected
    const bool middle_variant = args.tokens >= kMiddleVariantFirst && args.tokens < kMiddleVariantEnd;
    if ((fault_ == Fault::kGarbageAt33 && args.tokens == 33) || (fault_ == Fault::kBrokenMiddleVariant && middle_variant)) {
      for (int64_t i = 0; i < n; i += 7) out[i] ^= 0x0040;  // flip an exponent bit: large, finite errors
    }
  }

 private:
  std::unique_ptr<PreparedMoe> inner_;
  Fault fault_;
  int64_t hidden_;
};

class FaultBackend final : public MoeBackend {
 public:
  FaultBackend(const FaultSpec& spec) : spec_(spec), inner_(make_cpu_reference_backend()) {}
  std::string_view id() const override { return spec_.id; }
  bool runs_on_host() const override { return true; }
  Support supports(const MoeProblem& problem, const DeviceInfo& device) const override {
    if (spec_.fault == Fault::kUnsupported) return Support::no("test fault backend: supports nothing, on purpose");
    return inner_->supports(problem, device);
  }
  std::vector<int64_t> variant_token_counts(const MoeProblem&, int64_t max_tokens, const DeviceInfo&) const override {
    if (spec_.fault != Fault::kBrokenMiddleVariant) return {};
    return first_token_count_of_each_variant(max_tokens, [](int64_t t) {
      return t < kMiddleVariantFirst ? 0 : t < kMiddleVariantEnd ? 1 : 2;
    });
  }
  std::unique_ptr<PreparedMoe> prepare(const MoeProblem& problem, const MoeWeights& weights, int64_t max_tokens,
                                       const DeviceInfo& device) const override {
    if (spec_.fault != Fault::kSwapGateUp) {
      return std::make_unique<FaultyPrepared>(inner_->prepare(problem, weights, max_tokens, device), spec_.fault,
                                              problem.hidden);
    }
    // Load gate and up exchanged, as a loader that assumes the wrong w13 order does.
    MoeWeights swapped = weights;
    const size_t half_packed = static_cast<size_t>(weights.inter * weights.hidden / 2);
    const size_t half_scales = static_cast<size_t>(weights.inter * weights.hidden / 16);
    for (int64_t e = 0; e < weights.num_experts; ++e) {
      uint8_t* p = swapped.w13_packed.data() + 2 * half_packed * static_cast<size_t>(e);
      uint8_t* s = swapped.w13_scales.data() + 2 * half_scales * static_cast<size_t>(e);
      std::swap_ranges(p, p + half_packed, p + half_packed);
      std::swap_ranges(s, s + half_scales, s + half_scales);
    }
    swapped.gate_scale2.swap(swapped.up_scale2);
    return std::make_unique<FaultyPrepared>(inner_->prepare(problem, swapped, max_tokens, device), spec_.fault,
                                            problem.hidden);
  }

 private:
  FaultSpec spec_;
  std::unique_ptr<MoeBackend> inner_;
};

}  // namespace

std::vector<std::string> host_fault_backend_ids() {
  std::vector<std::string> ids;
  for (const FaultSpec& f : kFaults) ids.push_back(f.id);
  return ids;
}

std::unique_ptr<MoeBackend> make_test_backend(std::string_view id) {
  if (id == "cpu.reference.v1") return make_cpu_reference_backend();
  for (const FaultSpec& f : kFaults)
    if (id == f.id) return std::make_unique<FaultBackend>(f);
#ifdef FP4MOE_WITH_CUDA
  if (auto backend = make_cuda_fault_backend(id)) return backend;
#endif
  return find_moe_backend(id);
}

#ifndef FP4MOE_WITH_CUDA
std::vector<std::string> cuda_fault_backend_ids() { return {}; }
#endif

}  // namespace fp4moe::testing
