// Host-only: what each CUDA backend declares as its kernel-variant switches (MoeBackend::
// variant_token_counts), which qualification probes. Every declared count must start a variant, and
// every variant the backend can run for 1..max_tokens must be declared; otherwise a batch size could
// be served by a kernel variant that qualification never ran.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/cuda_sm80_fused_decode.h"
#include "backends/cuda_sm80_pipeline.h"
#include "common/error.h"
#include "kernels/cuda/moe_fused_decode_sm80.h"
#include "kernels/moe_problem.h"
#ifdef FP4MOE_HAVE_SM90A
#include "backends/cuda_sm90_prefill.h"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm90a.h"
#endif

namespace fp4moe {
namespace {

DeviceInfo h200_like() {
  DeviceInfo d;
  d.name = "H200-like (no GPU needed)";
  d.sm_major = 9;
  d.multiprocessors = 132;
  d.shared_memory_per_block_optin = 232448;
  return d;
}

// The declared counts are exactly the first token count of each value of variant(T), T in [1, max].
template <typename VariantOf>
void expect_declares_every_variant(const std::vector<int64_t>& declared, int64_t max_tokens, VariantOf variant) {
  std::vector<int64_t> expected;
  std::vector<decltype(variant(int64_t{1}))> seen;
  for (int64_t t = 1; t <= max_tokens; ++t) {
    const auto v = variant(t);
    if (std::find(seen.begin(), seen.end(), v) == seen.end()) seen.push_back(v), expected.push_back(t);
  }
  EXPECT_EQ(declared, expected);
}

// With the environment variable `knob` set to `value`, reading the knob throws an error containing
// `message`; the variable is unset afterwards.
template <typename ReadKnob>
void expect_knob_rejects(const char* knob, const char* value, ReadKnob read_knob, const std::string& message) {
  setenv(knob, value, 1);
  try {
    read_knob();
    ADD_FAILURE() << knob << "=" << value << " was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
  unsetenv(knob);
}

const MoeProblem kQwen35 = make_moe_problem(4096, 1024, 512, 10, ActivationMode::kW4A16);
const MoeProblem kQwen3_30b = make_moe_problem(2048, 768, 128, 8, ActivationMode::kW4A16);

// A variant is the GEMM tile, whether GEMM1 routes the one token itself (W4A16) and whether GEMM2 may take
// its one-row instances (one token on the decode tile).
auto pipeline_variant(const MoeProblem& problem, bool large_tile_ok, bool w4a4, bool self_route) {
  return [=](int64_t t) {
    const Sm80PipelineTile tile = sm80_pipeline_tile(t, problem.top_k, problem.num_experts, large_tile_ok);
    return std::make_tuple(tile, sm80_pipeline_gemm1_routes(t, tile.m, w4a4, self_route), t == 1 && tile.m == 16);
  };
}

TEST(BackendVariants, PipelineDeclaresEachGemmTileAndTheOneTokenInstances) {
  unsetenv("FP4MOE_SM80_SELF_ROUTE");
  const auto backend = make_cuda_sm80_pipeline_backend();
  for (const MoeProblem& problem : {kQwen35, kQwen3_30b}) {
    for (int64_t max_tokens : {int64_t{1}, int64_t{64}, int64_t{4096}}) {
      const std::vector<int64_t> declared = backend->variant_token_counts(problem, max_tokens, h200_like());
      expect_declares_every_variant(declared, max_tokens, pipeline_variant(problem, true, false, true));
    }
  }
  // qwen3-30b up to 4096 tokens: the self-routed token, the decode tile from 2 tokens, then the 96-row tile
  // (four warps) from 257 tokens.
  EXPECT_EQ(backend->variant_token_counts(kQwen3_30b, 4096, h200_like()), (std::vector<int64_t>{1, 2, 257}));
  // Without the shared memory of the 96- and 128-row tiles, the pipeline picks 64 instead.
  DeviceInfo small = h200_like();
  small.shared_memory_per_block_optin = 101376;  // SM 8.6/8.9-class parts
  expect_declares_every_variant(backend->variant_token_counts(kQwen3_30b, 4096, small), 4096,
                                pipeline_variant(kQwen3_30b, false, false, true));
  // W4A4 gathers quantized rows between the routing and GEMM1, so it keeps the route/align kernel; so does
  // every run with the knob at 0. One token stays a variant of its own: its GEMM2 may take the one-row
  // instances.
  MoeProblem w4a4 = kQwen3_30b;
  w4a4.activation_mode = ActivationMode::kW4A4;
  EXPECT_EQ(backend->variant_token_counts(w4a4, 4096, h200_like()), (std::vector<int64_t>{1, 2, 257}));
  setenv("FP4MOE_SM80_SELF_ROUTE", "0", 1);
  EXPECT_EQ(backend->variant_token_counts(kQwen3_30b, 4096, h200_like()), (std::vector<int64_t>{1, 2, 257}));
  unsetenv("FP4MOE_SM80_SELF_ROUTE");
  EXPECT_FALSE(sm80_pipeline_gemm1_routes(1, 96, false, true));  // only the 16-row decode tile
  EXPECT_FALSE(sm80_pipeline_gemm1_routes(2, 16, false, true));  // only one token
}

// GEMM2 takes its one-row instances for one token on the decode tile, and only where their residency gives
// more K splits than the general instances' (at equal splits they were slower for the small experts).
TEST(BackendVariants, PipelineGemm2TakesOneRowInstancesOnlyForMoreSplits) {
  EXPECT_TRUE(sm80_pipeline_gemm2_one_row(1, 16, 1, 2));
  EXPECT_FALSE(sm80_pipeline_gemm2_one_row(1, 16, 2, 2));  // equal splits
  EXPECT_FALSE(sm80_pipeline_gemm2_one_row(1, 16, 3, 2));
  EXPECT_FALSE(sm80_pipeline_gemm2_one_row(2, 16, 1, 2));  // only one token
  EXPECT_FALSE(sm80_pipeline_gemm2_one_row(1, 96, 1, 2));  // only the 16-row decode tile
}

// The 96-row tile takes four warps, whatever the activation mode, and the measurement knob forces either
// layout (the variants follow: qualification probes what runs).
TEST(BackendVariants, PipelineTile96TakesFourWarpsUnlessTheKnobForcesEight) {
  const auto tile = [](int64_t t, std::optional<Tile96Warps> force = std::nullopt) {
    return sm80_pipeline_tile(t, kQwen35.top_k, kQwen35.num_experts, true, force);
  };
  EXPECT_EQ(tile(819), (Sm80PipelineTile{16}));                       // 15.996 mean rows: the decode tile
  EXPECT_EQ(tile(820), (Sm80PipelineTile{96, Tile96Warps::kFour}));   // 16.02
  EXPECT_EQ(tile(16384), (Sm80PipelineTile{96, Tile96Warps::kFour}));
  EXPECT_EQ(tile(1024, Tile96Warps::kEight), (Sm80PipelineTile{96, Tile96Warps::kEight}));
  EXPECT_EQ(tile(4096, Tile96Warps::kFour), (Sm80PipelineTile{96, Tile96Warps::kFour}));
  EXPECT_EQ(tile(8, Tile96Warps::kEight), (Sm80PipelineTile{16}));  // the decode tile ignores a forced layout
  EXPECT_EQ(sm80_pipeline_tile(4096, kQwen35.top_k, kQwen35.num_experts, false, Tile96Warps::kFour),
            (Sm80PipelineTile{64}));  // nor does the 64-row tile (no 96-row shared memory)

  const auto backend = make_cuda_sm80_pipeline_backend();
  MoeProblem w4a4 = kQwen35;
  w4a4.activation_mode = ActivationMode::kW4A4;
  unsetenv("FP4MOE_SM80_TILE96_WARPS");
  EXPECT_EQ(sm80_pipeline_forced_tile96_warps(), std::nullopt);
  EXPECT_EQ(backend->variant_token_counts(kQwen35, 4096, h200_like()), (std::vector<int64_t>{1, 2, 820}));
  EXPECT_EQ(backend->variant_token_counts(w4a4, 4096, h200_like()), (std::vector<int64_t>{1, 2, 820}));
  setenv("FP4MOE_SM80_TILE96_WARPS", "8", 1);
  EXPECT_EQ(sm80_pipeline_forced_tile96_warps(), Tile96Warps::kEight);
  EXPECT_EQ(backend->variant_token_counts(kQwen35, 4096, h200_like()), (std::vector<int64_t>{1, 2, 820}));
  setenv("FP4MOE_SM80_TILE96_WARPS", "4", 1);
  EXPECT_EQ(sm80_pipeline_forced_tile96_warps(), Tile96Warps::kFour);
  expect_knob_rejects("FP4MOE_SM80_TILE96_WARPS", "6", sm80_pipeline_forced_tile96_warps,
                      "FP4MOE_SM80_TILE96_WARPS must be 4 or 8");
}

// A 0/1 knob read by read_knob: unset gives `unset`, 0 and 1 give false and true, `bad` is an error
// naming the knob. The variable is unset afterwards.
template <typename ReadKnob>
void expect_zero_or_one_knob(const char* knob, bool unset, ReadKnob read_knob, const char* bad) {
  unsetenv(knob);
  EXPECT_EQ(read_knob(), unset) << knob << " unset";
  setenv(knob, "1", 1);
  EXPECT_TRUE(read_knob()) << knob << "=1";
  setenv(knob, "0", 1);
  EXPECT_FALSE(read_knob()) << knob << "=0";
  expect_knob_rejects(knob, bad, read_knob, std::string(knob) + " must be 0 or 1");
}

// FP4MOE_SM80_TABLE_SCALES (measurements): unset or 0 lets the decode tiles skip the scale table where all
// scales are positive normal, 1 forces the table, anything else is an error naming the knob.
TEST(BackendVariants, TableScalesKnobIsZeroOrOne) {
  expect_zero_or_one_knob("FP4MOE_SM80_TABLE_SCALES", false, sm80_pipeline_forced_table_scales, "yes");
}

// FP4MOE_SM80_SELF_ROUTE (measurements, escape hatch): unset or 1 lets one token's GEMM1 route itself, 0
// keeps the route/align kernel, anything else is an error naming the knob.
TEST(BackendVariants, SelfRouteKnobIsZeroOrOne) {
  expect_zero_or_one_knob("FP4MOE_SM80_SELF_ROUTE", true, sm80_pipeline_self_route_enabled, "on");
}

// The fused decode's variants: one token (its own launch-1 shape where the early prime fits), per-CTA
// routing, shared routing (from the threshold on, which depends on the router's size), launch 2's three
// configurations (from 4 and from 9 tokens), several chunks.
TEST(BackendVariants, FusedDecodeDeclaresSharedRoutingAndTheSecondLaunchChunk) {
  unsetenv("FP4MOE_FD_ROUTE_SHARE_FROM");
  const auto backend = make_cuda_sm80_fused_decode_backend();
  const int64_t share = kFusedDecodeRouteShareFromLargeRouter;  // Qwen3.5-397B's router: 512 x 4096
  const int64_t few = kFusedDecodeGemm2FewFrom, many = kFusedDecodeGemm2FewUpTo + 1;
  static_assert(kFusedDecodeGemm2FewFrom < kFusedDecodeRouteShareFromLargeRouter &&
                kFusedDecodeRouteShareFromLargeRouter < kFusedDecodeGemm2FewUpTo + 1 &&
                kFusedDecodeGemm2FewUpTo + 1 == kFusedDecodeRouteShareFromSmallRouter);
  EXPECT_EQ(backend->variant_token_counts(kQwen35, 64, h200_like()), (std::vector<int64_t>{1, 2, few, share, many}));
  EXPECT_EQ(backend->variant_token_counts(kQwen35, 4096, h200_like()),
            (std::vector<int64_t>{1, 2, few, share, many, kFusedDecodeMaxTokens + 1}));
  EXPECT_EQ(backend->variant_token_counts(kQwen35, 1, h200_like()), (std::vector<int64_t>{1}));
  EXPECT_EQ(backend->variant_token_counts(kQwen35, 5, h200_like()), (std::vector<int64_t>{1, 2, few}));
  // Qwen3-30B's router (128 x 2048) routes per CTA up to the last few-token chunk.
  EXPECT_EQ(backend->variant_token_counts(kQwen3_30b, 64, h200_like()), (std::vector<int64_t>{1, 2, few, many}));
  setenv("FP4MOE_FD_ROUTE_SHARE_FROM", "65", 1);  // never shared: one token, more, launch 2's, several chunks
  EXPECT_EQ(backend->variant_token_counts(kQwen35, 4096, h200_like()),
            (std::vector<int64_t>{1, 2, few, many, kFusedDecodeMaxTokens + 1}));
  setenv("FP4MOE_FD_ROUTE_SHARE_FROM", "1", 1);  // always shared
  EXPECT_EQ(backend->variant_token_counts(kQwen35, 64, h200_like()), (std::vector<int64_t>{1, 2, few, many}));
  setenv("FP4MOE_FD_ROUTE_SHARE_FROM", "7", 1);  // inside the few-token configuration: its own variant
  EXPECT_EQ(backend->variant_token_counts(kQwen35, 64, h200_like()), (std::vector<int64_t>{1, 2, few, 7, many}));
  unsetenv("FP4MOE_FD_ROUTE_SHARE_FROM");
}

// Launch 2's configuration by a chunk's tokens: the boundaries the plan and the declared variants share.
TEST(BackendVariants, FusedDecodeLaunch2UseByChunkTokens) {
  for (int64_t t = 1; t <= kFusedDecodeMaxTokens; ++t) {
    const FusedDecodeLaunch2Use expected = t <= 3 ? FusedDecodeLaunch2Use::kLatency
                                           : t <= 8 ? FusedDecodeLaunch2Use::kFew
                                                    : FusedDecodeLaunch2Use::kMany;
    EXPECT_EQ(fused_decode_launch2_use(t), expected) << t << " tokens";
  }
}

// One token's launch 2 takes 8 warps where each then takes one whole expert of at most 8 K chunks (r47:
// measured faster at the first three, slower at the next three; DeepSeek-V3 by the rule, not measured).
TEST(BackendVariants, FusedDecodeOneTokenEightWarpsWhereEachTakesWholeExperts) {
  struct Case {
    const char* preset;
    int64_t hidden, inter, experts, top_k;
    bool eight_warps;
  };
  for (const Case& c : {Case{"qwen3-30b-a3b", 2048, 768, 128, 8, true}, Case{"qwen3.5-35b-a3b", 2048, 512, 256, 8, true},
                        Case{"qwen3.5-122b-a10b", 3072, 1024, 256, 8, true},
                        Case{"qwen3-235b-a22b", 4096, 1536, 128, 8, false},
                        Case{"qwen3-next-80b-a3b", 2048, 512, 512, 10, false},
                        Case{"qwen3.5-397b-a17b", 4096, 1024, 512, 10, false},
                        Case{"deepseek-v3", 7168, 2048, 256, 8, false}}) {
    const MoeProblem w4a16 = make_moe_problem(c.hidden, c.inter, c.experts, c.top_k, ActivationMode::kW4A16);
    EXPECT_EQ(fused_decode_one_token_whole_experts(w4a16), c.eight_warps) << c.preset;
    const MoeProblem w4a4 = make_moe_problem(c.hidden, c.inter, c.experts, c.top_k, ActivationMode::kW4A4);
    EXPECT_FALSE(fused_decode_one_token_whole_experts(w4a4)) << c.preset << " W4A4 (not measured)";
  }
}

// The default threshold by router size E x H: the small-router one up to Qwen3-Next-80B's 512 x 2048
// (measured there, r31), the large-router one above (Qwen3.5-397B's 512 x 4096).
TEST(BackendVariants, FusedDecodeSharesRoutingLaterForSmallRouters) {
  const auto share_from = [](int64_t hidden, int64_t experts) {
    return fused_decode_default_route_share_from(make_moe_problem(hidden, 512, experts, 8, ActivationMode::kW4A16));
  };
  EXPECT_EQ(share_from(2048, 512), kFusedDecodeRouteShareFromSmallRouter);  // Qwen3-Next-80B
  EXPECT_EQ(share_from(3072, 256), kFusedDecodeRouteShareFromSmallRouter);  // Qwen3.5-122B
  EXPECT_EQ(share_from(4096, 128), kFusedDecodeRouteShareFromSmallRouter);  // Qwen3-235B
  EXPECT_EQ(share_from(4096, 512), kFusedDecodeRouteShareFromLargeRouter);  // Qwen3.5-397B
  EXPECT_EQ(share_from(2048 + 64, 512), kFusedDecodeRouteShareFromLargeRouter);  // just above the bound
}

// FP4MOE_FD_ROUTE_SHARE_FROM (measurements, tests): unset = the problem's default, 1..65 taken as given,
// anything else an error naming the knob.
TEST(BackendVariants, FusedDecodeRouteShareKnobIsOneTo65) {
  unsetenv("FP4MOE_FD_ROUTE_SHARE_FROM");
  const auto from_knob = [] { return fused_decode_route_share_from(kQwen35); };
  EXPECT_EQ(from_knob(), fused_decode_default_route_share_from(kQwen35));
  for (const char* value : {"1", "7", "65"}) {
    setenv("FP4MOE_FD_ROUTE_SHARE_FROM", value, 1);
    EXPECT_EQ(from_knob(), std::stoi(value)) << value;
    EXPECT_EQ(fused_decode_route_share_from(kQwen3_30b), std::stoi(value)) << value;
  }
  for (const char* bad : {"0", "66", "-3", "4x", "four"})
    expect_knob_rejects("FP4MOE_FD_ROUTE_SHARE_FROM", bad, from_knob, "FP4MOE_FD_ROUTE_SHARE_FROM must be 1..65");
}

#ifdef FP4MOE_HAVE_SM90A
TEST(BackendVariants, Sm90PrefillDeclaresEachTokenTileOfItsRegisterWeightKernel) {
  unsetenv("FP4MOE_SM90_PREFILL_KERNEL");  // a forced kernel (a measurement knob) has one variant
  const auto backend = make_cuda_sm90_prefill_backend();
  for (const MoeProblem& problem : {kQwen35, kQwen3_30b}) {
    const std::vector<int64_t> declared = backend->variant_token_counts(problem, 16384, h200_like());
    expect_declares_every_variant(declared, 16384, [&](int64_t t) {
      return sm90_regw_choose_tile_tokens(t, static_cast<int>(problem.top_k), static_cast<int>(problem.num_experts));
    });
    EXPECT_GE(declared.size(), 2u) << "both shapes switch token tiles below 16384 tokens";
  }
  // W4A4 runs one kernel with one tile.
  MoeProblem w4a4 = kQwen35;
  w4a4.activation_mode = ActivationMode::kW4A4;
  EXPECT_TRUE(backend->variant_token_counts(w4a4, 16384, h200_like()).empty());
}
#endif

}  // namespace
}  // namespace fp4moe
