#include "qualify/worker.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/device_info.h"
#include "common/error.h"
#include "kernels/cpu/moe_reference.h"
#include "qualify/compare.h"
#include "qualify/job.h"
#include "qualify/probes.h"

#ifdef FP4MOE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_buffer.h"
#endif

namespace fp4moe {
namespace {

using nlohmann::json;

void emit(const std::string& line) {
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  FP4MOE_CHECK(in.good(), "cannot read qualification job ", path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_output(const std::string& path, const std::vector<uint16_t>& bits) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bits.data()), static_cast<std::streamsize>(bits.size() * 2));
  FP4MOE_CHECK(out.good(), "cannot write probe output ", path);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

// Average number of distinct experts the routing of these inputs touches (for the bandwidth floor).
double touched_experts(const MoeProblem& problem, const ProbeInputs& in, int64_t tokens) {
  std::vector<int32_t> ids(static_cast<size_t>(tokens * problem.top_k));
  std::vector<float> weights(ids.size());
  route_reference(problem.routing, in.router_logits, tokens, in.correction_bias.data(), ids, weights);
  return static_cast<double>(std::set<int32_t>(ids.begin(), ids.end()).size());
}

// Runs prepared backends on one set of buffers; host or device memory.
class ProbeRunner {
 public:
  virtual ~ProbeRunner() = default;
  // Poisons the output, runs, waits, and returns the raw BF16 output [T, H].
  virtual std::vector<uint16_t> run(PreparedMoe& prepared, const ProbeInputs& in, int64_t tokens) = 0;
  // Median microseconds per run for T tokens over `replays`, inputs rotating over `sets`.
  virtual double time(PreparedMoe& prepared, const std::vector<ProbeInputs>& sets, int64_t tokens, int replays) = 0;
  virtual double copy_bandwidth_gbps() { return 0.0; }
};

class HostRunner final : public ProbeRunner {
 public:
  HostRunner(const MoeProblem& problem, size_t workspace) : problem_(problem), workspace_(workspace) {}
  std::vector<uint16_t> run(PreparedMoe& prepared, const ProbeInputs& in, int64_t tokens) override {
    std::vector<uint16_t> out(static_cast<size_t>(tokens * problem_.hidden), kBf16Poison);
    prepared.run(args(in, out, tokens));
    return out;
  }
  double time(PreparedMoe& prepared, const std::vector<ProbeInputs>& sets, int64_t tokens, int replays) override {
    std::vector<uint16_t> out(static_cast<size_t>(tokens * problem_.hidden));
    std::vector<double> us;
    for (int r = 0; r < replays; ++r) {
      const auto start = std::chrono::steady_clock::now();
      prepared.run(args(sets[r % sets.size()], out, tokens));
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    }
    return median(us);
  }

 private:
  MoeRunArgs args(const ProbeInputs& in, std::vector<uint16_t>& out, int64_t tokens) {
    MoeRunArgs a;
    a.hidden = in.hidden_bf16.data();
    a.router_logits = in.router_logits.data();
    a.correction_bias = in.correction_bias.data();
    a.tokens = tokens;
    a.out = out.data();
    a.workspace = workspace_.data();
    return a;
  }
  MoeProblem problem_;
  std::vector<uint8_t> workspace_;
};

#ifdef FP4MOE_WITH_CUDA
class CudaRunner final : public ProbeRunner {
 public:
  CudaRunner(const MoeProblem& problem, int64_t max_tokens, size_t workspace_bytes)
      : problem_(problem),
        hidden_(static_cast<size_t>(max_tokens * problem.hidden) * 2),
        logits_(static_cast<size_t>(max_tokens * problem.num_experts) * 4),
        bias_(static_cast<size_t>(problem.num_experts) * 4),
        out_(static_cast<size_t>(max_tokens * problem.hidden) * 2),
        workspace_(workspace_bytes) {
    FP4MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaRunner() override { cudaStreamDestroy(stream_); }

  std::vector<uint16_t> run(PreparedMoe& prepared, const ProbeInputs& in, int64_t tokens) override {
    upload(in, hidden_, logits_);
    std::vector<uint16_t> out(static_cast<size_t>(tokens * problem_.hidden), kBf16Poison);
    FP4MOE_CUDA_CHECK(cudaMemcpy(out_.get(), out.data(), out.size() * 2, cudaMemcpyHostToDevice));
    prepared.run(args(hidden_, logits_, tokens));
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream_));  // a kernel fault surfaces here
    FP4MOE_CUDA_CHECK(cudaGetLastError());
    FP4MOE_CUDA_CHECK(cudaMemcpy(out.data(), out_.get(), out.size() * 2, cudaMemcpyDeviceToHost));
    return out;
  }

