// cuda.sm80.fused_decode.v1 under each of its launch-2 CTA shapes (warps per CTA, ring stages, 16 or 32
// rows of H; FP4MOE_FD_GEMM2_SHAPE, read when the backend is prepared; a 32-row shape takes the chunks
// of up to 8 tokens): every shape must compute the function of the CPU reference within the suite's
// budget, write every element, and be deterministic (two eager runs and a graph replay give the same
// bits). H = 6144 gives 384 row blocks of 16 or 192 of 32, more than the resident grid of any shape on
// an H200 (at most 264 or 132 CTAs), so the persistent loop's later row blocks (their ring filled after
// griddepcontrol.wait) run too. A shape whose unit split, accumulator
// reduction or ring is wrong fails here even when the default shape passes the backend suite. The
// routing tests compare launch 1's shared routing with its per-CTA routing, and at one token with its
// early ring prime.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "backend_runner.h"
#include "backends/pipeline_parts.h"
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

// Planning `problem` must fail with an error containing `expected`; `what` names the refused setting.
void expect_plan_error(const MoeProblem& problem, int multiprocessors, const std::string& expected,
                       const std::string& what) {
  try {
    plan_moe_fused_decode(problem, multiprocessors);
    ADD_FAILURE() << what << " was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(FusedDecodeShapes, EveryLaunch2ShapeMatchesTheReferenceAndIsDeterministic) {
  FP4MOE_REQUIRE_SM80(device);
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

// One token where the plan gives launch 2 its own 8-warp configuration (top-8, I <= 1024: every warp one whole
// expert; the suite's problems are top-4): the reference's function, every element written, two eager runs
// and a graph replay the same bits. H = 6144: later row blocks after the wait, as above.
TEST(FusedDecodeShapes, OneTokenEightWarpLaunch2MatchesTheReference) {
  FP4MOE_REQUIRE_SM80(device);
  const KnobReset reset{"FP4MOE_FD_GEMM2_SHAPE"};
  unsetenv("FP4MOE_FD_GEMM2_SHAPE");
  const MoeProblem problem = make_moe_problem(6144, 384, 32, 8, ActivationMode::kW4A16);
  ASSERT_TRUE(fused_decode_one_token_whole_experts(problem));
  ASSERT_EQ(plan_moe_fused_decode(problem, device->multiprocessors).gemm2_one_token.shape,
            kFusedDecodeOneTokenGemm2Shape);
  const MoeWeights weights = synthetic_moe_weights(problem.num_experts, problem.hidden, problem.inter, 23);
  test::Runner runner("cuda.sm80.fused_decode.v1", problem, weights, 2, *device);
  for (int64_t T : {1, 2}) {  // 2: the latency configuration beside it
    const std::string label = "top-8 T=" + std::to_string(T);
    const std::vector<float> hidden = synthetic_activations(T, problem.hidden, 33 + T);
    const std::vector<float> logits = test::random_logits(T, problem.num_experts, 43 + T);
    test::check_case(runner, problem, weights, hidden, logits, nullptr, T, 1, label);
    const std::vector<uint16_t> first = runner.run(hidden, logits, nullptr, T);
    EXPECT_TRUE(first == runner.run(hidden, logits, nullptr, T)) << label << ": two eager runs differ";
    EXPECT_TRUE(first == runner.run_graph(T)) << label << ": graph replay differs from eager";
  }
}

// Launch 1's W4A16 shapes (FP4MOE_FD_GEMM1_SHAPE: 16- or 32-row items, CTAs per SM): the same sums in
// the same order per h element (each 16-row tile's mma chain over the warp's chunks, then the warps in
// order), so every shape must give shape 0's bits, match the CPU reference, and replay the same in a graph.
// I = 384 gives 48 or 24 row blocks per token group, H = 2048 16 chunks (2 per warp).
TEST(FusedDecodeShapes, EveryLaunch1ShapeGivesTheSameBits) {
  FP4MOE_REQUIRE_SM80(device);
  const MoeProblem problem = make_moe_problem(2048, 384, 32, 4, ActivationMode::kW4A16);
  const MoeWeights weights = synthetic_moe_weights(problem.num_experts, problem.hidden, problem.inter, 25);
  const KnobReset reset{"FP4MOE_FD_GEMM1_SHAPE"};
  ASSERT_EQ(setenv("FP4MOE_FD_GEMM1_SHAPE", "0", 1), 0);
  test::Runner base("cuda.sm80.fused_decode.v1", problem, weights, 70, *device);
  for (int shape = 1; shape < kFusedDecodeW4A16Gemm1ShapeCount; ++shape) {
    ASSERT_EQ(setenv("FP4MOE_FD_GEMM1_SHAPE", std::to_string(shape).c_str(), 1), 0);
    test::Runner runner("cuda.sm80.fused_decode.v1", problem, weights, 70, *device);
    for (int64_t T : {1, 3, 8, 64, 70}) {
      const std::string label = "launch-1 shape " + std::to_string(shape) + " T=" + std::to_string(T);
      const std::vector<float> hidden = synthetic_activations(T, problem.hidden, 71 + T);
      const std::vector<float> logits = test::random_logits(T, problem.num_experts, 81 + T);
      test::check_case(runner, problem, weights, hidden, logits, nullptr, T, 1, label);
      const std::vector<uint16_t> expected = base.run(hidden, logits, nullptr, T);
      EXPECT_TRUE(runner.run(hidden, logits, nullptr, T) == expected) << label << ": differs from shape 0";
      EXPECT_TRUE(runner.run_graph(T) == expected) << label << ": graph replay differs from shape 0";
    }
  }
}

// The plan's launch-1 shape: W4A4 always its own (32-row items); FP4MOE_FD_GEMM1_SHAPE takes 0..count-1 for
// W4A16 and is an error naming the knob otherwise, or with W4A4 (it would be ignored there).
TEST(FusedDecodeShapes, Launch1ShapeKnobIsCheckedAndW4A4KeepsItsShape) {
  FP4MOE_REQUIRE_SM80(device);
  const KnobReset reset{"FP4MOE_FD_GEMM1_SHAPE"};
  const MoeProblem w4a16 = make_moe_problem(2048, 384, 32, 4, ActivationMode::kW4A16);
  const MoeProblem w4a4 = test::with_mode(w4a16, ActivationMode::kW4A4);
  unsetenv("FP4MOE_FD_GEMM1_SHAPE");
  const int w4a4_shape = plan_moe_fused_decode(w4a4, device->multiprocessors).gemm1_shape;
  EXPECT_GE(w4a4_shape, kFusedDecodeW4A16Gemm1ShapeCount) << "W4A4 took a W4A16 shape";
  for (int shape = 0; shape < kFusedDecodeW4A16Gemm1ShapeCount; ++shape) {
    ASSERT_EQ(setenv("FP4MOE_FD_GEMM1_SHAPE", std::to_string(shape).c_str(), 1), 0);
    const FusedDecodePlan plan = plan_moe_fused_decode(w4a16, device->multiprocessors);
    EXPECT_EQ(plan.gemm1_shape, shape);
    EXPECT_GT(plan.gemm1_grid, 0);
    EXPECT_GT(plan.gemm1_item_cap, 0);
  }
  for (const char* bad : {"2", "-1", "01", "x"}) {
    ASSERT_EQ(setenv("FP4MOE_FD_GEMM1_SHAPE", bad, 1), 0);
    expect_plan_error(w4a16, device->multiprocessors,
                      "FP4MOE_FD_GEMM1_SHAPE must be 0.." + std::to_string(kFusedDecodeW4A16Gemm1ShapeCount - 1),
                      "FP4MOE_FD_GEMM1_SHAPE=" + std::string(bad));
  }
  ASSERT_EQ(setenv("FP4MOE_FD_GEMM1_SHAPE", "0", 1), 0);
  expect_plan_error(w4a4, device->multiprocessors, "W4A4 has one", "FP4MOE_FD_GEMM1_SHAPE with W4A4");
}

// Launch 1's shape for one-token chunks: the 32-row shape's early-prime twin where the prime fits (H = 4096:
// 4 K steps per warp, more than the 3 stages it issues) and each CTA routes the token itself; the plan's
// shape otherwise: H = 2048, shared routing at one token, W4A4, 16-row items, FP4MOE_FD_EARLY_PRIME=0.
// Other values of that knob are errors naming it.
TEST(FusedDecodeShapes, OneTokenTakesTheEarlyPrimeTwinWhereItFits) {
  FP4MOE_REQUIRE_SM80(device);
  const KnobReset reset1{"FP4MOE_FD_EARLY_PRIME"}, reset2{"FP4MOE_FD_GEMM1_SHAPE"}, reset3{"FP4MOE_FD_ROUTE_SHARE_FROM"};
  for (const char* knob : {"FP4MOE_FD_EARLY_PRIME", "FP4MOE_FD_GEMM1_SHAPE", "FP4MOE_FD_ROUTE_SHARE_FROM"})
    unsetenv(knob);
  const int sms = device->multiprocessors;
  const MoeProblem fits = make_moe_problem(4096, 1024, 512, 10, ActivationMode::kW4A16);  // Qwen3.5-397B's
  const FusedDecodePlan plan = plan_moe_fused_decode(fits, sms);
  if (plan.gemm1_shape != kFusedDecodeDefaultGemm1Shape)
    GTEST_SKIP() << "the early prime has a 32-row twin only, and that shape does not fit this device";
  EXPECT_NE(plan.gemm1_one_token_shape, plan.gemm1_shape);
  EXPECT_GE(plan.gemm1_one_token_shape, kFusedDecodeW4A16Gemm1ShapeCount) << "a knob shape";
  const auto one_token_shape = [&](const MoeProblem& problem) {
    return plan_moe_fused_decode(problem, sms).gemm1_one_token_shape;
  };
  EXPECT_EQ(one_token_shape(make_moe_problem(2048, 1024, 512, 10, ActivationMode::kW4A16)), plan.gemm1_shape)
      << "H = 2048: 2 K steps per warp";
  const FusedDecodePlan w4a4 = plan_moe_fused_decode(test::with_mode(fits, ActivationMode::kW4A4), sms);
  EXPECT_EQ(w4a4.gemm1_one_token_shape, w4a4.gemm1_shape) << "W4A4";
  ASSERT_EQ(setenv("FP4MOE_FD_GEMM1_SHAPE", "0", 1), 0);
  EXPECT_EQ(one_token_shape(fits), 0) << "16-row items";
  unsetenv("FP4MOE_FD_GEMM1_SHAPE");
  ASSERT_EQ(setenv("FP4MOE_FD_ROUTE_SHARE_FROM", "1", 1), 0);
  EXPECT_EQ(one_token_shape(fits), plan.gemm1_shape) << "shared routing at one token";
  unsetenv("FP4MOE_FD_ROUTE_SHARE_FROM");
  ASSERT_EQ(setenv("FP4MOE_FD_EARLY_PRIME", "0", 1), 0);
  EXPECT_EQ(one_token_shape(fits), plan.gemm1_shape) << "FP4MOE_FD_EARLY_PRIME=0";
  ASSERT_EQ(setenv("FP4MOE_FD_EARLY_PRIME", "1", 1), 0);
  EXPECT_EQ(one_token_shape(fits), plan.gemm1_one_token_shape) << "FP4MOE_FD_EARLY_PRIME=1";
  for (const char* bad : {"2", "-1", "on", "01"}) {
    ASSERT_EQ(setenv("FP4MOE_FD_EARLY_PRIME", bad, 1), 0);
    expect_plan_error(fits, sms, "FP4MOE_FD_EARLY_PRIME must be 0..1", "FP4MOE_FD_EARLY_PRIME=" + std::string(bad));
  }
}

// Launch 2's three configurations, by chunk size. Chunks of 1..3 and of more than 8 tokens take the 16-row
// default (its two instances); chunks of 4..8 the 32-row shape where no SM gets more rows than with
// 16-row CTAs (the plan takes the SM count as an argument, so the rule is
// checked for 132 SMs on any device): H = 4096 has 256 tiles, 2 per SM either way, so 128 CTAs of 32
// rows; H = 2048's 128 tiles would be 2 on 64 SMs, so 16-row CTAs (grid 128). FP4MOE_FD_GEMM2_SHAPE forces
// the shape of the chunks of up to 8 tokens, and of the larger ones only with a 16-row shape.
TEST(FusedDecodeShapes, Launch2ShapesFollowTheChunkSizeAndTheRowBalance) {
  FP4MOE_REQUIRE_SM80(device);
  int optin = 0, per_sm = 0;
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device->ordinal));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device->ordinal));
  if (optin < 220 * 1024 || per_sm < 220 * 1024)
    GTEST_SKIP() << "the default shapes need ~210 KiB of shared memory per block and per SM; this device has " << optin
                 << " and " << per_sm;
  const KnobReset reset{"FP4MOE_FD_GEMM2_SHAPE"};
  unsetenv("FP4MOE_FD_GEMM2_SHAPE");
  const MoeProblem wide = make_moe_problem(4096, 512, 64, 8, ActivationMode::kW4A16);
  const MoeProblem narrow = make_moe_problem(2048, 512, 64, 8, ActivationMode::kW4A16);
  const FusedDecodePlan wide_plan = plan_moe_fused_decode(wide, 132);
  EXPECT_EQ(wide_plan.gemm2_latency.shape, kFusedDecodeDefaultGemm2Shape);
  EXPECT_EQ(wide_plan.gemm2_latency.grid, 4096 / 16);  // 2 CTAs per SM: 264 resident
  EXPECT_EQ(wide_plan.gemm2_few.shape, kFusedDecodeGemm2FewShape);
  EXPECT_EQ(wide_plan.gemm2_few.grid, 4096 / 32);
  EXPECT_EQ(wide_plan.gemm2_many.shape, kFusedDecodeDefaultGemm2Shape);
  EXPECT_EQ(wide_plan.gemm2_many.grid, 4096 / 16);
  EXPECT_LT(wide_plan.gemm2_latency.smem, wide_plan.gemm2_many.smem) << "the one-tile instance holds 8 tokens, not 64";
  const FusedDecodePlan narrow_plan = plan_moe_fused_decode(narrow, 132);
  // One token at top-8 and I = 512: 8 warps, one whole expert each (fused_decode_one_token_whole_experts).
  EXPECT_EQ(wide_plan.gemm2_one_token.shape, kFusedDecodeOneTokenGemm2Shape);
  EXPECT_EQ(narrow_plan.gemm2_one_token.shape, kFusedDecodeOneTokenGemm2Shape);
  EXPECT_EQ(narrow_plan.gemm2_one_token.grid, 2048 / 16);
  const FusedDecodePlan top10_plan = plan_moe_fused_decode(make_moe_problem(2048, 512, 64, 10, ActivationMode::kW4A16), 132);
  EXPECT_EQ(top10_plan.gemm2_one_token.shape, top10_plan.gemm2_latency.shape) << "top-10: the latency configuration";
  EXPECT_EQ(top10_plan.gemm2_one_token.grid, top10_plan.gemm2_latency.grid);
  EXPECT_EQ(narrow_plan.gemm2_latency.shape, kFusedDecodeDefaultGemm2Shape);
  EXPECT_EQ(narrow_plan.gemm2_few.shape, kFusedDecodeDefaultGemm2Shape) << "32-row CTAs would leave SMs idle";
  EXPECT_EQ(narrow_plan.gemm2_few.grid, 2048 / 16);
  ASSERT_EQ(setenv("FP4MOE_FD_GEMM2_SHAPE", std::to_string(kFusedDecodeGemm2FewShape).c_str(), 1), 0);
  const FusedDecodePlan forced = plan_moe_fused_decode(narrow, 132);
  EXPECT_EQ(forced.gemm2_latency.shape, kFusedDecodeGemm2FewShape);
  EXPECT_EQ(forced.gemm2_one_token.shape, kFusedDecodeGemm2FewShape) << "the knob forces one token's shape too";
  EXPECT_EQ(forced.gemm2_few.shape, kFusedDecodeGemm2FewShape);
  EXPECT_EQ(forced.gemm2_few.grid, 2048 / 32);
  EXPECT_EQ(forced.gemm2_many.shape, kFusedDecodeDefaultGemm2Shape) << "a 32-row shape took chunks of 64 tokens";
  ASSERT_EQ(setenv("FP4MOE_FD_GEMM2_SHAPE", "0", 1), 0);
  const FusedDecodePlan eight_warps = plan_moe_fused_decode(wide, 132);
  for (const FusedDecodeLaunch2& launch :
       {eight_warps.gemm2_latency, eight_warps.gemm2_few, eight_warps.gemm2_many, eight_warps.gemm2_one_token})
    EXPECT_EQ(launch.shape, 0);
  for (const std::string& bad : {std::to_string(kFusedDecodeGemm2ShapeCount), std::string("x")}) {
    ASSERT_EQ(setenv("FP4MOE_FD_GEMM2_SHAPE", bad.c_str(), 1), 0);
    expect_plan_error(wide, 132, "FP4MOE_FD_GEMM2_SHAPE must be 0..", "FP4MOE_FD_GEMM2_SHAPE=" + bad);
  }
}

