// cuda.sm80.pipeline.v1 (see cuda_sm80_pipeline.h and docs/pipeline-backend.md): host side. prepare()
// validates, repacks the weights (parallel over experts) and uploads them; run() only launches
// kernels on the caller's stream: no allocation, no host synchronization, CUDA-graph capturable.
#include "backends/cuda_sm80_pipeline.h"

#include <algorithm>
#include <string>
#include <vector>

#include "backends/backend_checks.h"
#include "common/error.h"
#include "common/parallel.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm80.h"
#include "kernels/cuda/moe_route_permute.h"
#include "kernels/cuda/nvfp4_mma_layout.h"

namespace fp4moe {
namespace {

constexpr std::string_view kId = "cuda.sm80.pipeline.v1";
constexpr int kSmallestTileM = 16;

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

class PreparedSm80Pipeline final : public PreparedMoe {
 public:
  PreparedSm80Pipeline(const MoeProblem& problem, const MoeWeights& weights, int64_t max_tokens, const DeviceInfo& device)
      : problem_(problem), max_tokens_(max_tokens), device_(device.ordinal) {
    const int64_t E = problem.num_experts, H = problem.hidden, I = problem.inter, K = problem.top_k;
    large_tile_ok_ = device.shared_memory_per_block_optin >= static_cast<int64_t>(grouped_gemm_smem_bytes(128));
    FP4MOE_CHECK(moe_max_tiles(max_tokens, static_cast<int>(K), static_cast<int>(E), kSmallestTileM) < 65536,
                 "cuda.sm80.pipeline: max_tokens ", max_tokens, " is too large for the M-tile grid");
    FP4MOE_CUDA_CHECK(cudaSetDevice(device_));
    configure_grouped_gemm_kernels();

    // Repack (host, parallel over experts), then upload.
    const size_t w13_bytes = static_cast<size_t>(2 * I * H / 2), w13_sbytes = static_cast<size_t>(2 * I * H / 16);
    const size_t w2_bytes = static_cast<size_t>(H * I / 2), w2_sbytes = static_cast<size_t>(H * I / 16);
    std::vector<uint8_t> w13(w13_bytes * E), w13s(w13_sbytes * E), w2(w2_bytes * E), w2s(w2_sbytes * E);
    const std::vector<int64_t> interleave = gate_up_interleaved_rows(I);
    parallel_for(E, [&](int64_t begin, int64_t end) {
      for (int64_t e = begin; e < end; ++e) {
        Nvfp4View w13_view{weights.w13_packed.data() + e * w13_bytes, weights.w13_scales.data() + e * w13_sbytes,
                           1.0f, 2 * I, H};
        repack_nvfp4_for_mma(w13_view, interleave, w13.data() + e * w13_bytes, w13s.data() + e * w13_sbytes);
        repack_nvfp4_for_mma(weights.down(e), {}, w2.data() + e * w2_bytes, w2s.data() + e * w2_sbytes);
      }
    });
    w13_ = DeviceBuffer::from_host(w13);
    w13_scales_ = DeviceBuffer::from_host(w13s);
    w2_ = DeviceBuffer::from_host(w2);
    w2_scales_ = DeviceBuffer::from_host(w2s);
    gate_scale2_ = DeviceBuffer::from_host(weights.gate_scale2);
    up_scale2_ = DeviceBuffer::from_host(weights.up_scale2);
    down_scale2_ = DeviceBuffer::from_host(weights.down_scale2);
    w13_input_scale_ = DeviceBuffer::from_host(weights.w13_input_scale);
    w2_input_scale_ = DeviceBuffer::from_host(weights.w2_input_scale);

    // Workspace: route buffers | expert outputs fp32 [T*K, H] (its first half doubles as the gathered
    // BF16 rows, dead once GEMM1 has run) | h BF16 [T*K, I] | split-K partials (decode).
    const size_t slots = static_cast<size_t>(max_tokens * K);
    route_bytes_ = align256(moe_route_workspace_bytes(max_tokens, static_cast<int>(K), static_cast<int>(E), kSmallestTileM));
    out_bytes_ = align256(std::max<size_t>(1, slots * H * sizeof(float)));
    h_bytes_ = align256(std::max<size_t>(1, slots * I * 2));
    split_bytes_ = align256(grouped_gemm_split_workspace_bytes(std::max(2 * I, H)));
  }

  size_t workspace_bytes() const override { return route_bytes_ + out_bytes_ + h_bytes_ + split_bytes_; }
  int64_t max_tokens() const override { return max_tokens_; }

