// Internal helpers of the CPU references; see reference_detail.h. The hot loops (row decoding and
// the fp64 dot) are compiled in several ISA variants (GCC target_clones) and picked at load time;
// every variant performs the same IEEE operations in the same order, so results are identical.
#include "kernels/cpu/reference_detail.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "common/parallel.h"
#include "format/fp_codes.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define FP4MOE_HOT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FP4MOE_HOT_CLONES
#endif

namespace fp4moe::detail {

namespace {

struct DecodeTables {
  std::array<double, 256> e4m3{};
  std::array<double, 16> e2m1{};
  DecodeTables() {
    for (int c = 0; c < 256; ++c) e4m3[c] = e4m3_decode(static_cast<uint8_t>(c));
    for (int c = 0; c < 16; ++c) e2m1[c] = e2m1_decode(static_cast<uint8_t>(c));
  }
};

const DecodeTables& tables() {
  static const DecodeTables instance;
  return instance;
}

}  // namespace

FP4MOE_HOT_CLONES
bool decode_row_unscaled(const Nvfp4View& m, int64_t r, double* out) {
  const DecodeTables& t = tables();
  const int64_t blocks = m.cols / kNvfp4BlockSize;
  const uint8_t* packed = m.packed + r * m.cols / 2;
  const uint8_t* scales = m.scales + r * blocks;
  for (int64_t b = 0; b < blocks; ++b) {
    if ((scales[b] & 0x7F) == 0x7F) return false;
    const double scale = t.e4m3[scales[b]];
    const uint8_t* bytes = packed + b * (kNvfp4BlockSize / 2);
    double* o = out + b * kNvfp4BlockSize;
    for (int j = 0; j < kNvfp4BlockSize / 2; ++j) {
      o[2 * j] = t.e2m1[bytes[j] & 0xF] * scale;
      o[2 * j + 1] = t.e2m1[bytes[j] >> 4] * scale;
    }
  }
  return true;
}

FP4MOE_HOT_CLONES
double dot_f64(const double* a, const double* b, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t j = 0; j < n; j += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[j + l] * b[j + l];
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

void quantize_row_unscaled(const float* x, int64_t n, float input_scale, double* out) {
  const DecodeTables& t = tables();
  uint8_t packed[kNvfp4BlockSize / 2];
  uint8_t code = 0;
  for (int64_t b = 0; b < n / kNvfp4BlockSize; ++b) {
    nvfp4_quantize_block(x + b * kNvfp4BlockSize, input_scale, packed, &code);
    const double scale = t.e4m3[code];
    double* o = out + b * kNvfp4BlockSize;
    for (int j = 0; j < kNvfp4BlockSize / 2; ++j) {
      o[2 * j] = t.e2m1[packed[j] & 0xF] * scale;
      o[2 * j + 1] = t.e2m1[packed[j] >> 4] * scale;
    }
  }
}

void parallel_items(const std::vector<double>& costs, int threads, const std::function<void(int64_t)>& fn) {
  const int64_t n = static_cast<int64_t>(costs.size());
  if (n == 0) return;
  threads = std::max(1, threads);
  // start[th]: first item of thread th. Item i goes to the thread whose share of the total cost
  // contains the cost accumulated before it, which keeps the ranges contiguous and ordered.
  double total = 0.0;
  for (double c : costs) total += c;
  std::vector<int64_t> start(static_cast<size_t>(threads) + 1, n);
  start[0] = 0;
  double before = 0.0;
  int next = 1;
  for (int64_t i = 0; i < n && next < threads; ++i) {
    while (next < threads && before >= total * next / threads) start[next++] = i;
    before += costs[i];
  }
  parallel_for(threads, [&](int64_t th_begin, int64_t th_end) {
    for (int64_t th = th_begin; th < th_end; ++th) {
      for (int64_t i = start[th]; i < start[th + 1]; ++i) fn(i);
    }
  }, 1, threads);
}

}  // namespace fp4moe::detail
