// Pure helpers of the MoE benchmark (no GPU needed): token lists, unique experts, FLOP counts,
// medians, and the report's table / JSON derived numbers.
#include <gtest/gtest.h>

#include <set>

#include "bench/moe_bench.h"
#include "common/error.h"
#include "common/rng.h"
#include "io/presets.h"

namespace fp4moe::bench {
namespace {

TEST(BenchHelpers, ParsesTokenLists) {
  EXPECT_EQ(parse_token_list("1,2,4096"), (std::vector<int64_t>{1, 2, 4096}));
  EXPECT_EQ(parse_token_list("7"), (std::vector<int64_t>{7}));
  EXPECT_THROW(parse_token_list(""), Error);
  EXPECT_THROW(parse_token_list("1,,2"), Error);
  EXPECT_THROW(parse_token_list("1,x"), Error);
  EXPECT_THROW(parse_token_list("0"), Error);
  EXPECT_THROW(parse_token_list("-3"), Error);
  EXPECT_THROW(parse_token_list("4a"), Error);
  EXPECT_THROW(parse_token_list("1,"), Error);
}

TEST(BenchHelpers, CountsUniqueExpertsLikeASet) {
  Rng rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t experts = 1 + static_cast<int64_t>(rng.below(600));
    std::vector<int32_t> ids(rng.below(3000));
    std::set<int32_t> distinct;
    for (auto& id : ids) {
      id = static_cast<int32_t>(rng.below(static_cast<uint64_t>(experts)));
      distinct.insert(id);
    }
    EXPECT_EQ(count_unique_experts(ids, experts), static_cast<int64_t>(distinct.size()));
  }
  const std::vector<int32_t> bad = {0, 3};
  EXPECT_THROW(count_unique_experts(bad, 3), Error);
  const std::vector<int32_t> negative = {-1};
  EXPECT_THROW(count_unique_experts(negative, 3), Error);
}

TEST(BenchHelpers, UsefulFlopsOfQwen35) {
  const MoeProblem p = moe_problem_for(model_preset("qwen3.5-397b-a17b"), ActivationMode::kW4A16);
  // One token, 10 experts: GEMM1 2 * 2048 * 4096 + GEMM2 2 * 4096 * 1024 multiply-adds each.
  const double per_expert = 2.0 * 2048 * 4096 + 2.0 * 4096 * 1024;
  EXPECT_DOUBLE_EQ(useful_moe_flops(p, 1), 10 * per_expert);
  EXPECT_DOUBLE_EQ(useful_moe_flops(p, 4096), 4096 * 10 * per_expert);
}

TEST(BenchHelpers, Median) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({9}), 9);
  EXPECT_THROW(median({}), Error);
}

TEST(BenchHelpers, ReportShowsSpeedUpOverTheBaseline) {
  MoeBenchReport r;
  r.preset = "qwen3.5-397b-a17b";
  r.problem = moe_problem_for(model_preset(r.preset), ActivationMode::kW4A16);
  r.options.tokens = {1, 64};
  r.ceilings.copy_gbps = 4000;
  r.ceilings.bf16_tflops = 800;
  auto point = [](int64_t tokens, double us) {
    MoePoint p;
    p.tokens = tokens;
    p.us = us;
    return p;
  };
  MoeBackendResult fast, base;
  fast.id = "cuda.sm80.pipeline.v1";
  base.id = std::string(kBaselineBackendId);
  fast.points = {point(1, 20), point(64, 100)};
  base.points = {point(1, 90), point(64, 250)};
  r.backends = {fast, base};
  const nlohmann::json j = moe_report_json(r);
  ASSERT_EQ(j["backends"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["backends"][0]["points"][0]["speedup_vs_baseline"].get<double>(), 90.0 / 20.0);
  EXPECT_DOUBLE_EQ(j["backends"][0]["points"][1]["speedup_vs_baseline"].get<double>(), 250.0 / 100.0);
  EXPECT_FALSE(j["backends"][1]["points"][0].contains("speedup_vs_baseline"));
  const std::string table = format_moe_table(r);
  EXPECT_NE(table.find("4.50x"), std::string::npos) << table;
  EXPECT_NE(table.find("2.50x"), std::string::npos) << table;
}

}  // namespace
}  // namespace fp4moe::bench
