// cuda.sm80.pipeline.v1 (see cuda_sm80_pipeline.h and docs/pipeline-backend.md): host side. prepare()
// validates, repacks the weights (parallel over experts) and uploads them; run() only launches
// kernels on the caller's stream: no allocation, no host synchronization, CUDA-graph capturable.
#include "backends/cuda_sm80_pipeline.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <tuple>
#include <utility>

#include "backends/backend_checks.h"
#include "backends/pipeline_parts.h"
#include "common/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm80.h"
#include "kernels/cuda/moe_route_permute.h"
#include "kernels/cuda/nvfp4_mma_layout.h"

namespace fp4moe {
namespace {

constexpr std::string_view kId = "cuda.sm80.pipeline.v1";
constexpr int kSmallestTileM = 16;
// One token on the decode tile: every routed expert holds one sorted row, one M tile each (the one-token
// paths: GEMM1 routing the token itself, GEMM2's one-row instances).
bool one_token_on_decode_tile(int64_t tokens, int tile_m) { return tokens == 1 && tile_m == kSmallestTileM; }
// The 96-row tile needs more shared memory per block (100 KB) than SM 8.6/8.9 parts allow (99 KB).
bool large_tile_fits(const DeviceInfo& device) {
  return device.shared_memory_per_block_optin >= static_cast<int64_t>(grouped_gemm_smem_bytes(96));
}

class PreparedSm80Pipeline final : public PreparedMoe {
 public:
  PreparedSm80Pipeline(const MoeProblem& problem, const MoeWeights& weights, int64_t max_tokens, const DeviceInfo& device)
      : problem_(problem),
        max_tokens_(max_tokens),
        device_(device.ordinal),
        workspace_(problem, max_tokens, kSmallestTileM) {
    const int64_t E = problem.num_experts, K = problem.top_k;
    large_tile_ok_ = large_tile_fits(device);
    FP4MOE_CHECK(moe_max_tiles(max_tokens, static_cast<int>(K), static_cast<int>(E), kSmallestTileM) < 65536,
                 "cuda.sm80.pipeline: max_tokens ", max_tokens, " is too large for the M-tile grid");
    FP4MOE_CUDA_CHECK(cudaSetDevice(device_));
    configure_grouped_gemm_kernels();
    decode_residency_ = grouped_gemm_decode_residency(device_);
    force_tile96_warps_ = sm80_pipeline_forced_tile96_warps();
    force_table_scales_ = sm80_pipeline_forced_table_scales();  // a bad knob fails before the long repack
    self_route_ = sm80_pipeline_self_route_enabled();

    weights_ = upload_repacked_expert_weights(weights, repack_nvfp4_for_mma);
    add_positive_normal_scale_flags(weights_, weights);  // the decode tiles' table-free instances
  }

  size_t workspace_bytes() const override { return workspace_.bytes(); }
  int64_t max_tokens() const override { return max_tokens_; }

  void run(const MoeRunArgs& args) override {
    const int K = static_cast<int>(problem_.top_k), E = static_cast<int>(problem_.num_experts);
    // W4A16's GEMM1 reads the hidden rows through the sorted slots at every M tile (no gather). The sm80
    // GEMM's tiles have no tail (MTile).
    Sm80PipelineTile tile;  // chosen for the validated token count, before the GEMMs are launched
    run_expert_pipeline(kId, problem_, max_tokens_, weights_, workspace_, args, [](MTile) { return true; },
                        [&](int64_t tokens) {
                          tile = sm80_pipeline_tile(tokens, K, E, large_tile_ok_, force_tile96_warps_);
                          return MTile{tile.m, 0};
                        },
                        [&](const PipelineRun& run, const ExpertGemm& gemm) {
                          GroupedGemmArgs g;
                          static_cast<GroupedGemmOperands&>(g) = gemm;
                          g.route = run.route;
                          g.num_experts = E;
                          g.max_tiles = moe_max_tiles(run.tokens, K, E, run.tile.rows);
                          g.decode_residency = decode_residency_;
                          g.rows = run.tokens * K;
                          g.route_final_at_launch = gemm.route_final_at_launch;
                          g.tile96_warps = tile.tile96_warps;
                          if (force_table_scales_) g.scales_all_normal = false;
                          if (gemm.epilogue == GemmEpilogue::kScaleFp32) {
                            auto splits = [&](bool one_row) {
                              return grouped_gemm_k_splits(g.n, g.k, g.rows, E, run.tile.rows, decode_residency_,
                                                           GemmEpilogue::kScaleFp32, one_row);
                            };
                            g.one_row_tiles =
                                sm80_pipeline_gemm2_one_row(run.tokens, run.tile.rows, splits(false), splits(true));
                            if (g.one_row_tiles) g.top_k = K;
                          }
                          if (gemm.routes_tokens) {
                            g.self_routing =
                                GemmSelfRouting{problem_.routing, gemm.router_logits, gemm.correction_bias};
                          }
                          launch_grouped_gemm_nvfp4w_bf16(g, gemm.epilogue, run.tile.rows, run.stream);
                        },
                        [&](int64_t tokens, MTile m_tile) {
                          return sm80_pipeline_gemm1_routes(tokens, m_tile.rows,
                                                            problem_.activation_mode == ActivationMode::kW4A4,
                                                            self_route_);
                        });
  }

