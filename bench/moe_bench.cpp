// The MoE benchmark (bench/moe_bench.h). Host code over the CUDA runtime and the backend registry.
#include "bench/moe_bench.h"

#include "common/device_info.h"

#include <cuda_runtime_api.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>

#include "backends/cublas_bf16_baseline.h"
#include "backends/registry.h"
#include "bench/device_fill.h"
#include "common/error.h"
#include "common/rng.h"
#include "fp4moe_build_info.h"
#include "format/bf16.h"
#include "format/synthetic.h"
#include "io/presets.h"
#include "kernels/cpu/moe_reference.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_buffer.h"

namespace fp4moe::bench {

std::vector<int64_t> parse_token_list(std::string_view text) {
  std::vector<int64_t> tokens;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item(text.substr(pos, comma - pos));
    FP4MOE_CHECK(!item.empty(), "--tokens: empty entry in '", text, "' (expected e.g. 1,2,4,4096)");
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      fail("--tokens: '", item, "' is not an integer");
    }
    FP4MOE_CHECK(used == item.size(), "--tokens: '", item, "' is not an integer");
    FP4MOE_CHECK(value >= 1 && value <= (int64_t{1} << 24), "--tokens: ", value, " is out of range [1, 2^24]");
    tokens.push_back(value);
    pos = comma + 1;
  }
  return tokens;
}

int64_t count_unique_experts(std::span<const int32_t> ids, int64_t num_experts) {
  FP4MOE_CHECK(num_experts >= 1, "count_unique_experts: num_experts must be >= 1");
  std::vector<char> seen(static_cast<size_t>(num_experts), 0);
  int64_t unique = 0;
  for (int32_t id : ids) {
    FP4MOE_CHECK(id >= 0 && id < num_experts, "count_unique_experts: expert id ", id, " outside [0, ", num_experts, ")");
    if (!seen[static_cast<size_t>(id)]) {
      seen[static_cast<size_t>(id)] = 1;
      ++unique;
    }
  }
  return unique;
}

double useful_moe_flops(const MoeProblem& problem, int64_t tokens) {
  return 2.0 * static_cast<double>(tokens) * static_cast<double>(problem.top_k) * 3.0 *
         static_cast<double>(problem.hidden) * static_cast<double>(problem.inter);
}

std::string bench_commit() {
  if (const char* env = std::getenv("FP4MOE_GIT_COMMIT"); env != nullptr && env[0] != '\0') return env;
  // The configure-time commit ("unknown" without git, e.g. on the GPU machine's copy of the tree).
  return build_info::kGitCommit;
}

