// fp4moe qualify: qualify every registered MoE backend on this GPU for a model's MoE shape, time the
// ones that pass, choose the fastest per token bucket, cache the verdict (qualify/verdict.h), print a
// table and optionally write JSON and an SVG plot.
//
// Exit codes (documented in docs/qualify.md):
//   0  a verdict exists and at least one backend qualified
//   1  an error (bad arguments, unreadable checkpoint, ...)
//   2  nothing to qualify on this machine: no GPU is visible, or the build has no CUDA
//   3  qualification ran but no backend qualified
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "backends/registry.h"
#include "commands.h"
#include "common/child_process.h"
#include "common/device_info.h"
#include "common/error.h"
#include "io/hf_config.h"
#include "io/moe_loader.h"
#include "io/presets.h"
#include "kernels/moe_problem.h"
#include "qualify/qualify.h"
#include "qualify/report.h"
#include "qualify/worker.h"

namespace fp4moe::cli {
namespace {

struct QualifyOptions {
  std::string preset;
  std::string model_dir;
  std::vector<int64_t> tokens;
  int64_t max_tokens = 4096;
  std::string activation = "W4A16";
  std::vector<std::string> backends;
  bool requalify = false;
  std::string json_path;
  std::string plot_path;
  double timeout = 900.0;
  uint64_t seed = 1;
  int64_t layer = -1;  // --model: the MoE layer whose experts are qualified (-1: the first)
};

void write_text(const std::string& path, const std::string& text, const char* what) {
  std::ofstream out(path);
  FP4MOE_CHECK(out.good(), "cannot write the ", what, " to ", path);
  out << text;
  FP4MOE_CHECK(out.good(), "writing the ", what, " to ", path, " failed");
}

int run_qualify(const QualifyOptions& o) {
  FP4MOE_CHECK(o.preset.empty() != o.model_dir.empty(), "qualify needs exactly one of --preset NAME or --model DIR");
  // --model: the shape and the expert weights of one MoE layer come from the checkpoint (the exact
  // quantized values that will be served); --preset: seeded synthetic weights of the preset's shape.
  WeightSource weights;
  weights.seed = o.seed;
  ModelConfig model;
  ActivationMode mode = parse_activation_mode(o.activation);
  if (o.preset.empty()) {
    const Nvfp4Checkpoint checkpoint = open_nvfp4_checkpoint(o.model_dir);
    model = checkpoint.config;
    const std::vector<int64_t> moe_layers = checkpoint.moe_layers();
    FP4MOE_CHECK(!moe_layers.empty(), o.model_dir, ": the model has no MoE layer to qualify");
    weights.model_dir = o.model_dir;
    weights.layer = o.layer < 0 ? moe_layers.front() : o.layer;
    FP4MOE_CHECK(std::find(moe_layers.begin(), moe_layers.end(), weights.layer) != moe_layers.end(), "--layer ",
                 weights.layer, " is not a MoE layer of ", o.model_dir, " (it has ", moe_layers.size(),
                 " MoE layers, first ", moe_layers.front(), ", last ", moe_layers.back(), ")");
    FP4MOE_CHECK(mode != ActivationMode::kW4A4 || checkpoint.quant.has_input_scale(), o.model_dir,
                 " has no activation input_scale (quant_algo ", checkpoint.quant.quant_algo,
                 "): W4A4 needs them; qualify it with --activation W4A16");
  } else {
    FP4MOE_CHECK(o.layer < 0, "--layer needs --model (a preset has synthetic weights)");
    model = model_preset(o.preset);
  }
  const MoeProblem problem = moe_problem_for(model, mode);
  FP4MOE_CHECK(o.max_tokens >= 1 && o.max_tokens <= (1 << 20), "--max-tokens must be in [1, 1048576], got ", o.max_tokens);
  std::vector<int64_t> tokens = o.tokens.empty() ? default_timing_tokens(o.max_tokens) : o.tokens;
  for (int64_t t : tokens)
    FP4MOE_CHECK(t >= 1 && t <= o.max_tokens, "--tokens: ", t, " is outside [1, --max-tokens=", o.max_tokens, "]");
  check_qualify_timeout(o.timeout);

  const DeviceList devices = query_cuda_devices();
  if (devices.devices.empty()) {
    std::printf("fp4moe qualify: nothing to qualify on this machine: %s\n", devices.why_none.c_str());
    std::printf("(qualification runs the GPU backends on a GPU; exit code 2)\n");
    return 2;
  }
  const DeviceInfo& device = devices.devices[0];
  const VerdictKey key = make_verdict_key(device, problem, o.max_tokens);

  std::optional<Verdict> verdict;
  if (!o.requalify && o.backends.empty()) verdict = load_cached_verdict(key);
  if (verdict) {
    std::fprintf(stderr, "using the cached verdict %s (--requalify to run again)\n", verdict_cache_path(key).c_str());
  } else {
    QualifyRequest request;
    request.problem = problem;
    request.weights = weights;
    request.max_tokens = o.max_tokens;
    request.timing_tokens = tokens;
    request.backend_ids = o.backends;
    if (request.backend_ids.empty()) {
      for (const auto& backend : all_moe_backends()) request.backend_ids.emplace_back(backend->id());
    }
    FP4MOE_CHECK(!request.backend_ids.empty(), "this build registers no MoE backend");
    request.variant_tokens = collect_variant_tokens(request.backend_ids, find_moe_backend, problem, o.max_tokens, device);
    request.worker_command = {current_executable_path(), "qualify-worker"};
    request.timeout_seconds = o.timeout;
    request.key = key;
    request.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    std::fprintf(stderr, "qualifying %zu backend(s) for %s on %s\n", request.backend_ids.size(),
                 problem.describe().c_str(), device.name.c_str());
    verdict = run_qualification(request);
    if (o.backends.empty()) {
      std::fprintf(stderr, "verdict cached in %s\n", store_verdict(*verdict).c_str());
    } else {
      std::fprintf(stderr, "verdict not cached: --backend limited the set of backends\n");
    }
  }
  std::fputs(verdict_table(*verdict).c_str(), stdout);
  if (!o.json_path.empty()) write_text(o.json_path, verdict_to_json(*verdict) + "\n", "verdict JSON");
  if (!o.plot_path.empty()) write_text(o.plot_path, verdict_svg(*verdict), "SVG plot");
  return verdict->chosen.empty() ? 3 : 0;
}

}  // namespace

void register_qualify(CLI::App& app) {
  auto options = std::make_shared<QualifyOptions>();
  CLI::App* sub = app.add_subcommand(
      "qualify", "Qualify every MoE backend on this GPU against the CPU reference, time them, cache the verdict");
  auto* source = sub->add_option_group("source", "the model shape");
  source->add_option("--preset", options->preset, "built-in model preset (fp4moe synth --help lists them)");
  source->add_option("--model", options->model_dir, "ModelOpt NVFP4 checkpoint directory: its shape and its weights");
  source->require_option(1);
  add_integer_option(sub, "--tokens", options->tokens,
                     "token buckets to time (default: powers of two up to --max-tokens)")
      ->delimiter(',');
  add_integer_option(sub, "--max-tokens", options->max_tokens, "serving maximum: the largest probe and bucket")
      ->capture_default_str();
  sub->add_option("--activation", options->activation, "W4A16 or W4A4")->capture_default_str();
  sub->add_option("--backend", options->backends, "qualify only these backend ids (repeatable; not cached)");
  sub->add_flag("--requalify", options->requalify, "ignore a cached verdict and run again");
  sub->add_option("--json", options->json_path, "write the verdict as JSON to FILE");
  sub->add_option("--plot", options->plot_path, "write an SVG plot (time against tokens) to FILE");
  sub->add_option("--timeout", options->timeout, "time limit per backend, seconds")->capture_default_str();
  add_integer_option(sub, "--seed", options->seed, "seed of the synthetic weights and probes")->capture_default_str();
  add_integer_option(sub, "--layer", options->layer, "with --model: the MoE layer to qualify (default: the first)");
  set_action(sub, [options] { return run_qualify(*options); });

  auto job = std::make_shared<std::string>();
  CLI::App* worker = app.add_subcommand("qualify-worker", "internal: one backend's qualification child process");
  worker->group("");  // hidden from --help
  worker->add_option("--job", *job, "job file")->required();
  set_action(worker, [job] { return qualify_worker_main(*job, find_moe_backend); });
}

}  // namespace fp4moe::cli