  double time(PreparedMoe& prepared, const std::vector<ProbeInputs>& sets, int64_t tokens, int replays) override {
    // Each input set in its own buffers; one graph runs them all in turn, so consecutive runs route
    // to different experts and the weights they read are not L2-resident from the previous run.
    std::vector<DeviceBuffer> hidden, logits;
    for (const ProbeInputs& in : sets) {
      hidden.emplace_back(in.hidden_bf16.size() * 2);
      logits.emplace_back(in.router_logits.size() * 4);
      upload(in, hidden.back(), logits.back());
    }
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    FP4MOE_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    for (size_t s = 0; s < sets.size(); ++s) prepared.run(args(hidden[s], logits[s], tokens));
    FP4MOE_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    FP4MOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t start, stop;
    FP4MOE_CUDA_CHECK(cudaEventCreate(&start));
    FP4MOE_CUDA_CHECK(cudaEventCreate(&stop));
    for (int w = 0; w < 3; ++w) FP4MOE_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
    std::vector<double> us;
    for (int r = 0; r < replays; ++r) {
      FP4MOE_CUDA_CHECK(cudaEventRecord(start, stream_));
      FP4MOE_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
      FP4MOE_CUDA_CHECK(cudaEventRecord(stop, stream_));
      FP4MOE_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      FP4MOE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      us.push_back(1000.0 * ms / static_cast<double>(sets.size()));
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return median(us);
  }

  double copy_bandwidth_gbps() override {
    const size_t bytes = size_t{1} << 30;
    DeviceBuffer a(bytes), b(bytes);
    FP4MOE_CUDA_CHECK(cudaMemsetAsync(a.get(), 0x5A, bytes, stream_));
    cudaEvent_t start, stop;
    FP4MOE_CUDA_CHECK(cudaEventCreate(&start));
    FP4MOE_CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<double> gbps;
    for (int r = 0; r < 8; ++r) {
      FP4MOE_CUDA_CHECK(cudaEventRecord(start, stream_));
      FP4MOE_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, stream_));
      FP4MOE_CUDA_CHECK(cudaEventRecord(stop, stream_));
      FP4MOE_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      FP4MOE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (r >= 2) gbps.push_back(2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9);  // read + write
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return median(gbps);
  }