namespace {

std::string utc_now_iso() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

void say(const MoeBenchOptions& options, const std::string& line) {
  if (options.progress) options.progress(line);
}

// Owns a non-blocking stream.
struct Stream {
  cudaStream_t stream = nullptr;
  Stream() { FP4MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(stream); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

// Owns a graph and its executable.
struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  Graph() = default;
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
};

// The inputs shared by every backend: logits pool (device + host routing), hidden states, output.
struct Inputs {
  int64_t max_tokens = 0;
  std::vector<DeviceBuffer> logits;          // [max_tokens, E] fp32 each
  std::vector<std::vector<int32_t>> ids;     // host routing of each logits buffer, [max_tokens, K]
  DeviceBuffer bias;                         // [E] fp32 (sigmoid_grouped_topk only)
  std::vector<DeviceBuffer> hidden;          // [max_tokens, H] BF16, two buffers
  DeviceBuffer out;                          // [max_tokens, H] BF16
};

Inputs make_inputs(const MoeProblem& problem, const MoeBenchOptions& options, int64_t max_tokens, void* stream) {
  Inputs in;
  in.max_tokens = max_tokens;
  const int64_t experts = problem.num_experts;
  const bool needs_bias = problem.routing.method == RoutingMethod::kSigmoidGroupedTopk;
  std::vector<float> bias;
  if (needs_bias) {
    Rng rng = Rng(options.seed).fork(7);
    bias.resize(static_cast<size_t>(experts));
    for (float& b : bias) b = static_cast<float>(rng.uniform(-0.05, 0.05));
    in.bias = DeviceBuffer::from_host(bias);
  }
  for (int i = 0; i < options.runs_per_replay; ++i) {
    // Router logits ~ N(0, 2^2), rounded to BF16 values as the model's BF16 router GEMM produces.
    Rng rng = Rng(options.seed).fork(1000 + static_cast<uint64_t>(i));
    std::vector<float> logits(static_cast<size_t>(max_tokens * experts));
    for (float& v : logits) v = round_to_bf16(static_cast<float>(2.0 * rng.normal_fast()));
    std::vector<int32_t> ids(static_cast<size_t>(max_tokens * problem.top_k));
    std::vector<float> weights(ids.size());
    route_reference(problem.routing, logits, max_tokens, needs_bias ? bias.data() : nullptr, ids, weights);
    in.logits.push_back(DeviceBuffer::from_host(logits));
    in.ids.push_back(std::move(ids));
  }
  const auto hidden_count = static_cast<size_t>(max_tokens * problem.hidden);
  for (int i = 0; i < 2; ++i) {
    in.hidden.emplace_back(hidden_count * 2);
    fill_random_bf16(in.hidden.back().get(), hidden_count, options.seed * 31 + static_cast<uint64_t>(i), 1.0f, stream);
  }
  in.out = DeviceBuffer(hidden_count * 2);
  FP4MOE_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  return in;
}

// Non-finite values among the first `count` BF16 outputs.
int64_t count_non_finite(const DeviceBuffer& out, int64_t count) {
  std::vector<uint16_t> host(static_cast<size_t>(count));
  FP4MOE_CUDA_CHECK(cudaMemcpy(host.data(), out.get(), host.size() * 2, cudaMemcpyDeviceToHost));
  int64_t bad = 0;
  for (uint16_t bits : host) bad += (bits & 0x7F80u) == 0x7F80u;
  return bad;
}

MoeBackendResult bench_backend(std::unique_ptr<MoeBackend> backend, const MoeProblem& base_problem,
                               const MoeWeights& weights, const DeviceInfo& device, const Ceilings& ceilings,
                               Inputs& in, const MoeBenchOptions& options, cudaStream_t stream) {
  MoeBackendResult result;
  const std::string id(backend->id());
  result.id = id;
  MoeProblem problem = base_problem;
  // The baseline is a BF16 library path: it multiplies BF16 activations whatever the mode asked for.
  if (id == kBaselineBackendId) problem.activation_mode = ActivationMode::kW4A16;
  result.activation = problem.activation_mode;
  const Support support = backend->supports(problem, device);
  if (!support.ok) {
    result.supported = false;
    result.reason = support.reason;
    say(options, id + ": not supported: " + support.reason);
    return result;
  }

  // Prepared weight sets; stop early (and say so) when the device would run short of memory.
  std::vector<std::unique_ptr<PreparedMoe>> prepared;
  const auto t0 = std::chrono::steady_clock::now();
  size_t per_set = 0;
  for (int w = 0; w < options.weight_sets; ++w) {
    size_t free_before = 0, total = 0;
    FP4MOE_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
    const size_t reserve = size_t{4} << 30;
    if (w > 0 && free_before < per_set + per_set / 8 + reserve) {
      say(options, id + ": only " + std::to_string(w) + " weight sets fit in device memory");
      break;
    }
    say(options, id + ": preparing weight set " + std::to_string(w + 1) + "/" + std::to_string(options.weight_sets));
    prepared.push_back(backend->prepare(problem, weights, in.max_tokens, device));
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    size_t free_after = 0;
    FP4MOE_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
    if (w == 0) per_set = free_before > free_after ? free_before - free_after : 0;
  }
  result.prepare_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  result.weight_sets = static_cast<int>(prepared.size());
  size_t workspace_bytes = 0;
  for (const auto& p : prepared) workspace_bytes = std::max(workspace_bytes, p->workspace_bytes());
  DeviceBuffer workspace(workspace_bytes);

  const int runs = options.runs_per_replay;
  bool graphs = true;
  for (int64_t tokens : options.tokens) {
    std::vector<MoeRunArgs> args(static_cast<size_t>(runs));
    for (int i = 0; i < runs; ++i) {
      MoeRunArgs& a = args[static_cast<size_t>(i)];
      a.hidden = in.hidden[static_cast<size_t>(i % 2)].get();
      a.router_logits = in.logits[static_cast<size_t>(i)].as<float>();
      a.correction_bias = in.bias.bytes() ? in.bias.as<float>() : nullptr;
      a.tokens = tokens;
      a.out = in.out.get();
      a.workspace = workspace.get();
      a.stream = stream;
    }
    auto run_all = [&] {
      for (int i = 0; i < runs; ++i) prepared[static_cast<size_t>(i % result.weight_sets)]->run(args[static_cast<size_t>(i)]);
    };
    // One eager pass first: surfaces errors outside capture and loads modules.
    run_all();
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));

