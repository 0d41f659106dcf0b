// Host-side parts shared by the CUDA backends: the upload of the per-expert tensor scales (every CUDA
// backend), and for those built as route -> align -> [gather] -> grouped GEMM1 -> grouped GEMM2 ->
// combine (cuda.sm80.pipeline.v1, cuda.sm90.prefill.v1) the upload of the expert weights after a
// backend's own repack, the workspace those stages use and their run (run_expert_pipeline: a backend
// supplies its M-tile choice and its GEMM launch).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include <functional>
#include <string_view>

#include "backends/moe_backend.h"
#include "format/moe_weights.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/grouped_gemm_operands.h"
#include "kernels/cuda/moe_route_permute.h"
#include "kernels/moe_problem.h"

namespace fp4moe {

// A backend's repack of one NVFP4 matrix (rows in the order given; all rows when empty) into its
// packed codes and scales (the same byte counts as the checkpoint's).
using Nvfp4RepackFn = void (*)(const Nvfp4View& m, std::span<const int64_t> source_rows, uint8_t* packed_out,
                               uint8_t* scales_out);

// The per-expert fp32 tensor scales [E] on the current device (the input scales are empty for W4A16
// checkpoints that have none).
struct DeviceTensorScales {
  DeviceBuffer gate_scale2, up_scale2, down_scale2, w13_input_scale, w2_input_scale;
};
DeviceTensorScales upload_tensor_scales(const MoeWeights& weights);

// Every expert's W13 (rows interleaved [gate 8 | up 8], gate_up_interleaved_rows) and W2 repacked on
// the host in parallel over experts, then uploaded to the current device with the tensor scales.
struct DeviceExpertWeights : DeviceTensorScales {
  DeviceBuffer w13, w13_scales, w2, w2_scales;  // [E][...] in the backend's layout
  // Every expert's W13 / W2 block scales are positive normal E4M3 codes (the sm80 decode tiles then
  // skip their scale table; e4m3_scale_bits.h). False unless the backend set them
  // (add_positive_normal_scale_flags).
  bool w13_scales_all_normal = false, w2_scales_all_normal = false;
};
DeviceExpertWeights upload_repacked_expert_weights(const MoeWeights& weights, Nvfp4RepackFn repack);
void add_positive_normal_scale_flags(DeviceExpertWeights& device, const MoeWeights& weights);
// Whether every block scale of every expert (`per_expert` codes each) is a positive normal E4M3 code: the
// condition of the CUDA kernels' table-free scales (the pipeline's decode tiles, the fused decode).
bool scales_all_positive_normal(const std::vector<uint8_t>& scales, int64_t num_experts, int64_t per_expert);

// Workspace: route buffers (for M tiles of at least tile_m rows) | expert outputs fp32 [T*K, H], whose
// first half doubles as the gathered BF16 rows (dead once GEMM1 has run) | h BF16 [T*K, I]. Each piece
// 256-byte aligned.
struct PipelineWorkspace {
  struct Parts {
    MoeRouteBuffers route;
    void* rows;        // gathered activations, BF16 [T*K, H]
    void* expert_out;  // fp32 [T*K, H]
    void* h;           // BF16 [T*K, I]
  };
  PipelineWorkspace(const MoeProblem& problem, int64_t max_tokens, int smallest_tile_m);
  size_t bytes() const { return route_bytes_ + out_bytes_ + h_bytes_; }
  Parts carve(void* workspace) const;

 private:
  int64_t max_tokens_;
  int top_k_, num_experts_, smallest_tile_m_;
  size_t route_bytes_, out_bytes_, h_bytes_;
};

// One grouped GEMM of the expert pipeline: its operands (a backend's launcher arguments extend
// GroupedGemmOperands) and epilogue.
struct ExpertGemm : GroupedGemmOperands {
  GemmEpilogue epilogue = GemmEpilogue::kScaleFp32;
  bool route_final_at_launch = false;  // GEMM2: GEMM1 lies between the route buffers' writer and it
  // GEMM1 routes the tokens itself and writes the route buffers (no route/align launch before it; see
  // Gemm1RoutesTokens); a is then the hidden rows [T, H] and a_slots is null.
  bool routes_tokens = false;
  const float* router_logits = nullptr;    // routes_tokens: the run's logits [T, E]
  const float* correction_bias = nullptr;  // routes_tokens: the run's bias [E] or null
};

// What a backend's GEMM launch needs besides the ExpertGemm.
struct PipelineRun {
  const MoeRouteBuffers& route;
  int64_t tokens;
  MTile tile;  // the M tiles of the align (rows and the tail the last tile of an expert may take)
  cudaStream_t stream;
};

// run() of the backends built as route -> align -> [gather] -> GEMM1 -> GEMM2 -> combine: checks the
// run arguments (messages name backend_id), launches the stages on args.stream and calls
// launch_gemm(run, gemm) for each GEMM. choose_tile_m(tokens): the M tiles the align emits (called once
// the arguments are valid). gemm1_reads_hidden(tile): whether a W4A16 GEMM1 with those M tiles reads the
// hidden rows through the sorted slots (no gather); W4A4 always gathers (the rows are quantized on the way).
using ChooseTileM = std::function<MTile(int64_t tokens)>;
using Gemm1ReadsHidden = std::function<bool(MTile tile)>;
using LaunchExpertGemm = std::function<void(const PipelineRun& run, const ExpertGemm& gemm)>;
// gemm1_routes_tokens(tokens, tile) (may be empty: never): the backend's W4A16 GEMM1 routes the tokens
// itself and writes the route buffers as the route/align stage would, which is then not launched.
using Gemm1RoutesTokens = std::function<bool(int64_t tokens, MTile tile)>;
void run_expert_pipeline(std::string_view backend_id, const MoeProblem& problem, int64_t max_tokens,
                         const DeviceExpertWeights& weights, const PipelineWorkspace& workspace,
                         const MoeRunArgs& args, const Gemm1ReadsHidden& gemm1_reads_hidden,
                         const ChooseTileM& choose_tile_m, const LaunchExpertGemm& launch_gemm,
                         const Gemm1RoutesTokens& gemm1_routes_tokens = {});

}  // namespace fp4moe
