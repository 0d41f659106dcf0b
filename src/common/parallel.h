// parallel_for: split [0, n) into contiguous chunks over a fixed number of threads.
// Chunking depends only on n and the thread count, and every index is processed exactly once,
// so results written per index are deterministic whatever the scheduling.
#pragma once
#include <cstdint>
#include <functional>

namespace fp4moe {

// Threads used by parallel_for: FP4MOE_NUM_THREADS if set (>= 1), else the hardware concurrency.
int default_num_threads();

// Calls body(begin, end) on disjoint ranges covering [0, n). Exceptions thrown by body are
// rethrown on the calling thread (the first one wins). grain: smallest chunk worth a thread.
void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& body,
                  int64_t grain = 1, int num_threads = 0);

}  // namespace fp4moe
