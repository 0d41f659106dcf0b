// Progress: a progress bar on stderr for long steps (synth, quantize, inspect scans).
// On a terminal it redraws one line at most every 100 ms (rate-limited, so hot loops may call
// advance() freely); when stderr is not a terminal (CI logs, pipes) it stays quiet and prints
// only the final line. Thread-safe: advance() may be called from worker threads.
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace fp4moe {

class Progress {
 public:
  // total: units of work (bytes when unit is "B", shown as MB/GB); 0 when unknown.
  Progress(std::string label, uint64_t total, std::string unit = "B");
  ~Progress();  // calls finish() if the caller did not
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(uint64_t units);
  // Prints the final line ("label: done, N units in T s (rate)"), once.
  void finish();
  // Set FP4MOE_NO_PROGRESS=1 to silence progress output completely (the final line too).
  static bool enabled();

 private:
  void draw(bool final_line);
  std::string amount(double units) const;

  std::string label_;
  std::string unit_;
  uint64_t total_ = 0;
  uint64_t done_ = 0;
  bool tty_ = false;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  std::mutex mutex_;
};

}  // namespace fp4moe
