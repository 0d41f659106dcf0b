#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "common/error.h"
#include "common/parallel.h"

namespace fp4moe {
namespace {

TEST(ParallelFor, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 7}) {
    for (int64_t n : {0, 1, 5, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      parallel_for(n, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) hits[i]++;
      }, 1, threads);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " threads=" << threads;
    }
  }
}

TEST(ParallelFor, RethrowsWorkerErrors) {
  EXPECT_THROW(parallel_for(100, [](int64_t begin, int64_t) {
    if (begin > 0) fail("boom in a worker");
  }, 1, 4), Error);
}

}  // namespace
}  // namespace fp4moe
