// cuda.sm80.fused_decode.v1 (see cuda_sm80_fused_decode.h): host side. prepare() validates, repacks the
// weights (parallel over experts), uploads them and plans the persistent grids; run() only launches.
#include "backends/cuda_sm80_fused_decode.h"

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/backend_checks.h"
#include "backends/pipeline_parts.h"
#include "common/error.h"
#include "common/parallel.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/moe_fused_decode_sm80.h"
#include "kernels/cuda/nvfp4_decode_layout.h"
#include "kernels/cuda/nvfp4_mma_layout.h"

namespace fp4moe {
namespace {

constexpr std::string_view kId = "cuda.sm80.fused_decode.v1";

// The kernels' shape rules plus the fused kernels' own: int16 row and slot indices in shared memory.
std::string unsupported_reason(const MoeProblem& problem) {
  std::string why = cuda_moe_shape_unsupported_reason(problem);
  if (why.empty() && (problem.hidden > 32768 || problem.inter > 32768)) why = "H or I above 32768";
  return why;
}

class PreparedFusedDecode final : public PreparedMoe {
 public:
  PreparedFusedDecode(const MoeProblem& problem, const MoeWeights& weights, int64_t max_tokens, const DeviceInfo& device)
      : problem_(problem), max_tokens_(max_tokens) {
    const int64_t E = problem.num_experts, H = problem.hidden, I = problem.inter;
    FP4MOE_CUDA_CHECK(cudaSetDevice(device.ordinal));
    plan_ = plan_moe_fused_decode(problem, device.multiprocessors);
    const size_t w13_in = static_cast<size_t>(2 * I * H / 2), w13_sin = static_cast<size_t>(2 * I * H / 16);
    const size_t w13_out = static_cast<size_t>(decode_layout_bytes(2 * I, H));
    const size_t w2_out = static_cast<size_t>(decode_layout_bytes(H, I));
    // Not value-initialized: the repack writes every byte (see upload_repacked_expert_weights).
    const auto w13 = std::make_unique_for_overwrite<uint8_t[]>(w13_out * E);
    const auto w2 = std::make_unique_for_overwrite<uint8_t[]>(w2_out * E);
    const std::vector<int64_t> interleave = gate_up_interleaved_rows(I);  // 16-row tiles = [gate 8 | up 8]
    parallel_for(E, [&](int64_t begin, int64_t end) {
      for (int64_t e = begin; e < end; ++e) {
        const Nvfp4View w13_view{weights.w13_packed.data() + e * w13_in, weights.w13_scales.data() + e * w13_sin, 1.0f,
                                 2 * I, H};
        repack_nvfp4_for_decode(w13_view, interleave, w13.get() + e * w13_out);
        repack_nvfp4_for_decode(weights.down(e), {}, w2.get() + e * w2_out);
      }
    });
    w13_ = DeviceBuffer::from_host(w13.get(), w13_out * E);
    w2_ = DeviceBuffer::from_host(w2.get(), w2_out * E);
    scales_ = upload_tensor_scales(weights);
    // The kernels' table-free block scales: only where every expert's scales of the matrix allow them.
    w13_scales_all_normal_ = scales_all_positive_normal(weights.w13_scales, E, 2 * I * H / 16);
    w2_scales_all_normal_ = scales_all_positive_normal(weights.w2_scales, E, H * I / 16);
    workspace_bytes_ = moe_fused_decode_workspace_bytes(problem);
  }

  size_t workspace_bytes() const override { return workspace_bytes_; }
  int64_t max_tokens() const override { return max_tokens_; }

  void run(const MoeRunArgs& args) override {
    FP4MOE_CHECK(args.tokens >= 0 && args.tokens <= max_tokens_, "cuda.sm80.fused_decode: tokens ", args.tokens,
                 " outside [0, max_tokens=", max_tokens_, "]");
    if (args.tokens == 0) return;
    FP4MOE_CHECK(args.hidden && args.router_logits && args.out && args.workspace,
                 "cuda.sm80.fused_decode: hidden, router_logits, out and workspace must be non-null");
    FusedDecodeWeights w;
    w.w13 = w13_.as<uint8_t>();
    w.w2 = w2_.as<uint8_t>();
    w.gate_scale2 = scales_.gate_scale2.as<float>();
    w.up_scale2 = scales_.up_scale2.as<float>();
    w.down_scale2 = scales_.down_scale2.as<float>();
    w.w13_input_scale = scales_.w13_input_scale.as<float>();
    w.w2_input_scale = scales_.w2_input_scale.as<float>();
    w.w13_scales_all_normal = w13_scales_all_normal_;
    w.w2_scales_all_normal = w2_scales_all_normal_;
    FusedDecodeRun r;
    r.hidden = args.hidden;
    r.router_logits = args.router_logits;
    r.correction_bias = args.correction_bias;
    r.tokens = args.tokens;
    r.out = args.out;
    r.workspace = args.workspace;
    launch_moe_fused_decode(problem_, w, plan_, r, static_cast<cudaStream_t>(args.stream));
  }

 private:
  MoeProblem problem_;
  int64_t max_tokens_;
  FusedDecodePlan plan_;
  size_t workspace_bytes_ = 0;
  DeviceBuffer w13_, w2_;
  DeviceTensorScales scales_;
  bool w13_scales_all_normal_ = false, w2_scales_all_normal_ = false;
};

class CudaSm80FusedDecodeBackend final : public MoeBackend {
 public:
  std::string_view id() const override { return kId; }

  Support supports(const MoeProblem& problem, const DeviceInfo& device) const override {
    if (device.sm() < 80)
      return Support::no("needs SM80 or later (mma.sync bf16, cp.async); device is SM" + std::to_string(device.sm()));
    const std::string why = unsupported_reason(problem);
    return why.empty() ? Support::yes() : Support::no(why);
  }

  std::unique_ptr<PreparedMoe> prepare(const MoeProblem& problem, const MoeWeights& weights, int64_t max_tokens,
                                       const DeviceInfo& device) const override {
    const Support support = supports(problem, device);
    FP4MOE_CHECK(support.ok, "cuda.sm80.fused_decode: ", support.reason);
    check_prepare_arguments(kId, problem, weights, max_tokens);
    return std::make_unique<PreparedFusedDecode>(problem, weights, max_tokens, device);
  }

  // Launch 1 shares the routing from fused_decode_route_share_from(problem) tokens per chunk on; one token may take
  // its own launch-1 shape (the early-prime twin, plan.gemm1_one_token_shape), so 2 tokens are another
  // variant; launch 2 takes one of three configurations by the chunk's tokens (fused_decode_launch2_use), and
  // one token may take a fourth (plan.gemm2_one_token; t == 1 is a variant already);
  // batches above kFusedDecodeMaxTokens run as several launch pairs (the last chunk may route per CTA again).
  std::vector<int64_t> variant_token_counts(const MoeProblem& problem, int64_t max_tokens,
                                            const DeviceInfo&) const override {
    const int64_t share_from = fused_decode_route_share_from(problem);
    return first_token_count_of_each_variant(max_tokens, [&](int64_t t) {
      const int64_t chunk = std::min(t, kFusedDecodeMaxTokens);
      return std::tuple<bool, bool, bool, FusedDecodeLaunch2Use>(t > kFusedDecodeMaxTokens, chunk >= share_from, t == 1,
                                                                 fused_decode_launch2_use(chunk));
    });
  }
};

}  // namespace

std::unique_ptr<MoeBackend> make_cuda_sm80_fused_decode_backend() { return std::make_unique<CudaSm80FusedDecodeBackend>(); }

}  // namespace fp4moe
