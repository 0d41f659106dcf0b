// cuda.sm90.prefill.v1 (see cuda_sm90_prefill.h): host side. prepare() validates, picks the GEMM
// kernel, repacks the weights for it (parallel over experts) and uploads them; run() only launches
// kernels on the caller's stream: no allocation, no host synchronization, CUDA-graph capturable,
// deterministic. The token tile of the register-weight kernel depends on T only (never on the grid).
#include "backends/cuda_sm90_prefill.h"

#include <algorithm>
#include <cstdlib>
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

// Which grouped GEMM runs. kRegw (weights dequantized into wgmma registers, token tile per call) is
// the default for W4A16; W4A4 needs kSmem (its GEMM1 epilogue quantizes h along the lane quads of the
// smem kernel's accumulator layout). FP4MOE_SM90_PREFILL_KERNEL = "smem" | "regw" | "regw64" |
// "regw128" | "regw256" overrides it for measurements (unset or "auto": the default; anything else
// is an error at prepare()).
// How the register-weight kernel's GEMM1 gets its token rows: per tile as measured
// (sm90_regw_gemm1_reads_slots), or forced.
enum class Gemm1Rows { kAuto, kGathered, kSlots };
struct KernelChoice {
  bool regw = true;
  int fixed_tile_tokens = 0;  // 0: sm90_regw_choose_tile_tokens per call
  int cluster = 0;            // register-weight kernel: 0 auto (2-CTA clusters when possible), 1 or 2 forced
  Gemm1Rows gemm1_rows = Gemm1Rows::kAuto;
};
// FP4MOE_SM90_REGW_CLUSTER = "1" | "2" | "auto" (measurement knob; unset = auto; anything else is an error).
int regw_cluster_from_env() {
  const char* env = std::getenv("FP4MOE_SM90_REGW_CLUSTER");
  const std::string v = env ? env : "";
  if (v.empty() || v == "auto") return 0;
  FP4MOE_CHECK(v == "1" || v == "2", "cuda.sm90.prefill: FP4MOE_SM90_REGW_CLUSTER=", v, " is not 1, 2 or auto");
  return v == "1" ? 1 : 2;
}
// FP4MOE_SM90_GEMM1_ROWS = "gathered" | "slots" | "auto" (measurement knob; unset = auto; anything else
// is an error).
Gemm1Rows gemm1_rows_from_env() {
  const char* env = std::getenv("FP4MOE_SM90_GEMM1_ROWS");
  const std::string v = env ? env : "";
  if (v.empty() || v == "auto") return Gemm1Rows::kAuto;
  FP4MOE_CHECK(v == "gathered" || v == "slots", "cuda.sm90.prefill: FP4MOE_SM90_GEMM1_ROWS=", v,
               " is not gathered, slots or auto");
  return v == "slots" ? Gemm1Rows::kSlots : Gemm1Rows::kGathered;
}
KernelChoice choose_kernel(ActivationMode mode) {
  KernelChoice c;
  c.regw = mode != ActivationMode::kW4A4;
  c.cluster = regw_cluster_from_env();
  c.gemm1_rows = gemm1_rows_from_env();
  // The slots path runs single CTAs (cp.async cannot multicast): a forced 2-CTA cluster means gathered rows.
  FP4MOE_CHECK(c.cluster != 2 || c.gemm1_rows != Gemm1Rows::kSlots, "cuda.sm90.prefill: FP4MOE_SM90_REGW_CLUSTER=2 and "
               "FP4MOE_SM90_GEMM1_ROWS=slots exclude each other (GEMM1 reading through the slots runs single CTAs)");
  if (c.cluster == 2) c.gemm1_rows = Gemm1Rows::kGathered;
  const char* env = std::getenv("FP4MOE_SM90_PREFILL_KERNEL");
  const std::string v = env ? env : "";
  if (v.empty() || v == "auto") return c;
  if (v == "smem") return KernelChoice{false, 0, 0, Gemm1Rows::kAuto};
  FP4MOE_CHECK(v == "regw" || v == "regw64" || v == "regw128" || v == "regw256", "cuda.sm90.prefill: FP4MOE_SM90_PREFILL_KERNEL=",
               v, " is not smem, regw, regw64, regw128, regw256 or auto");
  FP4MOE_CHECK(mode != ActivationMode::kW4A4, "cuda.sm90.prefill: W4A4 runs only the smem kernel (FP4MOE_SM90_PREFILL_KERNEL=",
               v, ")");
  c.regw = true;
  c.fixed_tile_tokens = v == "regw" ? 0 : std::stoi(v.substr(4));
  return c;
}

