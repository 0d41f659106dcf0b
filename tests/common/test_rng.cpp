#include <gtest/gtest.h>

#include <cmath>

#include "common/rng.h"

namespace fp4moe {
namespace {

TEST(Rng, SameSeedSameStreamDifferentSeedDifferentStream) {
  Rng a(42), b(42), c(43);
  bool all_equal_c = true;
  for (int i = 0; i < 100; ++i) {
    uint64_t va = a.next_u64();
    EXPECT_EQ(va, b.next_u64());
    all_equal_c &= (va == c.next_u64());
  }
  EXPECT_FALSE(all_equal_c);
}

TEST(Rng, NormalFastHasUnitMomentsAndBoundedTails) {
  Rng rng(7);
  double sum = 0, sum_sq = 0, max_abs = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double v = rng.normal_fast();
    sum += v;
    sum_sq += v * v;
    max_abs = std::max(max_abs, std::fabs(v));
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.02);
  EXPECT_LE(max_abs, 2.0 * std::sqrt(3.0));
}

}  // namespace
}  // namespace fp4moe
