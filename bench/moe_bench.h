// The MoE benchmark behind `fp4moe bench moe` (issue 4, "Benchmark"; method in docs/perf/README.md).
//
// For one model preset and a list of token counts, each backend is prepared on several weight sets
// and run on a rotating pool of router logits, so consecutive runs touch different experts in
// different memory and the expert weights are never L2-resident. Runs are captured into one CUDA
// graph (one run per logits buffer) and the graph is replayed: CUDA events, warm-up, median over the
// repeats. A backend that cannot be captured (the cuBLAS baseline synchronizes the host) is timed
// with events around the same sequence of eager runs, and says so. The device's copy bandwidth and
// BF16 GEMM rate are measured in the same process (bench/ceilings.h) and every number is reported
// against them.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/ceilings.h"
#include "bench/timing.h"
#include "common/device_info.h"
#include "kernels/moe_problem.h"

namespace fp4moe::bench {

inline constexpr std::string_view kBaselineBackendId = "cuda.cublas_bf16.baseline.v1";

struct MoeBenchOptions {
  std::string preset = "qwen3.5-397b-a17b";
  std::vector<int64_t> tokens = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  std::vector<std::string> backends;  // empty: every registered backend except the baseline
  ActivationMode activation = ActivationMode::kW4A16;
  bool baseline = true;        // also time the cuBLAS BF16 baseline (always on BF16 activations)
  bool baseline_per_expert = false;  // baseline GEMMs as one cublasGemmEx per expert instead of grouped
  int weight_sets = 4;         // prepared copies of the weights, rotated between runs
  int runs_per_replay = 8;     // runs in one graph, each with its own logits buffer
  TimingPlan timing{3, 10, 200, 300};
  uint64_t seed = 1;
  int device = 0;
  CeilingOptions ceilings;
  std::function<void(const std::string&)> progress;  // status lines; may be empty
};

struct MoePoint {
  int64_t tokens = 0;
  double us = 0;                // median time of one MoE run
  double us_min = 0, us_max = 0;
  int repeats = 0;              // timed replays (each of runs_per_replay runs)
  double unique_experts = 0;    // mean over the runs of the experts the routing touched
  double weight_bytes = 0;      // unique_experts * NVFP4 bytes per expert: what had to be read
  double gbps = 0;              // weight_bytes / us
  double pct_copy = 0;          // gbps / measured copy bandwidth
  double tflops = 0;            // useful_flops / us
  double pct_peak = 0;          // tflops / measured BF16 GEMM rate
  double stored_gbps = 0;       // baseline only: the same, counting the BF16 copies it really reads
  std::string warning;          // e.g. non-finite output seen after timing
};

struct MoeBackendResult {
  std::string id;
  bool supported = true;
  std::string reason;                 // why not, when !supported
  ActivationMode activation = ActivationMode::kW4A16;
  std::string timing;                 // "cuda-graph replay" or "eager runs (...)"
  std::string timing_note;            // why the backend was not captured, when it was not
  std::string note;                   // e.g. how the baseline ran its GEMMs
  int weight_sets = 0;                // prepared copies actually used
  double prepare_seconds = 0;         // wall time of all prepares
  std::vector<MoePoint> points;
};

struct MoeBenchReport {
  std::string date_utc;  // ISO 8601
  std::string commit;
  std::string driver;    // kernel driver version (/proc/driver/nvidia/version), "unknown" if unreadable
  std::string preset;
  MoeProblem problem;
  DeviceInfo device;
  Ceilings ceilings;
  int64_t bytes_per_expert = 0;
  MoeBenchOptions options;
  std::vector<MoeBackendResult> backends;
};

MoeBenchReport run_moe_bench(const MoeBenchOptions& options);

// Terminal table: one row per token count, the backends side by side, speed-up over the baseline.
std::string format_moe_table(const MoeBenchReport& report);
nlohmann::json moe_report_json(const MoeBenchReport& report);

// ---- Pure helpers (unit-tested without a GPU) ----

// "1,2,4" -> {1, 2, 4}; every entry an integer >= 1; throws Error naming the bad entry.
std::vector<int64_t> parse_token_list(std::string_view text);
// Distinct expert ids among ids (each must be in [0, num_experts); throws otherwise).
int64_t count_unique_experts(std::span<const int32_t> ids, int64_t num_experts);
// Useful MoE FLOPs for T tokens: 2 * T * K * 3 * H * I (GEMM1: 2I x H, GEMM2: H x I per routed row).
double useful_moe_flops(const MoeProblem& problem, int64_t tokens);
// The commit to record: $FP4MOE_GIT_COMMIT if set (the GPU machine's copy of the tree has no .git),
// else the configure-time `git rev-parse` (build_info), which is "unknown" without git.
std::string bench_commit();

}  // namespace fp4moe::bench
