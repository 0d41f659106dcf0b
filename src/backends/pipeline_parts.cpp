#include "backends/pipeline_parts.h"

#include <algorithm>
#include <vector>

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
  std::vector<uint8_t> w13(w13_bytes * E), w13s(w13_sbytes * E), w2(w2_bytes * E), w2s(w2_sbytes * E);
  const std::vector<int64_t> interleave = gate_up_interleaved_rows(I);
  parallel_for(E, [&](int64_t begin, int64_t end) {
    for (int64_t e = begin; e < end; ++e) {
      const Nvfp4View w13_view{weights.w13_packed.data() + e * w13_bytes, weights.w13_scales.data() + e * w13_sbytes,
                               1.0f, 2 * I, H};
      repack(w13_view, interleave, w13.data() + e * w13_bytes, w13s.data() + e * w13_sbytes);
      repack(weights.down(e), {}, w2.data() + e * w2_bytes, w2s.data() + e * w2_sbytes);
    }
  });
  DeviceExpertWeights d;
  d.w13 = DeviceBuffer::from_host(w13);
  d.w13_scales = DeviceBuffer::from_host(w13s);
  d.w2 = DeviceBuffer::from_host(w2);
  d.w2_scales = DeviceBuffer::from_host(w2s);
  static_cast<DeviceTensorScales&>(d) = upload_tensor_scales(weights);
  return d;
}

PipelineWorkspace::PipelineWorkspace(const MoeProblem& problem, int64_t max_tokens, int smallest_tile_m,
                                     size_t extra_bytes)
    : max_tokens_(max_tokens),
      top_k_(static_cast<int>(problem.top_k)),
      num_experts_(static_cast<int>(problem.num_experts)),
      smallest_tile_m_(smallest_tile_m) {
  const size_t slots = static_cast<size_t>(max_tokens * problem.top_k);
  route_bytes_ = align256(moe_route_workspace_bytes(max_tokens, top_k_, num_experts_, smallest_tile_m));
  out_bytes_ = align256(std::max<size_t>(1, slots * static_cast<size_t>(problem.hidden) * sizeof(float)));
  h_bytes_ = align256(std::max<size_t>(1, slots * static_cast<size_t>(problem.inter) * 2));
  extra_bytes_ = align256(extra_bytes);
}

PipelineWorkspace::Parts PipelineWorkspace::carve(void* workspace) const {
  char* ws = static_cast<char*>(workspace);
  Parts parts;
  parts.route = carve_moe_route_workspace(ws, max_tokens_, top_k_, num_experts_, smallest_tile_m_);
  parts.expert_out = ws + route_bytes_;
  parts.rows = parts.expert_out;
  parts.h = ws + route_bytes_ + out_bytes_;
  parts.extra = ws + route_bytes_ + out_bytes_ + h_bytes_;
  return parts;
}

}  // namespace fp4moe