class PreparedSm90Prefill final : public PreparedMoe {
 public:
  PreparedSm90Prefill(const MoeProblem& problem, const MoeWeights& weights, int64_t max_tokens, const DeviceInfo& device)
      : problem_(problem),
        max_tokens_(max_tokens),
        device_(device.ordinal),
        num_sms_(device.multiprocessors),
        choice_(choose_kernel(problem.activation_mode)),
        workspace_(problem, max_tokens, choice_.regw ? kSm90RegwSmallestTileTokens : kSm90TileM) {
    const int64_t E = problem.num_experts, H = problem.hidden, I = problem.inter, K = problem.top_k;
    const int smallest_tile = choice_.regw ? kSm90RegwSmallestTileTokens : kSm90TileM;
    FP4MOE_CHECK(moe_max_tiles(max_tokens, static_cast<int>(K), static_cast<int>(E), smallest_tile) *
                         (std::max(2 * I, H) / std::min(kSm90TileN, kSm90RegwTileN)) <
                     (int64_t{1} << 31),
                 "cuda.sm90.prefill: max_tokens ", max_tokens, " is too large for the work-item count");
    FP4MOE_CUDA_CHECK(cudaSetDevice(device_));
    if (choice_.regw) {
      configure_sm90_regw_kernels();
      weights_ = upload_repacked_expert_weights(weights, repack_nvfp4_for_sm90_regw);
    } else {
      configure_sm90_grouped_gemm_kernels();
      weights_ = upload_repacked_expert_weights(weights, repack_nvfp4_for_sm90);
    }
  }

  size_t workspace_bytes() const override { return workspace_.bytes(); }
  int64_t max_tokens() const override { return max_tokens_; }

  void run(const MoeRunArgs& args) override {
    const int K = static_cast<int>(problem_.top_k), E = static_cast<int>(problem_.num_experts);
    auto choose_tile_m = [&](int64_t tokens) {
      return !choice_.regw ? MTile{kSm90TileM, 0}
                           : sm90_regw_m_tile(choice_.fixed_tile_tokens ? choice_.fixed_tile_tokens
                                                                        : sm90_regw_choose_tile_tokens(tokens, K, E));
    };
    // The register-weight kernel's GEMM1 copies its token rows from the hidden states through the sorted
    // slots at the tiles where that is faster (no gather pass); otherwise, and in the smem kernel, the
    // token tiles are TMA boxes of contiguous gathered rows.
    auto gemm1_reads_hidden = [&](MTile tile) {
      return choice_.regw && (choice_.gemm1_rows == Gemm1Rows::kAuto ? sm90_regw_gemm1_reads_slots(tile.rows)
                                                                     : choice_.gemm1_rows == Gemm1Rows::kSlots);
    };
    run_expert_pipeline(kId, problem_, max_tokens_, weights_, workspace_, args, gemm1_reads_hidden,
                        choose_tile_m, [&](const PipelineRun& run, const ExpertGemm& gemm) {
                          Sm90GemmArgs g;
                          static_cast<GroupedGemmOperands&>(g) = gemm;
                          g.rows = run.tokens * K;
                          g.route = run.route;
                          g.max_tiles = moe_max_tiles(run.tokens, K, E, run.tile.rows);
                          g.num_sms = num_sms_;
                          if (choice_.regw)
                            launch_grouped_gemm_nvfp4w_bf16_sm90a_regw(g, run.tile, gemm.epilogue, run.stream,
                                                                       choice_.cluster);
                          else
                            launch_grouped_gemm_nvfp4w_bf16_sm90a(g, gemm.epilogue, run.stream);
                        });
  }

 private:
  MoeProblem problem_;
  int64_t max_tokens_;
  int device_;
  int num_sms_;
  KernelChoice choice_;
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
    const size_t smem = std::max(sm90_grouped_gemm_smem_bytes(), sm90_regw_smem_bytes());
    if (device.shared_memory_per_block_optin < static_cast<int64_t>(smem))
      return Support::no("needs " + std::to_string(smem) +
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

  // The register-weight kernel's token tile (64, 128, 256) is chosen per call from T (unless forced).
  std::vector<int64_t> variant_token_counts(const MoeProblem& problem, int64_t max_tokens,
                                            const DeviceInfo&) const override {
    const KernelChoice choice = choose_kernel(problem.activation_mode);
    if (!choice.regw || choice.fixed_tile_tokens != 0) return {};
    return first_token_count_of_each_variant(max_tokens, [&](int64_t t) {
      return sm90_regw_choose_tile_tokens(t, static_cast<int>(problem.top_k), static_cast<int>(problem.num_experts));
    });
  }
};

}  // namespace

std::unique_ptr<MoeBackend> make_cuda_sm90_prefill_backend() { return std::make_unique<CudaSm90PrefillBackend>(); }

}  // namespace fp4moe