  void run(const MoeRunArgs& args) override {
    FP4MOE_CHECK(args.tokens >= 0 && args.tokens <= max_tokens_, "cuda.sm80.pipeline: tokens ", args.tokens,
                 " outside [0, max_tokens=", max_tokens_, "]");
    if (args.tokens == 0) return;
    FP4MOE_CHECK(args.hidden && args.router_logits && args.out && args.workspace,
                 "cuda.sm80.pipeline: hidden, router_logits, out and workspace must be non-null");
    const int64_t T = args.tokens, H = problem_.hidden, I = problem_.inter;
    const int E = static_cast<int>(problem_.num_experts), K = static_cast<int>(problem_.top_k);
    const bool w4a4 = problem_.activation_mode == ActivationMode::kW4A4;
    auto stream = static_cast<cudaStream_t>(args.stream);
    char* ws = static_cast<char*>(args.workspace);
    const MoeRouteBuffers route = carve_moe_route_workspace(ws, max_tokens_, K, E, kSmallestTileM);
    void* expert_out = ws + route_bytes_;
    void* rows = expert_out;
    void* h = ws + route_bytes_ + out_bytes_;
    float* split = reinterpret_cast<float*>(ws + route_bytes_ + out_bytes_ + h_bytes_);
    const int tile_m = sm80_pipeline_tile_m(T, K, E, large_tile_ok_);

    launch_moe_route(problem_.routing, args.router_logits, args.correction_bias, T, route.topk_ids,
                     route.topk_weights, stream);
    launch_moe_align(route, T, K, E, tile_m, stream);
    launch_moe_gather(args.hidden, route, T, K, E, H, w4a4 ? w13_input_scale_.as<float>() : nullptr, rows, stream);

    GroupedGemmArgs g1;
    g1.a = rows;
    g1.w_packed = w13_.as<uint8_t>();
    g1.w_scales = w13_scales_.as<uint8_t>();
    g1.n = 2 * I;
    g1.k = H;
    g1.scale_first = gate_scale2_.as<float>();
    g1.scale_second = up_scale2_.as<float>();
    g1.input_scale = w4a4 ? w13_input_scale_.as<float>() : nullptr;
    g1.out_scale = w2_input_scale_.as<float>();
    g1.route = route;
    g1.num_experts = E;
    g1.max_tiles = moe_max_tiles(T, K, E, tile_m);
    g1.rows = T * K;
    g1.split_workspace = split;
    g1.out = h;
    launch_grouped_gemm_nvfp4w_bf16(g1, w4a4 ? GemmEpilogue::kSwigluNvfp4 : GemmEpilogue::kSwiglu, tile_m, stream);

    GroupedGemmArgs g2 = g1;
    g2.a = h;
    g2.w_packed = w2_.as<uint8_t>();
    g2.w_scales = w2_scales_.as<uint8_t>();
    g2.n = H;
    g2.k = I;
    g2.scale_first = down_scale2_.as<float>();
    g2.scale_second = nullptr;
    g2.input_scale = w4a4 ? w2_input_scale_.as<float>() : nullptr;
    g2.out = expert_out;
    launch_grouped_gemm_nvfp4w_bf16(g2, GemmEpilogue::kScaleFp32, tile_m, stream);

    launch_moe_combine(static_cast<const float*>(expert_out), route, T, K, H, args.out, stream);
  }

 private:
  MoeProblem problem_;
  int64_t max_tokens_;
  int device_;
  bool large_tile_ok_ = false;
  DeviceBuffer w13_, w13_scales_, w2_, w2_scales_;
  DeviceBuffer gate_scale2_, up_scale2_, down_scale2_, w13_input_scale_, w2_input_scale_;
  size_t route_bytes_ = 0, out_bytes_ = 0, h_bytes_ = 0, split_bytes_ = 0;
};

class CudaSm80PipelineBackend final : public MoeBackend {
 public:
  std::string_view id() const override { return kId; }

  Support supports(const MoeProblem& problem, const DeviceInfo& device) const override {
    if (device.sm() < 80)
      return Support::no("needs SM80 or later (mma.sync bf16, cp.async); device is SM" + std::to_string(device.sm()));
    const std::string why = cuda_moe_shape_unsupported_reason(problem);
    return why.empty() ? Support::yes() : Support::no(why);
  }

  std::unique_ptr<PreparedMoe> prepare(const MoeProblem& problem, const MoeWeights& weights, int64_t max_tokens,
                                       const DeviceInfo& device) const override {
    const Support support = supports(problem, device);
    FP4MOE_CHECK(support.ok, "cuda.sm80.pipeline: ", support.reason);
    check_prepare_arguments(kId, problem, weights, max_tokens);
    return std::make_unique<PreparedSm80Pipeline>(problem, weights, max_tokens, device);
  }
};

}  // namespace

int sm80_pipeline_tile_m(int64_t tokens, int64_t top_k, int64_t num_experts, bool large_tile_ok) {
  // Every expert has at most `tokens` rows, so up to 16 tokens one 16-row tile per expert suffices;
  // beyond, the mean rows per expert picks the tile (memory-bound below ~16, MMA-bound above ~48).
  if (tokens <= 16) return 16;
  const double mean_rows = static_cast<double>(tokens * top_k) / static_cast<double>(num_experts);
  if (mean_rows <= 16.0) return 16;
  if (mean_rows <= 48.0 || !large_tile_ok) return 64;
  return 128;
}

std::unique_ptr<MoeBackend> make_cuda_sm80_pipeline_backend() { return std::make_unique<CudaSm80PipelineBackend>(); }

}  // namespace fp4moe