 private:
  void upload(const ProbeInputs& in, DeviceBuffer& hidden, DeviceBuffer& logits) {
    FP4MOE_CUDA_CHECK(cudaMemcpy(hidden.get(), in.hidden_bf16.data(), in.hidden_bf16.size() * 2, cudaMemcpyHostToDevice));
    FP4MOE_CUDA_CHECK(cudaMemcpy(logits.get(), in.router_logits.data(), in.router_logits.size() * 4, cudaMemcpyHostToDevice));
    FP4MOE_CUDA_CHECK(cudaMemcpy(bias_.get(), in.correction_bias.data(), in.correction_bias.size() * 4, cudaMemcpyHostToDevice));
  }
  MoeRunArgs args(const DeviceBuffer& hidden, const DeviceBuffer& logits, int64_t tokens) {
    MoeRunArgs a;
    a.hidden = hidden.get();
    a.router_logits = logits.as<float>();
    a.correction_bias = bias_.as<float>();
    a.tokens = tokens;
    a.out = out_.get();
    a.workspace = workspace_.get();
    a.stream = stream_;
    return a;
  }
  MoeProblem problem_;
  DeviceBuffer hidden_, logits_, bias_, out_, workspace_;
  cudaStream_t stream_ = nullptr;
};
#endif

json device_json(const DeviceInfo& d) {
  return {{"name", d.name}, {"sm", d.sm()}, {"driver_version", d.driver_version}, {"runtime_version", d.runtime_version},
          {"multiprocessors", d.multiprocessors}, {"memory_bytes", d.memory_bytes}};
}

int run_job(const QualifyJob& job, const BackendFactory& factory) {
  std::unique_ptr<MoeBackend> backend = factory(job.backend);
  FP4MOE_CHECK(backend != nullptr, "no backend with id ", job.backend);
  const DeviceList devices = query_cuda_devices();
  DeviceInfo device;
  if (!devices.devices.empty()) device = devices.devices[0];
  emit("DEVICE " + (devices.devices.empty() ? json::object() : device_json(device)).dump());
  if (!backend->runs_on_host() && devices.devices.empty()) {
    emit("SUPPORT no no GPU visible: " + devices.why_none);
    return kWorkerUnsupported;
  }
  const Support support = backend->supports(job.problem, device);
  if (!support.ok) {
    emit("SUPPORT no " + support.reason);
    return kWorkerUnsupported;
  }
  emit("SUPPORT ok");

  std::map<ProbeWeights, std::unique_ptr<PreparedMoe>> prepared;
  auto prepared_for = [&](ProbeWeights variant) -> PreparedMoe& {
    auto it = prepared.find(variant);
    if (it == prepared.end()) {
      MoeWeights weights = make_probe_weights(job.problem, variant, job.weights);
      it = prepared.emplace(variant, backend->prepare(job.problem, weights, job.max_tokens, device)).first;
    }
    return *it->second;
  };
  size_t workspace = prepared_for(ProbeWeights::kStandard).workspace_bytes();
  for (const Probe& p : job.probes) workspace = std::max(workspace, prepared_for(p.weights).workspace_bytes());

  std::unique_ptr<ProbeRunner> runner;
  if (backend->runs_on_host()) {
    runner = std::make_unique<HostRunner>(job.problem, workspace);
  } else {
#ifdef FP4MOE_WITH_CUDA
    runner = std::make_unique<CudaRunner>(job.problem, job.max_tokens, workspace);
#else
    fail("backend ", job.backend, " needs CUDA but this build has none");
#endif
  }
  for (size_t i = 0; i < job.probes.size(); ++i) {
    const Probe& probe = job.probes[i];
    emit("PROBE_BEGIN " + std::to_string(i));
    ProbeInputs in = make_probe_inputs(job.problem, probe);
    std::vector<uint16_t> out = runner->run(prepared_for(probe.weights), in, probe.tokens);
    write_output(job.output_dir + "/probe_" + std::to_string(i) + ".bin", out);
    emit("PROBE_END " + std::to_string(i));
  }
  if (!job.timing_tokens.empty()) {
    const double bandwidth = runner->copy_bandwidth_gbps();
    emit("BANDWIDTH " + std::to_string(bandwidth));
    PreparedMoe& standard = prepared_for(ProbeWeights::kStandard);
    MoeWeights shape_only;  // bytes per expert follow from the shape alone
    shape_only.hidden = job.problem.hidden;
    shape_only.inter = job.problem.inter;
    const auto bytes_per_expert = static_cast<double>(shape_only.bytes_per_expert());
    // Several routings per bucket, so that consecutive runs read different experts (not from L2).
    constexpr int kInputSets = 4;
    json timings = json::array();
    for (int64_t tokens : job.timing_tokens) {
      std::vector<ProbeInputs> sets;
      double experts = 0;
      for (int s = 0; s < kInputSets; ++s) {
        Probe p;
        p.tokens = tokens;
        p.seed = 0xC0FFEEull + static_cast<uint64_t>(tokens) * 16 + static_cast<uint64_t>(s);
        sets.push_back(make_probe_inputs(job.problem, p));
        experts += touched_experts(job.problem, sets.back(), tokens) / kInputSets;
      }
      const double us = runner->time(standard, sets, tokens, job.timing_replays);
      const double floor_us = bandwidth > 0 ? experts * bytes_per_expert / (bandwidth * 1e3) : 0.0;
      timings.push_back({{"tokens", tokens}, {"microseconds", us}, {"floor_microseconds", floor_us}});
    }
    emit("TIMING " + timings.dump());
  }
  emit("DONE");
  return 0;
}

}  // namespace

int qualify_worker_main(const std::string& job_path, const BackendFactory& factory) {
  try {
    return run_job(job_from_json(read_file(job_path)), factory);
  } catch (const std::exception& e) {
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    emit("ERROR " + message);
    return kWorkerError;
  }
}

}  // namespace fp4moe