    Graph graph;
    if (graphs) {
      std::string why;
      FP4MOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      try {
        run_all();
      } catch (const Error& e) {
        why = e.what();
      }
      const cudaError_t end = cudaStreamEndCapture(stream, &graph.graph);
      if (why.empty() && end != cudaSuccess) why = std::string("capture failed: ") + cudaGetErrorString(end);
      if (why.empty()) {
        FP4MOE_CUDA_CHECK(cudaGraphInstantiate(&graph.exec, graph.graph, 0));
      } else {
        (void)cudaGetLastError();  // clear the capture error; the eager path below is checked again
        graphs = false;
        result.timing_note = why;
        say(options, id + ": not graph-capturable, timing eager runs: " + why);
      }
    }
    result.timing = graphs ? "cuda-graph replay" : "eager runs (CUDA events; host sync inside each run)";

    const std::vector<double> ms = time_region_ms(stream, options.timing, [&] {
      if (graphs) {
        FP4MOE_CUDA_CHECK(cudaGraphLaunch(graph.exec, stream));
      } else {
        run_all();
      }
    });
    MoePoint p;
    p.tokens = tokens;
    std::vector<double> us(ms.size());
    for (size_t r = 0; r < ms.size(); ++r) us[r] = ms[r] * 1e3 / runs;
    p.us = median(us);
    p.us_min = *std::min_element(us.begin(), us.end());
    p.us_max = *std::max_element(us.begin(), us.end());
    p.repeats = static_cast<int>(us.size());
    double unique = 0;
    for (int i = 0; i < runs; ++i) {
      const auto& ids = in.ids[static_cast<size_t>(i)];
      unique += static_cast<double>(count_unique_experts(
          std::span<const int32_t>(ids.data(), static_cast<size_t>(tokens * problem.top_k)), problem.num_experts));
    }
    p.unique_experts = unique / runs;
    p.weight_bytes = p.unique_experts * static_cast<double>(weights.bytes_per_expert());
    p.gbps = p.weight_bytes / (p.us * 1e-6) / 1e9;
    p.pct_copy = 100.0 * p.gbps / ceilings.copy_gbps;
    if (id == kBaselineBackendId) {  // BF16 gate, up and down: 2 bytes per weight instead of NVFP4's 9/16
      p.stored_gbps = p.gbps * (6.0 * static_cast<double>(problem.hidden * problem.inter)) /
                      static_cast<double>(weights.bytes_per_expert());
    }
    p.tflops = useful_moe_flops(problem, tokens) / (p.us * 1e-6) / 1e12;
    p.pct_peak = 100.0 * p.tflops / ceilings.bf16_tflops;
    const int64_t bad = count_non_finite(in.out, tokens * problem.hidden);
    if (bad > 0) p.warning = std::to_string(bad) + " non-finite output values";
    char line[160];
    std::snprintf(line, sizeof line, "%s: T=%lld  %.1f us  (%d replays x %d runs)%s", id.c_str(),
                  static_cast<long long>(tokens), p.us, p.repeats, runs, p.warning.empty() ? "" : "  WARNING: non-finite output");
    say(options, line);
    result.points.push_back(p);
  }
  return result;
}

}  // namespace

