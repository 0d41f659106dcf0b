#include "backends/pipeline_parts.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "common/error.h"
#include "common/parallel.h"
#include "kernels/cuda/nvfp4_mma_layout.h"

namespace fp4moe {
namespace {

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

DeviceTensorScales upload_tensor_scales(const MoeWeights& weights) {
  DeviceTensorScales d;
  d.gate_scale2 = DeviceBuffer::from_host(weights.gate_scale2);
  d.up_scale2 = DeviceBuffer::from_host(weights.up_scale2);
  d.down_scale2 = DeviceBuffer::from_host(weights.down_scale2);
  d.w13_input_scale = DeviceBuffer::from_host(weights.w13_input_scale);
  d.w2_input_scale = DeviceBuffer::from_host(weights.w2_input_scale);
  return d;
}

DeviceExpertWeights upload_repacked_expert_weights(const MoeWeights& weights, Nvfp4RepackFn repack) {
  const int64_t E = weights.num_experts, H = weights.hidden, I = weights.inter;
  const size_t w13_bytes = static_cast<size_t>(2 * I * H / 2), w13_sbytes = static_cast<size_t>(2 * I * H / 16);
  const size_t w2_bytes = static_cast<size_t>(H * I / 2), w2_sbytes = static_cast<size_t>(H * I / 16);
  // Not value-initialized: every byte is written by the repack, whose threads then also take the page
  // faults (zero-filling 3.6 GB per Qwen3.5-397B layer on one thread first would cost seconds).
  const auto w13 = std::make_unique_for_overwrite<uint8_t[]>(w13_bytes * E);
  const auto w13s = std::make_unique_for_overwrite<uint8_t[]>(w13_sbytes * E);
  const auto w2 = std::make_unique_for_overwrite<uint8_t[]>(w2_bytes * E);
  const auto w2s = std::make_unique_for_overwrite<uint8_t[]>(w2_sbytes * E);
  const std::vector<int64_t> interleave = gate_up_interleaved_rows(I);
  parallel_for(E, [&](int64_t begin, int64_t end) {
    for (int64_t e = begin; e < end; ++e) {
      const Nvfp4View w13_view{weights.w13_packed.data() + e * w13_bytes, weights.w13_scales.data() + e * w13_sbytes,
                               1.0f, 2 * I, H};
      repack(w13_view, interleave, w13.get() + e * w13_bytes, w13s.get() + e * w13_sbytes);
      repack(weights.down(e), {}, w2.get() + e * w2_bytes, w2s.get() + e * w2_sbytes);
    }
  });
  DeviceExpertWeights d;
  d.w13 = DeviceBuffer::from_host(w13.get(), w13_bytes * E);
  d.w13_scales = DeviceBuffer::from_host(w13s.get(), w13_sbytes * E);
  d.w2 = DeviceBuffer::from_host(w2.get(), w2_bytes * E);
  d.w2_scales = DeviceBuffer::from_host(w2s.get(), w2_sbytes * E);
  static_cast<DeviceTensorScales&>(d) = upload_tensor_scales(weights);
  return d;
}

bool scales_all_positive_normal(const std::vector<uint8_t>& scales, int64_t num_experts, int64_t per_expert) {
  const std::vector<uint8_t> flags = experts_with_positive_normal_scales(scales, num_experts, per_expert);
  return std::all_of(flags.begin(), flags.end(), [](uint8_t f) { return f != 0; });
}

void add_positive_normal_scale_flags(DeviceExpertWeights& device, const MoeWeights& weights) {
  const int64_t E = weights.num_experts, H = weights.hidden, I = weights.inter;
  device.w13_scales_all_normal = scales_all_positive_normal(weights.w13_scales, E, 2 * I * H / 16);
  device.w2_scales_all_normal = scales_all_positive_normal(weights.w2_scales, E, H * I / 16);
}

PipelineWorkspace::PipelineWorkspace(const MoeProblem& problem, int64_t max_tokens, int smallest_tile_m)
    : max_tokens_(max_tokens),
      top_k_(static_cast<int>(problem.top_k)),
      num_experts_(static_cast<int>(problem.num_experts)),
      smallest_tile_m_(smallest_tile_m) {
  const size_t slots = static_cast<size_t>(max_tokens * problem.top_k);
  route_bytes_ = align256(moe_route_workspace_bytes(max_tokens, top_k_, num_experts_, smallest_tile_m));
  out_bytes_ = align256(std::max<size_t>(1, slots * static_cast<size_t>(problem.hidden) * sizeof(float)));
  h_bytes_ = align256(std::max<size_t>(1, slots * static_cast<size_t>(problem.inter) * 2));
}

PipelineWorkspace::Parts PipelineWorkspace::carve(void* workspace) const {
  char* ws = static_cast<char*>(workspace);
  Parts parts;
  parts.route = carve_moe_route_workspace(ws, max_tokens_, top_k_, num_experts_, smallest_tile_m_);
  parts.expert_out = ws + route_bytes_;
  parts.rows = parts.expert_out;
  parts.h = ws + route_bytes_ + out_bytes_;
  return parts;
}

void run_expert_pipeline(std::string_view backend_id, const MoeProblem& problem, int64_t max_tokens,
                         const DeviceExpertWeights& weights, const PipelineWorkspace& workspace,
                         const MoeRunArgs& args, const Gemm1ReadsHidden& gemm1_reads_hidden,
                         const ChooseTileM& choose_tile_m, const LaunchExpertGemm& launch_gemm,
                         const Gemm1RoutesTokens& gemm1_routes_tokens) {
  FP4MOE_CHECK(args.tokens >= 0 && args.tokens <= max_tokens, backend_id, ": tokens ", args.tokens,
               " outside [0, max_tokens=", max_tokens, "]");
  if (args.tokens == 0) return;
  FP4MOE_CHECK(args.hidden && args.router_logits && args.out && args.workspace, backend_id,
               ": hidden, router_logits, out and workspace must be non-null");
  const int64_t T = args.tokens, H = problem.hidden, I = problem.inter;
  const int E = static_cast<int>(problem.num_experts), K = static_cast<int>(problem.top_k);
  const bool w4a4 = problem.activation_mode == ActivationMode::kW4A4;
  auto stream = static_cast<cudaStream_t>(args.stream);
  const PipelineWorkspace::Parts ws = workspace.carve(args.workspace);
  const MTile tile = choose_tile_m(T);
  const PipelineRun run{ws.route, T, tile, stream};

  const bool gemm1_routes = !w4a4 && gemm1_routes_tokens && gemm1_routes_tokens(T, tile);
  if (!gemm1_routes) launch_moe_route_align(problem.routing, args.router_logits, args.correction_bias, ws.route, T, tile, stream);

  ExpertGemm g1;
  if (gemm1_routes) {  // it finds each tile's token rows itself
    g1.a = args.hidden;
    g1.routes_tokens = true;
    g1.router_logits = args.router_logits;
    g1.correction_bias = args.correction_bias;
  } else if (w4a4 || !gemm1_reads_hidden(tile)) {  // W4A4: the rows are quantized with their expert's input scale on the way
    launch_moe_gather(args.hidden, ws.route, T, K, E, H, w4a4 ? weights.w13_input_scale.as<float>() : nullptr,
                      ws.rows, stream);
    g1.a = ws.rows;
  } else {
    g1.a = args.hidden;
    g1.a_slots = ws.route.sorted_slots;
    g1.top_k = K;
  }
  g1.w_packed = weights.w13.as<uint8_t>();
  g1.w_scales = weights.w13_scales.as<uint8_t>();
  g1.scales_all_normal = weights.w13_scales_all_normal;
  g1.n = 2 * I;
  g1.k = H;
  g1.scale_first = weights.gate_scale2.as<float>();
  g1.scale_second = weights.up_scale2.as<float>();
  g1.input_scale = w4a4 ? weights.w13_input_scale.as<float>() : nullptr;
  g1.out_scale = weights.w2_input_scale.as<float>();
  g1.out = ws.h;
  g1.epilogue = w4a4 ? GemmEpilogue::kSwigluNvfp4 : GemmEpilogue::kSwiglu;
  launch_gemm(run, g1);

  ExpertGemm g2;
  g2.a = ws.h;
  g2.w_packed = weights.w2.as<uint8_t>();
  g2.w_scales = weights.w2_scales.as<uint8_t>();
  g2.scales_all_normal = weights.w2_scales_all_normal;
  g2.n = H;
  g2.k = I;
  g2.scale_first = weights.down_scale2.as<float>();
  g2.input_scale = w4a4 ? weights.w2_input_scale.as<float>() : nullptr;
  g2.out = ws.expert_out;
  g2.epilogue = GemmEpilogue::kScaleFp32;
  g2.route_final_at_launch = !gemm1_routes;  // a routing GEMM1 writes the route buffers: no early start
  launch_gemm(run, g2);

  launch_moe_combine(static_cast<const float*>(ws.expert_out), ws.route, T, K, H, args.out, /*route_final_at_launch=*/true, stream);
}

}  // namespace fp4moe
