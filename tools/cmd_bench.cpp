// fp4moe bench: performance measurements on the GPU (CUDA builds only).
//   fp4moe bench moe --preset NAME --tokens LIST --backend ID... [--json FILE] [--activation W4A16|W4A4]
//   fp4moe bench ceilings
// The method (weight sets, rotating router logits, CUDA graphs, medians, ceilings) is in
// bench/moe_bench.h and docs/perf/README.md. A CPU-only build keeps the subcommand so that it can
// say why it cannot run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <fstream>
#include <string>
#include <vector>

#include "commands.h"
#include "common/error.h"
#include "io/presets.h"

#ifdef FP4MOE_WITH_CUDA
#include "bench/ceilings.h"
#include "bench/moe_bench.h"
#endif

namespace fp4moe::cli {

#ifdef FP4MOE_WITH_CUDA
namespace {

struct MoeArgs {
  std::string preset = "qwen3.5-397b-a17b";
  std::string tokens = "1,2,4,8,16,32,64,128,256,512,1024,2048,4096";
  std::vector<std::string> backends;
  std::string json_path;
  std::string activation = "W4A16";
  bool no_baseline = false;
  bool baseline_per_expert = false;
  int weight_sets = 4;
  int runs_per_replay = 8;
  int min_repeats = 10;
  uint64_t seed = 1;
  int device = 0;
};

// The action of `bench moe`, run by the `bench` action when that subcommand was parsed (main.cpp
// dispatches on top-level subcommands only).
Action register_bench_moe(CLI::App& bench) {
  auto args = std::make_shared<MoeArgs>();
  CLI::App* sub = bench.add_subcommand("moe", "Time MoE backends on a model preset against the cuBLAS BF16 baseline");
  std::string names;
  for (const auto& name : preset_names()) names += (names.empty() ? "" : ", ") + name;
  sub->add_option("--preset", args->preset, "Model preset: " + names)->capture_default_str();
  sub->add_option("--tokens", args->tokens, "Comma-separated token counts")->capture_default_str();
  sub->add_option("--backend", args->backends, "Backend ids to time (default: every registered backend)");
  sub->add_option("--json", args->json_path, "Write the full report as JSON to this file");
  sub->add_option("--activation", args->activation, "Activation mode: W4A16 or W4A4")->capture_default_str();
  sub->add_flag("--no-baseline", args->no_baseline, "Do not time the cuBLAS BF16 baseline");
  sub->add_flag("--baseline-per-expert", args->baseline_per_expert,
                "Baseline GEMMs as one cublasGemmEx per expert (default: cublasGemmGroupedBatchedEx)");
  add_integer_option(sub, "--weight-sets", args->weight_sets, "Prepared weight copies rotated between runs")
      ->capture_default_str();
  add_integer_option(sub, "--runs-per-replay", args->runs_per_replay,
                     "Runs captured in one CUDA graph, each with its own router logits")
      ->capture_default_str();
  add_integer_option(sub, "--repeats", args->min_repeats, "Minimum timed replays per point")->capture_default_str();
  add_integer_option(sub, "--seed", args->seed, "Seed of the synthetic weights and inputs")->capture_default_str();
  add_integer_option(sub, "--device", args->device, "CUDA device ordinal")->capture_default_str();
  return [args] {
    bench::MoeBenchOptions options;
    options.preset = args->preset;
    options.tokens = bench::parse_token_list(args->tokens);
    options.backends = args->backends;
    options.activation = parse_activation_mode(args->activation);
    options.baseline = !args->no_baseline;
    options.baseline_per_expert = args->baseline_per_expert;
    options.weight_sets = args->weight_sets;
    options.runs_per_replay = args->runs_per_replay;
    FP4MOE_CHECK(args->min_repeats >= 1 && args->min_repeats <= 1000, "--repeats must be in [1, 1000]");
    options.timing.min_repeats = args->min_repeats;
    options.timing.max_repeats = std::max(options.timing.max_repeats, args->min_repeats);
    options.seed = args->seed;
    options.device = args->device;
    const auto start = std::chrono::steady_clock::now();
    options.progress = [start](const std::string& line) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "[bench %6.1fs] %s\n", seconds, line.c_str());
    };
    std::ofstream json_file;
    if (!args->json_path.empty()) {  // open first: a bad path fails before minutes of work
      json_file.open(args->json_path);
      FP4MOE_CHECK(json_file.good(), "--json: cannot write '", args->json_path, "'");
    }
    const bench::MoeBenchReport report = bench::run_moe_bench(options);
    std::printf("%s", bench::format_moe_table(report).c_str());
    if (json_file.is_open()) {
      json_file << bench::moe_report_json(report).dump(2) << "\n";
      FP4MOE_CHECK(json_file.good(), "--json: writing '", args->json_path, "' failed");
      std::fprintf(stderr, "[bench] wrote %s\n", args->json_path.c_str());
    }
    return 0;
  };
}

Action register_bench_ceilings(CLI::App& bench) {
  CLI::App* sub = bench.add_subcommand("ceilings", "Measure the device copy bandwidth and the BF16 GEMM rate");
  auto device = std::make_shared<int>(0);
  add_integer_option(sub, "--device", *device, "CUDA device ordinal")->capture_default_str();
  return [device] {
    bench::CeilingOptions options;
    options.device = *device;
    const bench::Ceilings c = bench::measure_ceilings(options);
    std::printf("copy bandwidth: %.0f GB/s (read+write of a %.1f GiB buffer, median of %d)\n", c.copy_gbps,
                c.copy_bytes / 1073741824.0, c.copy_repeats);
    std::printf("BF16 GEMM:      %.0f TFLOP/s (cublasGemmEx %lld^3, median of %d)\n", c.bf16_tflops,
                static_cast<long long>(c.gemm_size), c.gemm_repeats);
    return 0;
  };
}

}  // namespace

void register_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks on the GPU: MoE backends, device ceilings");
  bench->require_subcommand(1);
  const Action moe = register_bench_moe(*bench);
  const Action ceilings = register_bench_ceilings(*bench);
  set_action(bench, [bench, moe, ceilings] {
    if (bench->got_subcommand("moe")) return moe();
    if (bench->got_subcommand("ceilings")) return ceilings();
    fail("bench: no subcommand given (moe or ceilings)");
  });
}

#else  // CPU-only build

void register_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks on the GPU (not available: this build has no CUDA)");
  bench->allow_extras();
  set_action(bench, [] {
    std::fprintf(stderr,
                 "fp4moe: error: `fp4moe bench` needs a CUDA build; this build has no CUDA "
                 "(configure with -DFP4MOE_CUDA=ON on a machine with the CUDA toolkit)\n");
    return 2;
  });
}

#endif

}  // namespace fp4moe::cli