MoeBenchReport run_moe_bench(const MoeBenchOptions& options) {
  FP4MOE_CHECK(!options.tokens.empty(), "bench moe: the token list is empty");
  FP4MOE_CHECK(options.weight_sets >= 1 && options.weight_sets <= 64, "bench moe: --weight-sets must be in [1, 64]");
  FP4MOE_CHECK(options.runs_per_replay >= 1 && options.runs_per_replay <= 64,
               "bench moe: --runs-per-replay must be in [1, 64]");
  for (int64_t t : options.tokens) FP4MOE_CHECK(t >= 1, "bench moe: token counts must be >= 1 (got ", t, ")");
  const DeviceList devices = query_cuda_devices();
  FP4MOE_CHECK(!devices.devices.empty(), "bench moe: no CUDA device: ", devices.why_none);
  FP4MOE_CHECK(options.device >= 0 && options.device < static_cast<int>(devices.devices.size()),
               "bench moe: device ", options.device, " does not exist (", devices.devices.size(), " visible)");
  FP4MOE_CUDA_CHECK(cudaSetDevice(options.device));

  MoeBenchReport report;
  report.options = options;
  report.date_utc = utc_now_iso();
  report.commit = bench_commit();
  report.driver = nvidia_kernel_driver_version();
  report.preset = options.preset;
  report.device = devices.devices[static_cast<size_t>(options.device)];
  report.problem = moe_problem_for(model_preset(options.preset), options.activation);

  // Resolve the backend list before any long step, so a bad id fails at once.
  std::vector<std::string> ids = options.backends;
  if (ids.empty()) {
    for (const auto& b : all_moe_backends()) ids.emplace_back(b->id());
  }
  if (options.baseline && std::find(ids.begin(), ids.end(), kBaselineBackendId) == ids.end())
    ids.emplace_back(kBaselineBackendId);
  FP4MOE_CHECK(!ids.empty(), "bench moe: no backend to run (this build registers none)");
  for (const auto& id : ids) (void)find_moe_backend(id);

  say(options, "measuring the device ceilings (copy bandwidth, BF16 GEMM)");
  CeilingOptions ceiling_options = options.ceilings;
  ceiling_options.device = options.device;
  report.ceilings = measure_ceilings(ceiling_options);

  const MoeProblem& problem = report.problem;
  say(options, "generating synthetic NVFP4 weights: " + problem.describe());
  const MoeWeights weights = synthetic_moe_weights(problem.num_experts, problem.hidden, problem.inter, options.seed);
  report.bytes_per_expert = weights.bytes_per_expert();

  Stream stream;
  const int64_t max_tokens = *std::max_element(options.tokens.begin(), options.tokens.end());
  say(options, "drawing " + std::to_string(options.runs_per_replay) + " router-logit sets and routing them on the host");
  Inputs inputs = make_inputs(problem, options, max_tokens, stream.stream);

  for (const auto& id : ids) {
    // A backend that fails (an Error from prepare or run) is recorded and the others still run.
    auto attempt = [&](std::unique_ptr<MoeBackend> backend, const std::string& note) {
      MoeBackendResult result;
      try {
        result = bench_backend(std::move(backend), problem, weights, report.device, report.ceilings, inputs, options,
                               stream.stream);
      } catch (const Error& e) {
        (void)cudaGetLastError();
        FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream.stream));  // a sticky fault ends the whole benchmark here
        result = MoeBackendResult{};
        result.id = id;
        result.supported = false;
        result.reason = std::string("failed: ") + e.what();
        say(options, id + ": FAILED: " + e.what());
      }
      result.note = note;
      return result;
    };
    const bool per_expert = id == kBaselineBackendId && options.baseline_per_expert;
    MoeBackendResult result =
        per_expert ? attempt(make_cublas_bf16_baseline_backend(BaselineGemmMode::kPerExpert),
                             "GEMMs: one cublasGemmEx per expert (--baseline-per-expert)")
                   : attempt(find_moe_backend(id), id == kBaselineBackendId ? "GEMMs: cublasGemmGroupedBatchedEx" : "");
    if (id == kBaselineBackendId && !per_expert && !result.supported && result.reason.rfind("failed:", 0) == 0) {
      say(options, id + ": retrying with one cublasGemmEx per expert");
      result = attempt(make_cublas_bf16_baseline_backend(BaselineGemmMode::kPerExpert),
                       "GEMMs: one cublasGemmEx per expert (grouped GEMM failed: " + result.reason + ")");
    }
    report.backends.push_back(std::move(result));
  }
  return report;
}

// ---- Output ----

namespace {
const MoeBackendResult* find_baseline(const MoeBenchReport& report) {
  for (const auto& b : report.backends)
    if (b.id == kBaselineBackendId && b.supported) return &b;
  return nullptr;
}
const MoePoint* point_for(const MoeBackendResult& b, int64_t tokens) {
  for (const auto& p : b.points)
    if (p.tokens == tokens) return &p;
  return nullptr;
}
template <typename... Args>
void append(std::string& out, const char* format, Args... args) {
  char buffer[512];
  std::snprintf(buffer, sizeof buffer, format, args...);
  out += buffer;
}
}  // namespace

