#include "common/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fp4moe {

namespace {
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);
}

bool Progress::enabled() {
  const char* v = std::getenv("FP4MOE_NO_PROGRESS");
  return v == nullptr || std::strcmp(v, "") == 0 || std::strcmp(v, "0") == 0;
}

Progress::Progress(std::string label, uint64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), tty_(::isatty(STDERR_FILENO) == 1) {
  start_ = std::chrono::steady_clock::now();
  last_draw_ = start_ - kRedrawInterval;
}

Progress::~Progress() { finish(); }

void Progress::advance(uint64_t units) {
  std::lock_guard<std::mutex> lock(mutex_);
  done_ += units;
  if (!tty_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  draw(false);
}

void Progress::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) return;
  finished_ = true;
  draw(true);
}

std::string Progress::amount(double units) const {
  char buf[64];
  if (unit_ == "B") {
    if (units >= 1e9)
      std::snprintf(buf, sizeof(buf), "%.2f GB", units / 1e9);
    else if (units >= 1e6)
      std::snprintf(buf, sizeof(buf), "%.1f MB", units / 1e6);
    else
      std::snprintf(buf, sizeof(buf), "%.0f kB", units / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f %s", units, unit_.c_str());
  }
  return buf;
}

void Progress::draw(bool final_line) {
  if (!enabled()) return;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = seconds > 0 ? static_cast<double>(done_) / seconds : 0.0;
  std::string line;
  if (final_line) {
    line = label_ + ": done, " + amount(static_cast<double>(done_));
    char buf[64];
    std::snprintf(buf, sizeof(buf), " in %.1f s (%s/s)", seconds, amount(rate).c_str());
    line += buf;
    std::fprintf(stderr, "%s%s\n", tty_ ? "\r\033[K" : "", line.c_str());
    return;
  }
  constexpr int kWidth = 30;
  const double fraction = total_ ? std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_)) : 0.0;
  const int filled = static_cast<int>(fraction * kWidth);
  line = label_ + " [" + std::string(static_cast<size_t>(filled), '#') +
         std::string(static_cast<size_t>(kWidth - filled), '.') + "] ";
  char buf[128];
  if (total_) {
    const double eta = rate > 0 ? static_cast<double>(total_ - std::min(total_, done_)) / rate : 0.0;
    std::snprintf(buf, sizeof(buf), "%3.0f%%  %s / %s  %s/s  ETA %.0f s", fraction * 100,
                  amount(static_cast<double>(done_)).c_str(), amount(static_cast<double>(total_)).c_str(),
                  amount(rate).c_str(), eta);
  } else {
    std::snprintf(buf, sizeof(buf), "%s  %s/s", amount(static_cast<double>(done_)).c_str(), amount(rate).c_str());
  }
  line += buf;
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
}

}  // namespace fp4moe
