// The backend-level test harness shared by the CUDA backend tests: Runner prepares one backend on one
// device and runs it on uploaded inputs with a poisoned output (eagerly or as a replayed CUDA graph);
// check_case compares a run with the CPU reference (every element written, finite, within the error
// budget of qualify/tolerances.h) and prints the errors.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "gpu_test_util.h"
#include "kernels/cpu/moe_reference.h"

namespace fp4moe::test {

class Runner {
 public:
  Runner(const std::string& backend_id, const MoeProblem& problem, const MoeWeights& weights, int64_t max_tokens,
         const DeviceInfo& device)
      : problem_(problem) {
    backend_ = find_moe_backend(backend_id);
    const Support s = backend_->supports(problem, device);
    EXPECT_TRUE(s.ok) << s.reason;
    prepared_ = backend_->prepare(problem, weights, max_tokens, device);
    workspace_ = DeviceBuffer(prepared_->workspace_bytes());
    FP4MOE_CUDA_CHECK(cudaMemset(workspace_.get(), 0xFF, workspace_.bytes()));
  }

  // Uploads the inputs (kept for replays), poisons the output, runs eagerly on `stream`.
  std::vector<uint16_t> run(const std::vector<float>& hidden, const std::vector<float>& logits,
                            const std::vector<float>* bias, int64_t tokens, cudaStream_t stream = nullptr) {
    upload(hidden, logits, bias, tokens);
    prepared_->run(args(tokens, stream));
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    return out_.to_host<uint16_t>();
  }

  // Captures one run into a CUDA graph, replays it twice on a poisoned output.
  std::vector<uint16_t> run_graph(int64_t tokens) {
    cudaStream_t stream;
    FP4MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    poison();
    cudaGraph_t graph;
    FP4MOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    prepared_->run(args(tokens, stream));
    FP4MOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec;
    FP4MOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    FP4MOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    poison();
    FP4MOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    FP4MOE_CUDA_CHECK(cudaGraphExecDestroy(exec));
    FP4MOE_CUDA_CHECK(cudaGraphDestroy(graph));
    FP4MOE_CUDA_CHECK(cudaStreamDestroy(stream));
    return out_.to_host<uint16_t>();
  }

 private:
  void upload(const std::vector<float>& hidden, const std::vector<float>& logits, const std::vector<float>* bias,
              int64_t tokens) {
    hidden_ = DeviceBuffer::from_host(to_bf16_bits(hidden));
    logits_ = DeviceBuffer::from_host(logits);
    bias_ = bias ? DeviceBuffer::from_host(*bias) : DeviceBuffer();
    out_ = DeviceBuffer(static_cast<size_t>(tokens * problem_.hidden * 2));
    poison();
  }
  void poison() {
    std::vector<uint16_t> p(out_.bytes() / 2, kBf16Poison);
    FP4MOE_CUDA_CHECK(cudaMemcpy(out_.get(), p.data(), out_.bytes(), cudaMemcpyHostToDevice));
  }
  MoeRunArgs args(int64_t tokens, cudaStream_t stream) {
    MoeRunArgs a;
    a.hidden = hidden_.get();
    a.router_logits = logits_.as<float>();
    a.correction_bias = bias_.bytes() ? bias_.as<float>() : nullptr;
    a.tokens = tokens;
    a.out = out_.get();
    a.workspace = workspace_.get();
    a.stream = stream;
    return a;
  }

  MoeProblem problem_;
  std::unique_ptr<MoeBackend> backend_;
  std::unique_ptr<PreparedMoe> prepared_;
  DeviceBuffer workspace_, hidden_, logits_, bias_, out_;
};

// Runs one case on the GPU and the reference; checks coverage, finiteness and the budget.
inline void check_case(Runner& runner, const MoeProblem& problem, const MoeWeights& weights, const std::vector<float>& hidden,
                const std::vector<float>& logits, const std::vector<float>* bias, int64_t tokens, uint64_t seed,
                const std::string& label) {
  const std::vector<uint16_t> out = runner.run(hidden, logits, bias, tokens);
  expect_all_written_and_finite(out, label);
  const std::vector<int64_t> rows = sample_rows(tokens, seed);
  std::vector<float> ref(static_cast<size_t>(tokens * problem.hidden), 0.0f);
  MoeReferenceOptions options;
  if (static_cast<int64_t>(rows.size()) < tokens) options.token_rows = rows;
  moe_reference(problem, weights, hidden, logits, bias ? bias->data() : nullptr, tokens, ref, options);
  const CompareResult r = expect_within_budget(out, ref, tokens, problem.hidden, rows, problem.activation_mode, label);
  std::printf("[ result ] %-58s rows=%-4zu nerr=%.3e row_nerr=%.3e max_abs=%.3e\n", label.c_str(), rows.size(),
              r.normalized_error, r.max_row_normalized_error, r.max_abs_error);
}

inline MoeProblem with_mode(MoeProblem p, ActivationMode mode) {
  p.activation_mode = mode;
  return p;
}

}  // namespace fp4moe::test
