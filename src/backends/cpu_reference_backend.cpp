#include "backends/cpu_reference_backend.h"

#include <vector>

#include "common/error.h"
#include "format/bf16.h"
#include "kernels/cpu/moe_reference.h"

namespace fp4moe {
namespace {

class PreparedCpuReference final : public PreparedMoe {
 public:
  PreparedCpuReference(const MoeProblem& problem, const MoeWeights& weights, int64_t max_tokens)
      : problem_(problem), weights_(weights), max_tokens_(max_tokens) {}
  size_t workspace_bytes() const override { return 0; }
  int64_t max_tokens() const override { return max_tokens_; }
  void run(const MoeRunArgs& args) override {
    FP4MOE_CHECK(args.tokens >= 0 && args.tokens <= max_tokens_, "cpu.reference: ", args.tokens,
                 " tokens is outside [0, max_tokens=", max_tokens_, "]");
    FP4MOE_CHECK(args.tokens == 0 || (args.hidden && args.router_logits && args.out),
                 "cpu.reference: null hidden, router_logits or out");
    const int64_t T = args.tokens, H = problem_.hidden, E = problem_.num_experts;
    const auto* hidden_bits = static_cast<const uint16_t*>(args.hidden);
    std::vector<float> hidden(static_cast<size_t>(T * H)), out(static_cast<size_t>(T * H));
    for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = bf16_to_float(hidden_bits[i]);
    moe_reference(problem_, weights_, hidden, {args.router_logits, static_cast<size_t>(T * E)}, args.correction_bias, T,
                  out);
    auto* out_bits = static_cast<uint16_t*>(args.out);
    for (size_t i = 0; i < out.size(); ++i) out_bits[i] = float_to_bf16(out[i]);
  }

 protected:
  MoeProblem problem_;
  MoeWeights weights_;
  int64_t max_tokens_;
};

class CpuReferenceBackend final : public MoeBackend {
 public:
  std::string_view id() const override { return "cpu.reference.v1"; }
  bool runs_on_host() const override { return true; }
  Support supports(const MoeProblem& problem, const DeviceInfo&) const override {
    problem.validate();
    return Support::yes();
  }
  std::unique_ptr<PreparedMoe> prepare(const MoeProblem& problem, const MoeWeights& weights, int64_t max_tokens,
                                       const DeviceInfo&) const override {
    problem.validate();
    weights.validate();
    FP4MOE_CHECK(weights.num_experts == problem.num_experts && weights.hidden == problem.hidden &&
                     weights.inter == problem.inter,
                 "cpu.reference: weights [E=", weights.num_experts, ", H=", weights.hidden, ", I=", weights.inter,
                 "] do not match the problem ", problem.describe());
    return std::make_unique<PreparedCpuReference>(problem, weights, max_tokens);
  }
};

}  // namespace

std::unique_ptr<MoeBackend> make_cpu_reference_backend() { return std::make_unique<CpuReferenceBackend>(); }

}  // namespace fp4moe
