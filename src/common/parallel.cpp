#include "common/parallel.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"

namespace fp4moe {

int default_num_threads() {
  if (const char* env = std::getenv("FP4MOE_NUM_THREADS")) {
    char* end = nullptr;
    long value = std::strtol(env, &end, 10);
    FP4MOE_CHECK(end != env && *end == '\0' && value >= 1 && value <= 4096,
                 "FP4MOE_NUM_THREADS must be an integer in [1, 4096], got '", env, "'");
    return static_cast<int>(value);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body, int64_t grain,
                  int num_threads) {
  if (n <= 0) return;
  if (num_threads <= 0) num_threads = default_num_threads();
  grain = std::max<int64_t>(grain, 1);
  int64_t chunks = std::min<int64_t>(num_threads, (n + grain - 1) / grain);
  if (chunks <= 1) {
    body(0, n);
    return;
  }
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto run_chunk = [&](int64_t c) {
    int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    try {
      body(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!first_error) first_error = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(chunks - 1));
  for (int64_t c = 1; c < chunks; ++c) workers.emplace_back(run_chunk, c);
  run_chunk(0);
  for (auto& worker : workers) worker.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace fp4moe
