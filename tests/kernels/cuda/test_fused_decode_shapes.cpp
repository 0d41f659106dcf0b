// cuda.sm80.fused_decode.v1 under each of its launch-2 CTA shapes (warps per CTA and ring stages,
// FP4MOE_FD_GEMM2_SHAPE, read when the backend is prepared): every shape must compute the function of
// the CPU reference within the suite's budget, write every element, and be deterministic (two eager
// runs and a graph replay give the same bits). H = 6144 gives 384 row blocks of 16, more than the
// resident grid of any shape on an H200 (at most 264 CTAs), so the persistent loop's later row blocks
// (their ring filled after griddepcontrol.wait) run too. A shape whose unit split, accumulator
// reduction or ring is wrong fails here even when the default shape passes the backend suite. The
// second test compares launch 1's shared routing with its per-CTA routing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backend_runner.h"
#include "format/synthetic.h"
#include "gpu_test_util.h"
#include "kernels/cuda/moe_fused_decode_sm80.h"

namespace fp4moe {
namespace {

// Unsets a planning knob however the test ends, so later tests of this binary plan the default.
struct KnobReset {
  const char* knob;
  ~KnobReset() { unsetenv(knob); }
};

TEST(FusedDecodeShapes, EveryLaunch2ShapeMatchesTheReferenceAndIsDeterministic) {
  std::string why;
  const DeviceInfo* device = test::sm80_device(why);
  if (!device) GTEST_SKIP() << why;
  FP4MOE_CUDA_CHECK(cudaSetDevice(device->ordinal));
  const MoeProblem base = make_moe_problem(6144, 256, 32, 4, ActivationMode::kW4A16);
  const MoeWeights weights = synthetic_moe_weights(base.num_experts, base.hidden, base.inter, 21);
  const KnobReset reset{"FP4MOE_FD_GEMM2_SHAPE"};
  for (int shape = 0; shape < kFusedDecodeGemm2ShapeCount; ++shape) {
    ASSERT_EQ(setenv("FP4MOE_FD_GEMM2_SHAPE", std::to_string(shape).c_str(), 1), 0);
    for (ActivationMode mode : {ActivationMode::kW4A16, ActivationMode::kW4A4}) {
      const MoeProblem problem = test::with_mode(base, mode);
      test::Runner runner("cuda.sm80.fused_decode.v1", problem, weights, 70, *device);
      for (int64_t T : {1, 5, 70}) {  // 70: two chunks (64 + 6), more than 8 tokens on some experts
        const std::string label = "shape " + std::to_string(shape) + " " + std::string(to_string(mode)) +
                                  " T=" + std::to_string(T);
        const std::vector<float> hidden = synthetic_activations(T, problem.hidden, 31 + T);
        const std::vector<float> logits = test::random_logits(T, problem.num_experts, 41 + T);
        test::check_case(runner, problem, weights, hidden, logits, nullptr, T, 1, label);
        const std::vector<uint16_t> first = runner.run(hidden, logits, nullptr, T);
        const std::vector<uint16_t> second = runner.run(hidden, logits, nullptr, T);
        EXPECT_TRUE(first == second) << label << ": two eager runs differ";
        EXPECT_TRUE(first == runner.run_graph(T)) << label << ": graph replay differs from eager";
      }
    }
  }
}

// Launch 1's two routings (SharedRoute in moe_fused_decode_sm80.cu): each token routed by one CTA and
// shared through the workspace (FP4MOE_FD_ROUTE_SHARE_FROM=1: at every token count), or by every CTA
// itself (=65: never shared). Same slots, same sums: the outputs must be the same bits, eager and in
// graph replays (each launch's flags carry a new tag; the workspace starts as 0xFF bytes).
TEST(FusedDecodeRouting, SharedAndPerCtaRoutingGiveTheSameBits) {
  std::string why;
  const DeviceInfo* device = test::sm80_device(why);
  if (!device) GTEST_SKIP() << why;
  FP4MOE_CUDA_CHECK(cudaSetDevice(device->ordinal));
  const KnobReset reset{"FP4MOE_FD_ROUTE_SHARE_FROM"};
  const MoeProblem problem = make_moe_problem(1024, 256, 64, 6, ActivationMode::kW4A16);
  const MoeWeights weights = synthetic_moe_weights(problem.num_experts, problem.hidden, problem.inter, 23);
  ASSERT_EQ(setenv("FP4MOE_FD_ROUTE_SHARE_FROM", "1", 1), 0);
  test::Runner shared("cuda.sm80.fused_decode.v1", problem, weights, 70, *device);
  ASSERT_EQ(setenv("FP4MOE_FD_ROUTE_SHARE_FROM", "65", 1), 0);
  test::Runner per_cta("cuda.sm80.fused_decode.v1", problem, weights, 70, *device);
  for (int64_t T : {1, 3, 8, 64, 70}) {  // 70: two chunks, the second of 6 tokens
    const std::string label = "T=" + std::to_string(T);
    const std::vector<float> hidden = synthetic_activations(T, problem.hidden, 51 + T);
    const std::vector<float> logits = test::random_logits(T, problem.num_experts, 61 + T);
    test::check_case(shared, problem, weights, hidden, logits, nullptr, T, 1, "shared routing, " + label);
    const std::vector<uint16_t> own = per_cta.run(hidden, logits, nullptr, T);
    EXPECT_TRUE(shared.run(hidden, logits, nullptr, T) == own) << label << ": shared and per-CTA routing differ";
    EXPECT_TRUE(shared.run_graph(T) == own) << label << ": shared routing's graph replays differ";
  }
}

}  // namespace
}  // namespace fp4moe