// Launch 2's early start beside an SM's last launch-1 CTA needs one CTA of each in an SM sub-partition's
// register file (fused_decode_register_fit; docs/perf/2026-12-01-h200-r23.md: 1.5-1.7 us at one token of
// Qwen3.5-397B when it did not). The pair that one token runs (the plan's launch-1 shape and its latency
// launch 2, one-tile instance) must fit, for W4A16 and (since r24, docs/perf/2026-12-01-h200-r24.md) W4A4,
// with the scale table and table-free (the weights choose; the latency instance of launch 2 is table-free
// only where that fits: plan.gemm2_latency_table_free); the 20-warp 32-row launch 2 cannot (5 warps on a
// sub-partition).
// Unknown shapes and a 32-row shape's many-token instance are errors naming them.
TEST(FusedDecodeRegisters, OneTokenLaunch2FitsBesideTheLastLaunch1Cta) {
  FP4MOE_REQUIRE_SM80(device);
  const KnobReset reset1{"FP4MOE_FD_GEMM1_SHAPE"}, reset2{"FP4MOE_FD_GEMM2_SHAPE"};
  unsetenv("FP4MOE_FD_GEMM1_SHAPE");
  unsetenv("FP4MOE_FD_GEMM2_SHAPE");
  const MoeProblem problem = make_moe_problem(4096, 1024, 512, 10, ActivationMode::kW4A16);  // Qwen3.5-397B's
  const FusedDecodePlan plan = plan_moe_fused_decode(problem, device->multiprocessors);
  int per_sm = 0;
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxRegistersPerMultiprocessor, device->ordinal));
  for (const bool table_free : {false, true}) {
    SCOPED_TRACE(table_free ? "table-free scales" : "scale table");
    // The weights choose table-free scales; launch 2's latency instance takes them only where they fit.
    const bool latency_table_free = table_free && plan.gemm2_latency_table_free;
    const FusedDecodeRegisterFit fit =
        fused_decode_register_fit(plan.gemm1_shape, table_free, plan.gemm2_latency.shape, true, latency_table_free);
    EXPECT_EQ(fit.sub_partition_registers, per_sm / 4);
    EXPECT_GT(fit.gemm1_registers, 0);
    EXPECT_GT(fit.gemm2_registers, 0);
    EXPECT_TRUE(fit.fits()) << "launch 1 (shape " << plan.gemm1_shape << ") at " << fit.gemm1_registers
                            << " registers and launch 2 (shape " << plan.gemm2_latency.shape << ") at "
                            << fit.gemm2_registers << " take " << fit.needed << " of a sub-partition's "
                            << fit.sub_partition_registers << " registers";
    const MoeProblem w4a4 = make_moe_problem(4096, 1024, 512, 10, ActivationMode::kW4A4);
    const FusedDecodePlan w4a4_plan = plan_moe_fused_decode(w4a4, device->multiprocessors);
    const FusedDecodeRegisterFit w4a4_fit =
        fused_decode_register_fit(w4a4_plan.gemm1_shape, table_free, w4a4_plan.gemm2_latency.shape, true,
                                  table_free && w4a4_plan.gemm2_latency_table_free);
    EXPECT_TRUE(w4a4_fit.fits()) << "W4A4: launch 1 at " << w4a4_fit.gemm1_registers << " registers, launch 2 at "
                                 << w4a4_fit.gemm2_registers << ": " << w4a4_fit.needed << " of "
                                 << w4a4_fit.sub_partition_registers;
    const FusedDecodeRegisterFit one_token =
        fused_decode_register_fit(plan.gemm1_one_token_shape, table_free, plan.gemm2_latency.shape, true,
                                  latency_table_free);
    EXPECT_TRUE(one_token.fits()) << "one-token launch 1 (shape " << plan.gemm1_one_token_shape << ") at "
                                  << one_token.gemm1_registers << " registers: " << one_token.needed << " of "
                                  << one_token.sub_partition_registers;
  }
  const FusedDecodeRegisterFit wide =
      fused_decode_register_fit(plan.gemm1_shape, false, kFusedDecodeGemm2FewShape, true, false);
  EXPECT_FALSE(wide.fits()) << wide.needed << " of " << wide.sub_partition_registers;
  EXPECT_GT(wide.needed, fused_decode_register_fit(plan.gemm1_shape, false, plan.gemm2_latency.shape, true, false).needed);
  const auto expect_error = [](int gemm1_shape, int gemm2_shape, bool one_tile, const std::string& expected) {
    try {
      fused_decode_register_fit(gemm1_shape, false, gemm2_shape, one_tile, false);
      ADD_FAILURE() << "shapes " << gemm1_shape << ", " << gemm2_shape << " were accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  expect_error(-1, kFusedDecodeDefaultGemm2Shape, true, "unknown launch-1 shape -1");
  expect_error(kFusedDecodeDefaultGemm1Shape, kFusedDecodeGemm2ShapeCount, true,
               "unknown launch-2 shape " + std::to_string(kFusedDecodeGemm2ShapeCount));
  expect_error(kFusedDecodeDefaultGemm1Shape, kFusedDecodeGemm2FewShape, false, "takes chunks of at most");
}

// Launch 1's two routings (SharedRoute in moe_fused_decode_sm80.cu): each token routed by one CTA and
// shared through the workspace (FP4MOE_FD_ROUTE_SHARE_FROM=1: at every token count), or by every CTA
// itself (=65: never shared). Same slots, same sums: the outputs must be the same bits, eager and in
// graph replays (each launch's flags carry a new tag; the workspace starts as 0xFF bytes).
TEST(FusedDecodeRouting, SharedAndPerCtaRoutingGiveTheSameBits) {
  FP4MOE_REQUIRE_SM80(device);
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

// Logits e * step for experts e = 0..E-1 (one token): the top-k finds its winners in id order.
std::vector<float> ramp_logits(int64_t experts, float step) {
  std::vector<float> logits(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) logits[static_cast<size_t>(e)] = step * static_cast<float>(e);
  return logits;
}

// One token with H = 4096 (4 K steps per warp): launch 1's early-prime twin primes each warp's ring as soon
// as the top-k round that finds its CTA's first item is over (round q of item (q, rb); EarlyPrimeHook),
// before the other rounds and the slot sort. The ordinary shape (FP4MOE_FD_EARLY_PRIME=0) and shared
// routing (flag round trip, no early prime) give the same slots and sums, so the bits must match both,
// for winners found in any order of their ids and for ties. I = 1024 gives 64 items per expert: at top-6,
// 384 items, more than an H200's 264 CTAs, so CTAs with a second item and (on larger parts) CTAs without
// any run too; at top-2, 128 items, so the CTAs from 128 on wait for a round q >= K that never comes.
TEST(FusedDecodeRouting, OneTokenEarlyPrimeGivesTheOrdinaryBits) {
  FP4MOE_REQUIRE_SM80(device);
  const KnobReset reset1{"FP4MOE_FD_ROUTE_SHARE_FROM"}, reset2{"FP4MOE_FD_EARLY_PRIME"};
  for (const int top_k : {6, 2}) {
    unsetenv("FP4MOE_FD_ROUTE_SHARE_FROM");
    unsetenv("FP4MOE_FD_EARLY_PRIME");
    const MoeProblem problem = make_moe_problem(4096, 1024, 8, top_k, ActivationMode::kW4A16);
    const FusedDecodePlan plan = plan_moe_fused_decode(problem, device->multiprocessors);
    if (plan.gemm1_one_token_shape == plan.gemm1_shape)
      GTEST_SKIP() << "no early-prime twin of launch 1's shape " << plan.gemm1_shape << " runs on this device";
    const MoeWeights weights = synthetic_moe_weights(problem.num_experts, problem.hidden, problem.inter, 27);
    test::Runner early("cuda.sm80.fused_decode.v1", problem, weights, 1, *device);
    ASSERT_EQ(setenv("FP4MOE_FD_EARLY_PRIME", "0", 1), 0);
    test::Runner ordinary("cuda.sm80.fused_decode.v1", problem, weights, 1, *device);
    unsetenv("FP4MOE_FD_EARLY_PRIME");
    ASSERT_EQ(setenv("FP4MOE_FD_ROUTE_SHARE_FROM", "1", 1), 0);
    test::Runner shared("cuda.sm80.fused_decode.v1", problem, weights, 1, *device);
    const int64_t E = problem.num_experts;
    const std::vector<std::pair<std::string, std::vector<float>>> cases = {
        {"random", test::random_logits(1, E, 91)},
        {"winners in descending id order", ramp_logits(E, 1.0f)},
        {"winners in ascending id order", ramp_logits(E, -1.0f)},
        {"all tied", std::vector<float>(E, 0.5f)},
    };
    const std::vector<float> hidden = synthetic_activations(1, problem.hidden, 93);
    for (const auto& [case_name, logits] : cases) {
      const std::string name = "top-" + std::to_string(top_k) + ", " + case_name;
      test::check_case(early, problem, weights, hidden, logits, nullptr, 1, 1, "early prime, " + name);
      const std::vector<uint16_t> expected = ordinary.run(hidden, logits, nullptr, 1);
      EXPECT_TRUE(early.run(hidden, logits, nullptr, 1) == expected) << name << ": differs from the ordinary shape";
      EXPECT_TRUE(early.run_graph(1) == expected) << name << ": graph replay differs from the ordinary shape";
      EXPECT_TRUE(shared.run(hidden, logits, nullptr, 1) == expected) << name << ": differs from shared routing";
    }
  }
}

// The block scales built from their codes (table-free: every scale of the matrix is a positive normal
// E4M3 code, as the synthetic weights' are) and loaded from the table (FP4MOE_FD_TABLE_SCALES=1) must give
// the same bits, W4A16 and W4A4, at token counts that run every instance the plan takes: 1 (the one-token
// launch-1 shape; H = 4096 gives W4A16 its early-prime twin), 2 and 5 (per-CTA routing), 8 (shared
// routing, the 32-row launch 2), 64 and 70 (the many-token launch 2; 70 is two chunks). A matrix with
// other codes keeps the table (MoeBackendSuite.E4m3ExtremeBlockScales checks those against the CPU
// reference). The knob takes 0 or 1; anything else is an error naming it.
TEST(FusedDecodeScales, TableFreeScalesGiveTheTableBits) {
  FP4MOE_REQUIRE_SM80(device);
  const KnobReset reset{"FP4MOE_FD_TABLE_SCALES"};
  for (const ActivationMode mode : {ActivationMode::kW4A16, ActivationMode::kW4A4}) {
    const std::string name(to_string(mode));
    const MoeProblem problem = make_moe_problem(4096, 256, 64, 6, mode);
    const int64_t E = problem.num_experts, H = problem.hidden, I = problem.inter;
    const MoeWeights weights = synthetic_moe_weights(E, H, I, 31);
    ASSERT_TRUE(scales_all_positive_normal(weights.w13_scales, E, 2 * I * H / 16) &&
                scales_all_positive_normal(weights.w2_scales, E, H * I / 16))
        << "the table-free instances run only on all-normal scales";
    unsetenv("FP4MOE_FD_TABLE_SCALES");
    EXPECT_FALSE(plan_moe_fused_decode(problem, device->multiprocessors).table_scales_forced);
    test::Runner table_free("cuda.sm80.fused_decode.v1", problem, weights, 70, *device);
    ASSERT_EQ(setenv("FP4MOE_FD_TABLE_SCALES", "1", 1), 0);
    EXPECT_TRUE(plan_moe_fused_decode(problem, device->multiprocessors).table_scales_forced);
    test::Runner table("cuda.sm80.fused_decode.v1", problem, weights, 70, *device);
    for (int64_t T : {1, 2, 5, 8, 64, 70}) {
      const std::string label = name + " T=" + std::to_string(T);
      const std::vector<float> hidden = synthetic_activations(T, H, 71 + T);
      const std::vector<float> logits = test::random_logits(T, E, 81 + T);
      test::check_case(table_free, problem, weights, hidden, logits, nullptr, T, 1, "table-free scales, " + label);
      const std::vector<uint16_t> expected = table.run(hidden, logits, nullptr, T);
      EXPECT_TRUE(table_free.run(hidden, logits, nullptr, T) == expected) << label << ": differs from the table";
      EXPECT_TRUE(table_free.run_graph(T) == expected) << label << ": graph replay differs from the table";
    }
    ASSERT_EQ(setenv("FP4MOE_FD_TABLE_SCALES", "0", 1), 0);
    EXPECT_FALSE(plan_moe_fused_decode(problem, device->multiprocessors).table_scales_forced);
    for (const char* bad : {"2", "yes", "01"}) {
      ASSERT_EQ(setenv("FP4MOE_FD_TABLE_SCALES", bad, 1), 0);
      expect_plan_error(problem, device->multiprocessors, "FP4MOE_FD_TABLE_SCALES must be 0..1",
                        std::string("FP4MOE_FD_TABLE_SCALES=") + bad);
    }
    unsetenv("FP4MOE_FD_TABLE_SCALES");
  }
}

}  // namespace
}  // namespace fp4moe
