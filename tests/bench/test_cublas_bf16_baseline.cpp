// cuda.cublas_bf16.baseline.v1 against the CPU reference, and the device ceilings (label gpu).
// Error budget: the baseline rounds each weight to BF16 after applying its tensor scale (relative
// 2^-9), rounds the GEMM1 output, the SwiGLU output and the GEMM2 output to BF16 (2^-9 each) and sums
// in fp32; these independent roundings give a normalized error of a few 1e-3 over sums of 256+ terms.
// The budget of 2e-2 leaves headroom for that and still fails for any routing, layout or scale bug,
// which moves the output by O(1). Outputs are poisoned (NaN) before every run.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <ostream>

#include "backends/cublas_bf16_baseline.h"
#include "backends/registry.h"
#include "bench/ceilings.h"
#include "bench/moe_bench.h"
#include "common/device_info.h"
#include "common/error.h"
#include "format/bf16.h"
#include "format/synthetic.h"
#include "kernels/cpu/moe_reference.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_buffer.h"

namespace fp4moe {
namespace {

constexpr double kBudget = 2e-2;

bool have_gpu(DeviceInfo* device, std::string* why) {
  const DeviceList list = query_cuda_devices();
  if (list.devices.empty()) {
    *why = list.why_none;
    return false;
  }
  *device = list.devices[0];
  return true;
}

#define REQUIRE_GPU(device)                                          \
  DeviceInfo device;                                                 \
  {                                                                  \
    std::string why;                                                 \
    if (!have_gpu(&device, &why)) GTEST_SKIP() << "no GPU: " << why; \
  }

MoeProblem small_problem(RoutingMethod method) {
  MoeProblem p = make_moe_problem(256, 128, 16, 4, ActivationMode::kW4A16, method);
  if (method == RoutingMethod::kSigmoidGroupedTopk) {
    p.routing.n_group = 4;
    p.routing.topk_group = 2;
    p.routing.routed_scaling_factor = 2.5f;
  }
  p.validate();
  return p;
}

struct Case {
  std::vector<float> hidden, logits, bias, reference;
};

Case make_case(const MoeProblem& p, const MoeWeights& w, int64_t tokens, uint64_t seed, bool one_expert) {
  Case c;
  c.hidden = synthetic_activations(tokens, p.hidden, seed);
  c.logits = synthetic_activations(tokens, p.num_experts, seed + 1, 2.0);
  if (one_expert) {
    // Every token's strongest logit on the last expert: one large group, most experts empty.
    for (int64_t t = 0; t < tokens; ++t) c.logits[static_cast<size_t>(t * p.num_experts + p.num_experts - 1)] = 30.0f;
  }
  if (p.routing.method == RoutingMethod::kSigmoidGroupedTopk) {
    c.bias = synthetic_activations(1, p.num_experts, seed + 2, 0.05);
  }
  c.reference.assign(static_cast<size_t>(tokens * p.hidden), 0.0f);
  moe_reference(p, w, c.hidden, c.logits, c.bias.empty() ? nullptr : c.bias.data(), tokens, c.reference);
  return c;
}

// Runs the prepared baseline on the case; returns the BF16 output bits.
std::vector<uint16_t> run_gpu(PreparedMoe& prepared, const MoeProblem& p, const Case& c, int64_t tokens) {
  std::vector<uint16_t> hidden_bits(c.hidden.size());
  for (size_t i = 0; i < hidden_bits.size(); ++i) hidden_bits[i] = float_to_bf16(c.hidden[i]);
  DeviceBuffer hidden = DeviceBuffer::from_host(hidden_bits);
  DeviceBuffer logits = DeviceBuffer::from_host(c.logits);
  DeviceBuffer bias = c.bias.empty() ? DeviceBuffer() : DeviceBuffer::from_host(c.bias);
  DeviceBuffer out(static_cast<size_t>(tokens * p.hidden) * 2);
  FP4MOE_CUDA_CHECK(cudaMemset(out.get(), 0xFF, out.bytes()));  // 0xFFFF is a BF16 NaN
  DeviceBuffer workspace(prepared.workspace_bytes());
  MoeRunArgs args;
  args.hidden = hidden.get();
  args.router_logits = logits.as<float>();
  args.correction_bias = c.bias.empty() ? nullptr : bias.as<float>();
  args.tokens = tokens;
  args.out = out.get();
  args.workspace = workspace.get();
  args.stream = nullptr;
  prepared.run(args);
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  return out.to_host<uint16_t>();
}

double normalized_error(const std::vector<uint16_t>& out, const std::vector<float>& ref, int64_t* non_finite) {
  double diff = 0, norm = 0;
  *non_finite = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double v = bf16_to_float(out[i]);
    if (!std::isfinite(v)) {
      ++*non_finite;
      continue;
    }
    diff += (v - ref[i]) * (v - ref[i]);
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

struct BaselineCase {
  BaselineGemmMode mode;
  RoutingMethod method;
  const char* name;
};
// Plain names in test listings (ctest's discovery chokes on raw byte dumps of enum tuples).
void PrintTo(const BaselineCase& c, std::ostream* os) { *os << c.name; }

class BaselineTest : public ::testing::TestWithParam<BaselineCase> {};

TEST_P(BaselineTest, MatchesTheCpuReference) {
  REQUIRE_GPU(device);
  const BaselineGemmMode mode = GetParam().mode;
  const MoeProblem p = small_problem(GetParam().method);
  const MoeWeights w = synthetic_moe_weights(p.num_experts, p.hidden, p.inter, 42);
  auto backend = make_cublas_bf16_baseline_backend(mode);
  ASSERT_TRUE(backend->supports(p, device).ok) << backend->supports(p, device).reason;
  auto prepared = backend->prepare(p, w, 257, device);
  for (int64_t tokens : {1, 3, 16, 257}) {
    for (bool one_expert : {false, true}) {
      const Case c = make_case(p, w, tokens, 100 + static_cast<uint64_t>(tokens), one_expert);
      const std::vector<uint16_t> out = run_gpu(*prepared, p, c, tokens);
      int64_t non_finite = 0;
      const double err = normalized_error(out, c.reference, &non_finite);
      EXPECT_EQ(non_finite, 0) << "T=" << tokens << " one_expert=" << one_expert << " (unwritten or NaN outputs)";
      EXPECT_LT(err, kBudget) << "T=" << tokens << " one_expert=" << one_expert;
      // Same inputs, same bits.
      EXPECT_EQ(run_gpu(*prepared, p, c, tokens), out) << "T=" << tokens << ": two runs differ";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, BaselineTest,
    ::testing::Values(BaselineCase{BaselineGemmMode::kGrouped, RoutingMethod::kSoftmaxTopkRenorm, "Grouped_SoftmaxRenorm"},
                      BaselineCase{BaselineGemmMode::kGrouped, RoutingMethod::kSigmoidGroupedTopk, "Grouped_SigmoidGrouped"},
                      BaselineCase{BaselineGemmMode::kPerExpert, RoutingMethod::kSoftmaxTopkRenorm, "PerExpert_SoftmaxRenorm"},
                      BaselineCase{BaselineGemmMode::kPerExpert, RoutingMethod::kSigmoidGroupedTopk, "PerExpert_SigmoidGrouped"}),
    [](const ::testing::TestParamInfo<BaselineCase>& param_info) { return std::string(param_info.param.name); });

TEST(Baseline, IsFoundByIdButIsNoServingBackendAndRefusesW4A4) {
  for (const auto& b : all_moe_backends()) EXPECT_NE(b->id(), bench::kBaselineBackendId);
  auto baseline = find_moe_backend(bench::kBaselineBackendId);
  ASSERT_NE(baseline, nullptr);
  MoeProblem p = small_problem(RoutingMethod::kSoftmaxTopkRenorm);
  p.activation_mode = ActivationMode::kW4A4;
  DeviceInfo device;
  device.sm_major = 9;
  const Support s = baseline->supports(p, device);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("W4A4"), std::string::npos) << s.reason;
}

TEST(Baseline, RefusesGraphCaptureBeforeLaunchingAnything) {
  REQUIRE_GPU(device);
  const MoeProblem p = small_problem(RoutingMethod::kSoftmaxTopkRenorm);
  const MoeWeights w = synthetic_moe_weights(p.num_experts, p.hidden, p.inter, 7);
  auto prepared = make_cublas_bf16_baseline_backend()->prepare(p, w, 8, device);
  DeviceBuffer hidden(8 * 256 * 2), logits(8 * 16 * 4), out(8 * 256 * 2), workspace(prepared->workspace_bytes());
  cudaStream_t stream = nullptr;
  FP4MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  MoeRunArgs args;
  args.hidden = hidden.get();
  args.router_logits = logits.as<float>();
  args.tokens = 8;
  args.out = out.get();
  args.workspace = workspace.get();
  args.stream = stream;
  FP4MOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  EXPECT_THROW(prepared->run(args), Error);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);  // nothing was enqueued, capture intact
  size_t nodes = 99;
  ASSERT_NE(graph, nullptr);
  FP4MOE_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  EXPECT_EQ(nodes, 0u);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  args.tokens = 9;  // over max_tokens
  EXPECT_THROW(prepared->run(args), Error);
}

TEST(Ceilings, AreFinitePositiveAndPlausible) {
  REQUIRE_GPU(device);
  bench::CeilingOptions options;
  options.copy_bytes = int64_t{256} << 20;
  options.gemm_size = 2048;
  const bench::Ceilings c = bench::measure_ceilings(options);
  EXPECT_TRUE(std::isfinite(c.copy_gbps) && c.copy_gbps > 10) << c.copy_gbps;   // any GPU: > 10 GB/s
  EXPECT_LT(c.copy_gbps, 50000);                                                 // and < 50 TB/s
  EXPECT_TRUE(std::isfinite(c.bf16_tflops) && c.bf16_tflops > 1) << c.bf16_tflops;
  EXPECT_LT(c.bf16_tflops, 10000);
  EXPECT_GE(c.copy_repeats, 10);
  EXPECT_GE(c.gemm_repeats, 10);
}

}  // namespace
}  // namespace fp4moe
