// Every CUDA MoE backend end to end against the CPU reference (moe_reference), one suite
// parameterized by backend id (kBackendsUnderTest): model shapes
// (qwen3.5-397b-a17b, qwen3-30b-a3b, a DeepSeek-V3-shaped sigmoid-grouped problem), token counts 1..4096
// (sampled rows for large T), seeds, W4A16 and W4A4, adversarial routing from crafted logits, E4M3
// extreme block scales, CUDA-graph replay == eager, run-to-run bit identity, and a tiny case for
// compute-sanitizer. Outputs are poisoned before every run; the workspace starts as 0xFF bytes.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>

#include "backends/cuda_sm80_pipeline.h"
#include "backends/registry.h"
#include "format/fp_codes.h"
#include "format/synthetic.h"
#include "backend_runner.h"
#include "gpu_test_util.h"
#include "io/presets.h"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm80.h"
#include "kernels/cpu/moe_reference.h"

namespace fp4moe {
namespace {

using test::check_case;
using test::Runner;
using test::with_mode;

// The backends under test; a backend that does not support the device (e.g. sm_90a code on another GPU)
// skips with its reason.
const char* const kBackendsUnderTest[] = {"cuda.sm80.pipeline.v1", "cuda.sm80.fused_decode.v1",
#ifdef FP4MOE_HAVE_SM90A
                                          "cuda.sm90.prefill.v1",  // registered only in builds with sm_90a
#endif
};

void sweep_model(const std::string& backend_id, const MoeProblem& base, const MoeWeights& weights, const DeviceInfo& device,
                 const std::vector<int64_t>& token_counts, const std::vector<uint64_t>& seeds, int64_t multi_seed_max_t,
                 const std::string& name) {
  const bool grouped = base.routing.method == RoutingMethod::kSigmoidGroupedTopk;
  for (ActivationMode mode : {ActivationMode::kW4A16, ActivationMode::kW4A4}) {
    const MoeProblem problem = with_mode(base, mode);
    Runner runner(backend_id, problem, weights, token_counts.back(), device);
    for (int64_t T : token_counts) {
      for (uint64_t seed : seeds) {
        if (seed != seeds.front() && T > multi_seed_max_t) continue;
        const std::vector<float> hidden = synthetic_activations(T, problem.hidden, seed * 1000 + T);
        const std::vector<float> logits = test::random_logits(T, problem.num_experts, seed * 7777 + T);
        std::vector<float> bias;
        if (grouped) bias = test::random_logits(1, problem.num_experts, seed, 0.05);
        check_case(runner, problem, weights, hidden, logits, grouped ? &bias : nullptr, T, seed,
                   name + " " + std::string(to_string(mode)) + " T=" + std::to_string(T) + " seed=" + std::to_string(seed));
      }
    }
  }
}

const std::vector<int64_t> kTokenCounts = {1, 3, 16, 64, 257, 1024, 4096};

class MoeBackendSuite : public ::testing::TestWithParam<const char*> {
 protected:
  // The device, or a skip: no SM80+ GPU, or the backend does not support this device.
  const DeviceInfo* device_or_skip(std::string& why) {
    const DeviceInfo* device = test::sm80_device(why);
    if (!device) return nullptr;
    const MoeProblem tiny = moe_problem_for(model_preset("tiny"), ActivationMode::kW4A16);
    const Support s = find_moe_backend(GetParam())->supports(tiny, *device);
    if (!s.ok) {
      why = std::string(GetParam()) + " does not run here: " + s.reason;
      return nullptr;
    }
    FP4MOE_CUDA_CHECK(cudaSetDevice(device->ordinal));
    return device;
  }
};

#define FP4MOE_REQUIRE_BACKEND_DEVICE(device_var)                 \
  std::string fp4moe_why_;                                        \
  const ::fp4moe::DeviceInfo* device_var = device_or_skip(fp4moe_why_); \
  if (!device_var) GTEST_SKIP() << fp4moe_why_

TEST_P(MoeBackendSuite, Qwen35_397B) {
  FP4MOE_REQUIRE_BACKEND_DEVICE(device);
  const MoeProblem problem = moe_problem_for(model_preset("qwen3.5-397b-a17b"), ActivationMode::kW4A16);
  const MoeWeights weights = synthetic_moe_weights(problem.num_experts, problem.hidden, problem.inter, 397);
  sweep_model(GetParam(), problem, weights, *device, kTokenCounts, {1, 2}, 64, "qwen3.5-397b");
}

TEST_P(MoeBackendSuite, Qwen3_30B) {
  FP4MOE_REQUIRE_BACKEND_DEVICE(device);
  const MoeProblem problem = moe_problem_for(model_preset("qwen3-30b-a3b"), ActivationMode::kW4A16);
  const MoeWeights weights = synthetic_moe_weights(problem.num_experts, problem.hidden, problem.inter, 30);
  sweep_model(GetParam(), problem, weights, *device, kTokenCounts, {1, 2, 3}, 257, "qwen3-30b");
}

// DeepSeek-V3 routing (256 experts, 8 groups, top-4 groups, top-8, scaling 2.5, correction bias) and
// hidden size; the expert intermediate is cut to 128 so the synthetic weights build in seconds.
TEST_P(MoeBackendSuite, DeepSeekV3Shaped) {
  FP4MOE_REQUIRE_BACKEND_DEVICE(device);
  ModelConfig model = model_preset("deepseek-v3");
  model.moe_inter = 128;
  const MoeProblem problem = moe_problem_for(model, ActivationMode::kW4A16);
  ASSERT_EQ(problem.routing.method, RoutingMethod::kSigmoidGroupedTopk);
  const MoeWeights weights = synthetic_moe_weights(problem.num_experts, problem.hidden, problem.inter, 3);
  sweep_model(GetParam(), problem, weights, *device, kTokenCounts, {1, 2}, 64, "deepseek-v3-shaped");
}

// A small Qwen3-like problem for the adversarial, graph and determinism cases.
MoeProblem small_problem(ActivationMode mode) {
  MoeProblem p = make_moe_problem(1024, 256, 64, 8, mode);
  p.validate();
  return p;
}

TEST_P(MoeBackendSuite, AdversarialRouting) {
  FP4MOE_REQUIRE_BACKEND_DEVICE(device);
  const MoeProblem base = small_problem(ActivationMode::kW4A16);
  const MoeWeights weights = synthetic_moe_weights(base.num_experts, base.hidden, base.inter, 64);
  const int64_t E = base.num_experts;
  for (ActivationMode mode : {ActivationMode::kW4A16, ActivationMode::kW4A4}) {
    const MoeProblem problem = with_mode(base, mode);
    Runner runner(GetParam(), problem, weights, 1024, *device);
    for (int64_t T : {1, 16, 257, 1024}) {
      const std::vector<float> hidden = synthetic_activations(T, problem.hidden, 77 + T);
      struct Pattern {
        const char* name;
        std::function<void(std::vector<float>&)> apply;
      };
      const std::vector<Pattern> patterns = {
          {"all tokens on expert 5", [&](std::vector<float>& l) { for (int64_t t = 0; t < T; ++t) l[t * E + 5] = 50.0f; }},
          {"all tokens on the last expert", [&](std::vector<float>& l) { for (int64_t t = 0; t < T; ++t) l[t * E + E - 1] = 50.0f; }},
          {"same 8 experts for all (56 empty)",
           [&](std::vector<float>& l) { for (int64_t t = 0; t < T; ++t) for (int64_t e = 0; e < E; ++e) l[t * E + e] = e >= 48 && e < 56 ? 10.0f + 0.1f * static_cast<float>(e - 48) : -10.0f; }},
          {"half the experts empty", [&](std::vector<float>& l) { for (int64_t t = 0; t < T; ++t) for (int64_t e = 0; e < E; e += 2) l[t * E + e] -= 40.0f; }},
      };
      for (const Pattern& pattern : patterns) {
        std::vector<float> logits = test::random_logits(T, E, 900 + T);
        pattern.apply(logits);
        check_case(runner, problem, weights, hidden, logits, nullptr, T, 5,
                   std::string("adversarial ") + pattern.name + " " + std::string(to_string(mode)) + " T=" + std::to_string(T));
      }
    }
  }
}

// Block scales at the E4M3 extremes: experts whose blocks all use subnormal scales (0x01..0x07), all
// 448 (0x7E), codes spread over the whole range, and untouched ones. Tensor scales are re-chosen so
// each expert's weights stay O(1/sqrt(fan_in)): a mis-decoded subnormal scale then shows in full.
TEST_P(MoeBackendSuite, E4m3ExtremeBlockScales) {
  FP4MOE_REQUIRE_BACKEND_DEVICE(device);
  MoeProblem base;
  base.hidden = 512, base.inter = 256, base.num_experts = 16, base.top_k = 4;
  base.routing.method = RoutingMethod::kSoftmaxTopkRenorm, base.routing.num_experts = 16, base.routing.top_k = 4;
  base.validate();
  MoeWeights weights = synthetic_moe_weights(base.num_experts, base.hidden, base.inter, 448);
  const int64_t H = base.hidden, I = base.inter;
  Rng rng(448);
  auto rescale = [&](uint8_t* scales, int64_t count, int kind, float fan_in) -> float {
    double mean = 0.0;
    for (int64_t i = 0; i < count; ++i) {
      if (kind == 0) scales[i] = static_cast<uint8_t>(1 + rng.below(7));
      else if (kind == 1) scales[i] = 0x7E;
      else if (kind == 2) scales[i] = static_cast<uint8_t>(1 + rng.below(0x7E));
      mean += e4m3_decode(scales[i]);
    }
    mean /= static_cast<double>(count);
    return static_cast<float>(1.0 / (std::sqrt(fan_in) * 2.0 * mean));  // |e2m1| ~ 2
  };
  for (int64_t e = 0; e < base.num_experts; ++e) {
    const int kind = static_cast<int>(e % 4);
    if (kind == 3) continue;
    const float s13 = rescale(weights.w13_scales.data() + e * 2 * I * H / 16, 2 * I * H / 16, kind, static_cast<float>(H));
    weights.gate_scale2[e] = s13;
    weights.up_scale2[e] = s13 * 1.5f;
    weights.down_scale2[e] = rescale(weights.w2_scales.data() + e * H * I / 16, H * I / 16, kind, static_cast<float>(I));
  }
  weights.validate();
  for (ActivationMode mode : {ActivationMode::kW4A16, ActivationMode::kW4A4}) {
    const MoeProblem problem = with_mode(base, mode);
    Runner runner(GetParam(), problem, weights, 64, *device);
    for (int64_t T : {1, 64}) {
      const std::vector<float> hidden = synthetic_activations(T, H, 31 + T);
      const std::vector<float> logits = test::random_logits(T, base.num_experts, 32 + T);
      check_case(runner, problem, weights, hidden, logits, nullptr, T, 1,
                 std::string("e4m3 extremes ") + std::string(to_string(mode)) + " T=" + std::to_string(T));
    }
  }
}

TEST_P(MoeBackendSuite, GraphReplayMatchesEagerAndRunsAreBitIdentical) {
  FP4MOE_REQUIRE_BACKEND_DEVICE(device);
  const MoeProblem base = small_problem(ActivationMode::kW4A16);
  const MoeWeights weights = synthetic_moe_weights(base.num_experts, base.hidden, base.inter, 9);
  for (ActivationMode mode : {ActivationMode::kW4A16, ActivationMode::kW4A4}) {
    const MoeProblem problem = with_mode(base, mode);
    Runner runner(GetParam(), problem, weights, 300, *device);
    for (int64_t T : {1, 3, 300}) {
      const std::vector<float> hidden = synthetic_activations(T, problem.hidden, 1 + T);
      const std::vector<float> logits = test::random_logits(T, problem.num_experts, 2 + T);
      const std::string label = std::string(to_string(mode)) + " T=" + std::to_string(T);
      const std::vector<uint16_t> first = runner.run(hidden, logits, nullptr, T);
      const std::vector<uint16_t> second = runner.run(hidden, logits, nullptr, T);
      const std::vector<uint16_t> graph = runner.run_graph(T);
      test::expect_all_written_and_finite(first, label);
      EXPECT_TRUE(first == second) << label << ": two eager runs differ";
      EXPECT_TRUE(first == graph) << label << ": graph replay differs from eager";
    }
  }
}

// Small enough for compute-sanitizer (memcheck, racecheck): every kernel and tile config the backend picks
// on this device once (all sm80 GEMM tiles: CudaGroupedGemmTiles).
// Real checkpoints calibrate each expert's input scales; the synthetic weights share one, so no other
// case can tell experts' scales apart. W4A4 with different scales per expert (GEMM1's and GEMM2's, up to
// 4x apart): multiplying another expert's scale back is off by up to 4x; quantizing a row with another
// expert's scale moves its blocks onto another E4M3 grid.
TEST_P(MoeBackendSuite, W4A4PerExpertInputScales) {
  FP4MOE_REQUIRE_BACKEND_DEVICE(device);
  const MoeProblem problem = small_problem(ActivationMode::kW4A4);
  MoeWeights weights = synthetic_moe_weights(problem.num_experts, problem.hidden, problem.inter, 41);
  for (int64_t e = 0; e < problem.num_experts; ++e) {
    weights.w13_input_scale[e] *= 0.5f + 0.25f * static_cast<float>(e % 7);
    weights.w2_input_scale[e] *= 2.0f - 0.25f * static_cast<float>(e % 5);
  }
  weights.validate();
  Runner runner(GetParam(), problem, weights, 64, *device);
  for (int64_t T : {1, 3, 8, 64}) {
    const std::vector<float> hidden = synthetic_activations(T, problem.hidden, 90 + T);
    const std::vector<float> logits = test::random_logits(T, problem.num_experts, 91 + T);
    check_case(runner, problem, weights, hidden, logits, nullptr, T, 1, "per-expert input scales T=" + std::to_string(T));
  }
}

TEST_P(MoeBackendSuite, TinySanitizerCase) {
  FP4MOE_REQUIRE_BACKEND_DEVICE(device);
  const MoeProblem base = moe_problem_for(model_preset("tiny"), ActivationMode::kW4A16);
  const MoeWeights weights = synthetic_moe_weights(base.num_experts, base.hidden, base.inter, 1);
  for (ActivationMode mode : {ActivationMode::kW4A16, ActivationMode::kW4A4}) {
    const MoeProblem problem = with_mode(base, mode);
    Runner runner(GetParam(), problem, weights, 200, *device);
    for (int64_t T : {1, 2, 100, 200}) {  // pipeline tile_m 16 (one token: self-routed), then 96 (64 without its shared memory) for E=16, K=4
      const std::vector<float> hidden = synthetic_activations(T, problem.hidden, 3 + T);
      const std::vector<float> logits = test::random_logits(T, problem.num_experts, 4 + T);
      check_case(runner, problem, weights, hidden, logits, nullptr, T, 1,
                 std::string("tiny ") + std::string(to_string(mode)) + " T=" + std::to_string(T) + " (pipeline tile_m " +
                     std::to_string(sm80_pipeline_tile(T, problem.top_k, problem.num_experts, true).m) + ")");
    }
  }
}

// The split-K decode path (GEMM1 K = 1024 splits 4 ways at T = 2) on a small shape, also for the sanitizer.
TEST_P(MoeBackendSuite, TinySplitKSanitizerCase) {
  FP4MOE_REQUIRE_BACKEND_DEVICE(device);
  MoeProblem base = small_problem(ActivationMode::kW4A16);
  const MoeWeights weights = synthetic_moe_weights(base.num_experts, base.hidden, base.inter, 2);
  ASSERT_GT(grouped_gemm_k_splits(2 * base.inter, base.hidden, 2 * base.top_k, static_cast<int>(base.num_experts), 16,
                                  grouped_gemm_decode_residency(device->ordinal), GemmEpilogue::kSwiglu, false),
            1);
  for (ActivationMode mode : {ActivationMode::kW4A16, ActivationMode::kW4A4}) {
    const MoeProblem problem = with_mode(base, mode);
    Runner runner(GetParam(), problem, weights, 8, *device);
    for (int64_t T : {1, 2, 8}) {
      const std::vector<float> hidden = synthetic_activations(T, problem.hidden, 5 + T);
      const std::vector<float> logits = test::random_logits(T, problem.num_experts, 6 + T);
      check_case(runner, problem, weights, hidden, logits, nullptr, T, 1,
                 std::string("split-K ") + std::string(to_string(mode)) + " T=" + std::to_string(T));
    }
  }
}

TEST_P(MoeBackendSuite, RejectsBadArguments) {
  FP4MOE_REQUIRE_BACKEND_DEVICE(device);
  const MoeProblem problem = moe_problem_for(model_preset("tiny"), ActivationMode::kW4A16);
  const MoeWeights weights = synthetic_moe_weights(problem.num_experts, problem.hidden, problem.inter, 1);
  auto backend = find_moe_backend(GetParam());
  auto prepared = backend->prepare(problem, weights, 8, *device);
  MoeRunArgs args;
  args.tokens = 9;
  EXPECT_THROW(prepared->run(args), Error);  // T > max_tokens
  args.tokens = 4;
  EXPECT_THROW(prepared->run(args), Error);  // null pointers
  MoeProblem odd = problem;
  odd.inter = 96;  // not a multiple of 128
  EXPECT_FALSE(backend->supports(odd, *device).ok);
}

INSTANTIATE_TEST_SUITE_P(Backends, MoeBackendSuite, ::testing::ValuesIn(kBackendsUnderTest),
                         [](const ::testing::TestParamInfo<const char*>& param_info) {
                           std::string name = param_info.param;
                           for (char& c : name)
                             if (c == '.') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace fp4moe