std::string format_moe_table(const MoeBenchReport& r) {
  std::string out;
  const DeviceInfo& d = r.device;
  append(out, "%s  %s\n", r.preset.c_str(), r.problem.describe().c_str());
  append(out, "GPU %s (SM %d.%d, %d SMs, L2 %.0f MiB), driver %s (CUDA %d.%d), runtime %d.%d; %s; commit %s\n",
         d.name.c_str(), d.sm_major, d.sm_minor, d.multiprocessors, d.l2_bytes / 1048576.0, r.driver.c_str(),
         d.driver_version / 1000, d.driver_version % 1000 / 10, d.runtime_version / 1000, d.runtime_version % 1000 / 10,
         r.date_utc.c_str(), r.commit.c_str());
  append(out, "ceilings: copy %.0f GB/s (read+write, %.1f GiB buffer), BF16 GEMM %lld^3 %.0f TFLOP/s (cublasGemmEx)\n",
         r.ceilings.copy_gbps, r.ceilings.copy_bytes / 1073741824.0, static_cast<long long>(r.ceilings.gemm_size),
         r.ceilings.bf16_tflops);
  append(out, "NVFP4 bytes per expert %.2f MB; weight sets rotated, %d logits sets per replay\n",
         r.bytes_per_expert / 1e6, r.options.runs_per_replay);
  for (const auto& b : r.backends) {
    if (!b.supported) {
      append(out, "%s: not supported: %s\n", b.id.c_str(), b.reason.c_str());
    } else {
      append(out, "[%s] %s activations, %d weight sets, timing: %s%s%s\n", b.id.c_str(),
             std::string(to_string(b.activation)).c_str(), b.weight_sets, b.timing.c_str(),
             b.note.empty() ? "" : "; ", b.note.c_str());
    }
  }
  const MoeBackendResult* baseline = find_baseline(r);
  // Header: per backend  us  GB/s %copy  TFLOP/s %peak ; then the speed-ups.
  append(out, "\n%6s %8s %9s", "T", "experts", "weightMB");
  for (const auto& b : r.backends) {
    if (!b.supported) continue;
    std::string name = b.id;
    if (name.size() > 39) name = name.substr(0, 39);
    append(out, " | %-39s", name.c_str());
  }
  if (baseline) append(out, " | speed-up vs baseline");
  append(out, "\n%6s %8s %9s", "", "", "");
  for (const auto& b : r.backends) {
    if (!b.supported) continue;
    append(out, " | %9s %7s %5s %7s %5s  ", "us", "GB/s", "%copy", "TFLOP/s", "%peak");
  }
  append(out, "\n");
  for (int64_t t : r.options.tokens) {
    const MoePoint* any = nullptr;
    for (const auto& b : r.backends)
      if (!any) any = point_for(b, t);
    if (!any) continue;
    append(out, "%6lld %8.1f %9.1f", static_cast<long long>(t), any->unique_experts, any->weight_bytes / 1e6);
    for (const auto& b : r.backends) {
      if (!b.supported) continue;
      const MoePoint* p = point_for(b, t);
      if (!p) {
        append(out, " | %-39s", "-");
        continue;
      }
      append(out, " | %9.1f %7.0f %5.1f %7.1f %5.1f%s ", p->us, p->gbps, p->pct_copy, p->tflops, p->pct_peak,
             p->warning.empty() ? " " : "!");
    }
    if (baseline) {
      const MoePoint* base = point_for(*baseline, t);
      for (const auto& b : r.backends) {
        if (!b.supported || &b == baseline) continue;
        const MoePoint* p = point_for(b, t);
        if (base && p) append(out, " | %5.2fx", base->us / p->us);
      }
    }
    append(out, "\n");
  }
  bool warned = false;
  for (const auto& b : r.backends)
    for (const auto& p : b.points)
      if (!p.warning.empty()) {
        if (!warned) append(out, "\n");
        warned = true;
        append(out, "! %s T=%lld: %s\n", b.id.c_str(), static_cast<long long>(p.tokens), p.warning.c_str());
      }
  return out;
}