 private:
  MoeProblem problem_;
  int64_t max_tokens_;
  int device_;
  bool large_tile_ok_ = false;
  bool force_table_scales_ = false;  // FP4MOE_SM80_TABLE_SCALES, read at prepare
  bool self_route_ = true;           // FP4MOE_SM80_SELF_ROUTE, read at prepare
  std::optional<Tile96Warps> force_tile96_warps_;  // FP4MOE_SM80_TILE96_WARPS, read at prepare
  DecodeResidency decode_residency_;  // split-K sizing (grouped_gemm_decode_residency)
  PipelineWorkspace workspace_;
  DeviceExpertWeights weights_;
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

  // The grouped GEMMs' tile (M rows 16, 64 or 96, and the 96-row tile's warp layout) depends on the rows
  // per expert.
  std::vector<int64_t> variant_token_counts(const MoeProblem& problem, int64_t max_tokens,
                                            const DeviceInfo& device) const override {
    const bool large_tile_ok = large_tile_fits(device);
    const std::optional<Tile96Warps> force = sm80_pipeline_forced_tile96_warps();
    const bool w4a4 = problem.activation_mode == ActivationMode::kW4A4, self_route = sm80_pipeline_self_route_enabled();
    return first_token_count_of_each_variant(max_tokens, [&](int64_t t) {
      const Sm80PipelineTile tile = sm80_pipeline_tile(t, problem.top_k, problem.num_experts, large_tile_ok, force);
      // One token's GEMM2 may take its one-row instances (the device's residency decides).
      return std::make_tuple(tile, sm80_pipeline_gemm1_routes(t, tile.m, w4a4, self_route),
                             one_token_on_decode_tile(t, tile.m));
    });
  }
};

}  // namespace

Sm80PipelineTile sm80_pipeline_tile(int64_t tokens, int64_t top_k, int64_t num_experts, bool large_tile_ok,
                                    std::optional<Tile96Warps> force_tile96_warps) {
  // Every expert has at most `tokens` rows, so up to 16 tokens one 16-row tile per expert suffices;
  // beyond, the mean rows per expert picks the tile: the 16-row decode tile while it is memory-bound
  // (<= 16 rows), then 96 where it fits. Measured on the H200 (E=512, docs/perf/2026-11-30-h200-pipeline-3.md):
  // 96 (8 warps, 2 CTAs per SM) beats 64 by 1.34-1.95x and 128 by 1.19-1.70x from 20 to 320 mean rows,
  // also at equal padding (320 rows: 384 for both), so 128 is never picked here.
  if (tokens <= 16) return {16};
  const double mean_rows = static_cast<double>(tokens * top_k) / static_cast<double>(num_experts);
  if (mean_rows <= 16.0) return {16};
  if (!large_tile_ok) return {64};
  // The 96-row tile's layout: four warps, unless forced. Since the copies' addresses are precomputed
  // (docs/perf/2026-11-30-h200-r13.md) four warps beat eight at every measured size of Qwen3.5-397B on
  // the H200, 16 to 160 mean rows per expert: time with four / time with eight 0.92-0.975 for W4A16,
  // 0.85-0.90 for W4A4. (Before, eight won below 40-64 mean rows: their copies hid the latency.)
  return {96, force_tile96_warps.value_or(Tile96Warps::kFour)};
}

std::optional<Tile96Warps> sm80_pipeline_forced_tile96_warps() {
  const char* env = std::getenv("FP4MOE_SM80_TILE96_WARPS");
  if (env == nullptr || *env == '\0') return std::nullopt;
  const std::string value(env);
  if (value == "4") return Tile96Warps::kFour;
  if (value == "8") return Tile96Warps::kEight;
  fail("FP4MOE_SM80_TILE96_WARPS must be 4 or 8 (warps of the 96-row tile), got '", value, "'");
}

namespace {
// A measurement knob of this backend that takes 0 or 1 (unset or empty: `unset`); `meaning` is shown in the
// error for any other value.
bool zero_or_one_knob(const char* name, bool unset, const char* meaning) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return unset;
  const std::string value(env);
  if (value == "0") return false;
  if (value == "1") return true;
  fail(name, " must be 0 or 1 (", meaning, "), got '", value, "'");
}
}  // namespace

bool sm80_pipeline_forced_table_scales() {
  return zero_or_one_knob("FP4MOE_SM80_TABLE_SCALES", false, "1: the decode tiles always use the scale table");
}

bool sm80_pipeline_self_route_enabled() {
  return zero_or_one_knob("FP4MOE_SM80_SELF_ROUTE", true, "0: one token runs the route/align kernel");
}

// One token only: its routed experts hold one sorted row each, so a CTA finds its tile from the routing
// alone. W4A4 gathers quantized rows between the routing and GEMM1, so it keeps the route/align kernel.
// Measured on the H200 (docs/perf/2026-12-01-h200-r15.md).
bool sm80_pipeline_gemm1_routes(int64_t tokens, int tile_m, bool w4a4, bool enabled) {
  return enabled && one_token_on_decode_tile(tokens, tile_m) && !w4a4;
}

// One token: each M tile of GEMM2 holds one row. Measured on the H200 (docs/perf/2026-12-01-h200-r16.md): with
// more splits (Qwen3.5-397B: 2 against 1) one token took 39.1 against 40.6 us; at equal splits the one-row
// instances were 0.4 us faster for Qwen3.5-122B but 0.6 and 1.7 us slower for Qwen3-30B and Qwen3.5-35B.
bool sm80_pipeline_gemm2_one_row(int64_t tokens, int tile_m, int general_splits, int one_row_splits) {
  return one_token_on_decode_tile(tokens, tile_m) && one_row_splits > general_splits;
}

std::unique_ptr<MoeBackend> make_cuda_sm80_pipeline_backend() { return std::make_unique<CudaSm80PipelineBackend>(); }

}  // namespace fp4moe
