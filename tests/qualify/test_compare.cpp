#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "format/bf16.h"
#include "qualify/compare.h"
#include "qualify/tolerances.h"

namespace fp4moe {
namespace {

std::vector<uint16_t> to_bits(const std::vector<float>& v) {
  std::vector<uint16_t> bits(v.size());
  floats_to_bf16_bits(v, bits);
  return bits;
}

TEST(Compare, IdenticalOutputHasZeroError) {
  std::vector<float> ref = {1.0f, -2.0f, 0.5f, 3.0f, 0.0f, -0.25f};
  CompareResult r = compare_bf16(to_bits(ref), ref, 2, 3);
  EXPECT_EQ(r.elements, 6);
  EXPECT_TRUE(r.clean());
  EXPECT_EQ(r.normalized_error, 0.0);
  EXPECT_EQ(r.max_abs_error, 0.0);
  EXPECT_EQ(r.max_row_normalized_error, 0.0);
}

TEST(Compare, HandComputedErrors) {
  // ref rows: [3, 4] and [0, 0]; out: [3, 4.5] and [0, 0]. ||d|| = 0.5, ||ref|| = 5.
  std::vector<float> ref = {3.0f, 4.0f, 0.0f, 0.0f};
  std::vector<float> out = {3.0f, 4.5f, 0.0f, 0.0f};
  CompareResult r = compare_bf16(to_bits(out), ref, 2, 2);
  EXPECT_DOUBLE_EQ(r.normalized_error, 0.1);
  EXPECT_DOUBLE_EQ(r.max_abs_error, 0.5);
  EXPECT_EQ(r.max_abs_index, 1);
  EXPECT_DOUBLE_EQ(r.max_row_normalized_error, 0.1);
  EXPECT_EQ(r.worst_row, 0);
  EXPECT_DOUBLE_EQ(r.max_abs_reference, 4.0);
}

TEST(Compare, PoisonCountsAsUnwrittenAndOtherNanAsNan) {
  std::vector<float> ref = {1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<uint16_t> out = to_bits(ref);
  out[1] = kBf16Poison;
  out[2] = 0x7FC0;  // canonical NaN
  out[3] = 0x7F80;  // +Inf
  CompareResult r = compare_bf16(out, ref, 1, 4);
  EXPECT_EQ(r.unwritten, 1);
  EXPECT_EQ(r.nan_or_inf, 2);
  EXPECT_EQ(r.first_bad, 1);
  EXPECT_FALSE(r.clean());
  EXPECT_EQ(r.normalized_error, 0.0);  // the one finite element is exact
  EXPECT_TRUE(std::isnan(bf16_to_float(kBf16Poison)));
  EXPECT_NE(float_to_bf16(std::nanf("")), kBf16Poison);  // our own NaN rounding never makes the poison
  BudgetVerdict v = judge(r, error_budget(CheckedOp::kMoe, ActivationMode::kW4A16));
  EXPECT_FALSE(v.pass);
  EXPECT_NE(v.reason.find("never written"), std::string::npos) << v.reason;
}

TEST(Compare, RowSubsetComparesOnlyThoseRows) {
  std::vector<float> ref = {1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f};
  std::vector<uint16_t> out = to_bits(ref);
  out[0] = kBf16Poison;                // row 0 not written: not compared
  out[5] = float_to_bf16(5.0f);        // row 2 off by 1 in one element
  const std::vector<int64_t> rows = {1, 2};
  CompareResult r = compare_bf16(out, ref, 3, 2, kBf16Poison, rows);
  EXPECT_EQ(r.elements, 4);
  EXPECT_EQ(r.unwritten, 0);
  EXPECT_EQ(r.worst_row, 2);
  EXPECT_DOUBLE_EQ(r.max_abs_error, 1.0);
  EXPECT_DOUBLE_EQ(r.normalized_error, 1.0 / std::sqrt(40.0));
  EXPECT_THROW(compare_bf16(out, ref, 3, 2, kBf16Poison, std::vector<int64_t>{3}), Error);
}

TEST(Compare, F32AndSizeErrors) {
  std::vector<float> ref = {1.0f, 2.0f};
  std::vector<float> out = {1.0f, std::bit_cast<float>(kF32Poison)};
  CompareResult r = compare_f32(out, ref, 1, 2);
  EXPECT_EQ(r.unwritten, 1);
  EXPECT_THROW(compare_f32(out, ref, 1, 3), Error);
  EXPECT_THROW(compare_bf16(std::vector<uint16_t>(3), ref, 1, 2), Error);
  EXPECT_NE(r.describe(2).find("unwritten=1"), std::string::npos) << r.describe(2);
}

TEST(Compare, SampleRows) {
  EXPECT_EQ(sample_rows(3, 8, 1), (std::vector<int64_t>{0, 1, 2}));
  const std::vector<int64_t> rows = sample_rows(4096, 64, 7);
  ASSERT_EQ(rows.size(), 64u);
  EXPECT_EQ(rows.front(), 0);
  EXPECT_EQ(rows.back(), 4095);
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_LT(rows[i - 1], rows[i]);
  EXPECT_EQ(rows, sample_rows(4096, 64, 7));  // deterministic
  EXPECT_NE(rows, sample_rows(4096, 64, 8));
  EXPECT_THROW(sample_rows(10, 1, 0), Error);
}

TEST(Compare, JudgeNamesTheExceededBudget) {
  CompareResult r;
  r.elements = 10;
  r.normalized_error = 0.5;
  BudgetVerdict v = judge(r, error_budget(CheckedOp::kMoe, ActivationMode::kW4A4));
  EXPECT_FALSE(v.pass);
  EXPECT_NE(v.reason.find("normalized error"), std::string::npos) << v.reason;
  r.normalized_error = 0.0;
  EXPECT_TRUE(judge(r, error_budget(CheckedOp::kMoe, ActivationMode::kW4A4)).pass);
}

}  // namespace
}  // namespace fp4moe