nlohmann::json moe_report_json(const MoeBenchReport& r) {
  using nlohmann::json;
  const DeviceInfo& d = r.device;
  json j;
  j["schema"] = "fp4moe.bench.moe.v1";
  j["date_utc"] = r.date_utc;
  j["commit"] = r.commit;
  j["preset"] = r.preset;
  j["problem"] = {{"describe", r.problem.describe()},
                  {"hidden", r.problem.hidden},
                  {"inter", r.problem.inter},
                  {"num_experts", r.problem.num_experts},
                  {"top_k", r.problem.top_k},
                  {"routing", std::string(to_string(r.problem.routing.method))},
                  {"activation", std::string(to_string(r.problem.activation_mode))}};
  j["gpu"] = {{"name", d.name},
              {"sm", std::to_string(d.sm_major) + "." + std::to_string(d.sm_minor)},
              {"multiprocessors", d.multiprocessors},
              {"memory_bytes", d.memory_bytes},
              {"l2_bytes", d.l2_bytes},
              {"driver", r.driver},
              {"driver_cuda_version", d.driver_version},
              {"runtime_version", d.runtime_version}};
  j["ceilings"] = {{"copy_buffer_bytes", r.ceilings.copy_bytes},
                   {"copy_us", r.ceilings.copy_us},
                   {"copy_gbps_read_plus_write", r.ceilings.copy_gbps},
                   {"copy_repeats", r.ceilings.copy_repeats},
                   {"gemm_size", r.ceilings.gemm_size},
                   {"gemm_us", r.ceilings.gemm_us},
                   {"bf16_tflops", r.ceilings.bf16_tflops},
                   {"gemm_repeats", r.ceilings.gemm_repeats},
                   {"gemm_library", "cublasGemmEx BF16 in/out, CUBLAS_COMPUTE_32F, random inputs"}};
  j["method"] = {{"bytes_per_expert_nvfp4", r.bytes_per_expert},
                 {"weight_sets_requested", r.options.weight_sets},
                 {"runs_per_replay", r.options.runs_per_replay},
                 {"warmup", r.options.timing.warmup},
                 {"min_repeats", r.options.timing.min_repeats},
                 {"max_repeats", r.options.timing.max_repeats},
                 {"budget_ms_per_point", r.options.timing.budget_ms},
                 {"seed", r.options.seed},
                 {"statistic", "median over replays of (replay time / runs_per_replay)"},
                 {"weight_bytes", "unique experts routed (host routing of the same logits) x NVFP4 bytes per expert"},
                 {"useful_flops", "2 * T * K * 3 * H * I"}};
  const MoeBackendResult* baseline = find_baseline(r);
  json backends = json::array();
  for (const auto& b : r.backends) {
    json jb = {{"id", b.id}, {"supported", b.supported}};
    if (!b.note.empty()) jb["note"] = b.note;
    if (!b.supported) {
      jb["reason"] = b.reason;
      backends.push_back(jb);
      continue;
    }
    jb["activation"] = std::string(to_string(b.activation));
    jb["timing"] = b.timing;
    if (!b.timing_note.empty()) jb["timing_note"] = b.timing_note;
    jb["weight_sets"] = b.weight_sets;
    jb["prepare_seconds"] = b.prepare_seconds;
    json points = json::array();
    for (const auto& p : b.points) {
      json jp = {{"tokens", p.tokens},           {"us_median", p.us},
                 {"us_min", p.us_min},           {"us_max", p.us_max},
                 {"repeats", p.repeats},         {"unique_experts", p.unique_experts},
                 {"weight_bytes", p.weight_bytes}, {"gbps", p.gbps},
                 {"pct_copy_bandwidth", p.pct_copy}, {"tflops", p.tflops},
                 {"pct_bf16_peak", p.pct_peak}};
      if (p.stored_gbps > 0) jp["bf16_weight_gbps"] = p.stored_gbps;
      if (!p.warning.empty()) jp["warning"] = p.warning;
      if (baseline && &b != baseline) {
        if (const MoePoint* base = point_for(*baseline, p.tokens)) jp["speedup_vs_baseline"] = base->us / p.us;
      }
      points.push_back(jp);
    }
    jb["points"] = points;
    backends.push_back(jb);
  }
  j["backends"] = backends;
  return j;
}

}  // namespace fp4moe::bench
