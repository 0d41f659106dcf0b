// cuda.sm90.prefill.v1 (see cuda_sm90_prefill.h): host side. prepare() validates, repacks the weights
// for the sm_90a GEMM (parallel over experts) and uploads them; run() only launches kernels on the
// caller's stream: no allocation, no host synchronization, CUDA-graph capturable, deterministic.
#include "backends/cuda_sm90_prefill.h"

#include <algorithm>
#include <string>

#include "backends/backend_checks.h"
#include "backends/pipeline_parts.h"
#include "common/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm90a.h"
#include "kernels/cuda/moe_route_permute.h"

namespace fp4moe {
namespace {

constexpr std::string_view kId = "cuda.sm90.prefill.v1";

class PreparedSm90Prefill final : public PreparedMoe {
 public:
  PreparedSm90Prefill(const MoeProblem& problem, const MoeWeights& weights, int64_t max_tokens, const DeviceInfo& device)
      : problem_(problem),
        max_tokens_(max_tokens),
        device_(device.ordinal),
        num_sms_(device.multiprocessors),
        workspace_(problem, max_tokens, kSm90TileM, 0) {
    const int64_t E = problem.num_experts, H = problem.hidden, I = problem.inter, K = problem.top_k;
    FP4MOE_CHECK(moe_max_tiles(max_tokens, static_cast<int>(K), static_cast<int>(E), kSm90TileM) * (std::max(2 * I, H) / kSm90TileN) <
                     (int64_t{1} << 31),
                 "cuda.sm90.prefill: max_tokens ", max_tokens, " is too large for the work-item count");
    FP4MOE_CUDA_CHECK(cudaSetDevice(device_));
    configure_sm90_grouped_gemm_kernels();

    weights_ = upload_repacked_expert_weights(weights, repack_nvfp4_for_sm90);
  }

  size_t workspace_bytes() const override { return workspace_.bytes(); }
  int64_t max_tokens() const override { return max_tokens_; }

  void run(const MoeRunArgs& args) override {
    FP4MOE_CHECK(args.tokens >= 0 && args.tokens <= max_tokens_, "cuda.sm90.prefill: tokens ", args.tokens,
                 " outside [0, max_tokens=", max_tokens_, "]");
    if (args.tokens == 0) return;
    FP4MOE_CHECK(args.hidden && args.router_logits && args.out && args.workspace,
                 "cuda.sm90.prefill: hidden, router_logits, out and workspace must be non-null");
    const int64_t T = args.tokens, H = problem_.hidden, I = problem_.inter;
    const int E = static_cast<int>(problem_.num_experts), K = static_cast<int>(problem_.top_k);
    const bool w4a4 = problem_.activation_mode == ActivationMode::kW4A4;
    auto stream = static_cast<cudaStream_t>(args.stream);
    const PipelineWorkspace::Parts ws = workspace_.carve(args.workspace);
    const MoeRouteBuffers& route = ws.route;

    launch_moe_route(problem_.routing, args.router_logits, args.correction_bias, T, route.topk_ids,
                     route.topk_weights, stream);
    launch_moe_align(route, T, K, E, kSm90TileM, stream);
    launch_moe_gather(args.hidden, route, T, K, E, H, w4a4 ? weights_.w13_input_scale.as<float>() : nullptr, ws.rows,
                      stream);

    Sm90GemmArgs g1;
    g1.a = ws.rows;
    g1.rows = T * K;
    g1.w_packed = weights_.w13.as<uint8_t>();
    g1.w_scales = weights_.w13_scales.as<uint8_t>();
    g1.n = 2 * I;
    g1.k = H;
    g1.scale_first = weights_.gate_scale2.as<float>();
    g1.scale_second = weights_.up_scale2.as<float>();
    g1.input_scale = w4a4 ? weights_.w13_input_scale.as<float>() : nullptr;
    g1.out_scale = weights_.w2_input_scale.as<float>();
    g1.route = route;
    g1.max_tiles = moe_max_tiles(T, K, E, kSm90TileM);
    g1.num_sms = num_sms_;
    g1.out = ws.h;
    launch_grouped_gemm_nvfp4w_bf16_sm90a(g1, w4a4 ? GemmEpilogue::kSwigluNvfp4 : GemmEpilogue::kSwiglu, stream);

    Sm90GemmArgs g2 = g1;
    g2.a = ws.h;
    g2.w_packed = weights_.w2.as<uint8_t>();
    g2.w_scales = weights_.w2_scales.as<uint8_t>();
    g2.n = H;
    g2.k = I;
    g2.scale_first = weights_.down_scale2.as<float>();
    g2.scale_second = nullptr;
    g2.input_scale = w4a4 ? weights_.w2_input_scale.as<float>() : nullptr;
    g2.out = ws.expert_out;
    launch_grouped_gemm_nvfp4w_bf16_sm90a(g2, GemmEpilogue::kScaleFp32, stream);

    launch_moe_combine(static_cast<const float*>(ws.expert_out), route, T, K, H, args.out, stream);
  }

 private:
  MoeProblem problem_;
  int64_t max_tokens_;
  int device_;
  int num_sms_;
  PipelineWorkspace workspace_;
  DeviceExpertWeights weights_;
};

class CudaSm90PrefillBackend final : public MoeBackend {
 public:
  std::string_view id() const override { return kId; }

  Support supports(const MoeProblem& problem, const DeviceInfo& device) const override {
    // sm_90a machine code runs on compute capability 9.0 only (no PTX is embedded).
    if (device.sm() != 90)
      return Support::no("needs SM 9.0 exactly (sm_90a wgmma/TMA code); device is SM" + std::to_string(device.sm()));
    if (device.shared_memory_per_block_optin < static_cast<int64_t>(sm90_grouped_gemm_smem_bytes()))
      return Support::no("needs " + std::to_string(sm90_grouped_gemm_smem_bytes()) +
                         " bytes of shared memory per block; device allows " +
                         std::to_string(device.shared_memory_per_block_optin));
    const std::string why = cuda_moe_shape_unsupported_reason(problem);
    return why.empty() ? Support::yes() : Support::no(why);
  }

  std::unique_ptr<PreparedMoe> prepare(const MoeProblem& problem, const MoeWeights& weights, int64_t max_tokens,
                                       const DeviceInfo& device) const override {
    const Support support = supports(problem, device);
    FP4MOE_CHECK(support.ok, "cuda.sm90.prefill: ", support.reason);
    check_prepare_arguments(kId, problem, weights, max_tokens);
    FP4MOE_CHECK(device.multiprocessors > 0, "cuda.sm90.prefill: device reports no multiprocessors");
    return std::make_unique<PreparedSm90Prefill>(problem, weights, max_tokens, device);
  }
};

}  // namespace

std::unique_ptr<MoeBackend> make_cuda_sm90_prefill_backend() { return std::make_unique<CudaSm90PrefillBackend>(); }

}  // namespace fp4moe
