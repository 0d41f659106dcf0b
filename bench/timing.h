// Timing helpers shared by the ceilings and the MoE benchmark: CUDA events around a region on one
// stream, warm-up first, many repeats, median (METHOD.md). Host code; needs the CUDA runtime.
#pragma once
#include <algorithm>
#include <functional>
#include <vector>

#include "common/error.h"

namespace fp4moe::bench {

// Median of the values (mean of the two middle ones for an even count). Throws on an empty list.
inline double median(std::vector<double> values) {
  FP4MOE_CHECK(!values.empty(), "median of an empty list");
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

struct TimingPlan {
  int warmup = 3;          // untimed calls first
  int min_repeats = 10;    // at least this many timed calls
  int max_repeats = 200;   // at most this many
  double budget_ms = 300;  // stop adding repeats once the timed calls add up to this much
};

// Times `region` (which enqueues work on `stream`) with a pair of CUDA events per call; returns the
// milliseconds of each timed call. Synchronizes the stream between calls.
std::vector<double> time_region_ms(void* stream, const TimingPlan& plan, const std::function<void()>& region);

}  // namespace fp4moe::bench
