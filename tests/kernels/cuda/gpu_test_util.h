// Helpers of the CUDA kernel tests: GPU presence (skip with the reason), host<->device copies,
// synthetic router logits, token-row sampling and the reference comparison with the error budgets of
// qualify/tolerances.h.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/device_info.h"
#include "common/rng.h"
#include "format/bf16.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_buffer.h"
#include "qualify/compare.h"
#include "qualify/tolerances.h"

namespace fp4moe::test {

// The first CUDA device with SM80+, or nullptr with the reason in `why`.
inline const DeviceInfo* sm80_device(std::string& why) {
  static const DeviceList list = query_cuda_devices();
  if (list.devices.empty()) {
    why = "no CUDA device: " + list.why_none;
    return nullptr;
  }
  for (const DeviceInfo& d : list.devices)
    if (d.sm() >= 80) return &d;
  why = "no SM80+ device (first is SM" + std::to_string(list.devices[0].sm()) + ")";
  return nullptr;
}

#define FP4MOE_REQUIRE_SM80(device_var)                          \
  std::string fp4moe_why_;                                       \
  const ::fp4moe::DeviceInfo* device_var = ::fp4moe::test::sm80_device(fp4moe_why_); \
  if (!device_var) GTEST_SKIP() << fp4moe_why_;                  \
  FP4MOE_CUDA_CHECK(cudaSetDevice(device_var->ordinal))

inline std::vector<uint16_t> to_bf16_bits(const std::vector<float>& x) {
  std::vector<uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) bits[i] = float_to_bf16(x[i]);
  return bits;
}

// Router logits [T, E] ~ N(0, scale^2) in fp32 (distinct values, so the top-k is well defined).
inline std::vector<float> random_logits(int64_t tokens, int64_t experts, uint64_t seed, double scale = 2.0) {
  Rng rng(seed);
  std::vector<float> logits(static_cast<size_t>(tokens * experts));
  for (float& v : logits) v = static_cast<float>(rng.normal() * scale);
  return logits;
}

// All rows up to 64 tokens; else the first, the last and 30 spread rows (MoE is per-token independent).
inline std::vector<int64_t> sample_rows(int64_t tokens, uint64_t seed) {
  std::vector<int64_t> rows;
  if (tokens <= 64) {
    for (int64_t t = 0; t < tokens; ++t) rows.push_back(t);
    return rows;
  }
  Rng rng(seed ^ 0x5A5A);
  rows.push_back(0);
  for (int i = 1; i <= 30; ++i) {
    const int64_t lo = (tokens - 1) * (i - 1) / 30, hi = (tokens - 1) * i / 30;
    rows.push_back(std::min<int64_t>(tokens - 2, lo + static_cast<int64_t>(rng.below(static_cast<uint64_t>(hi - lo + 1)))));
  }
  rows.push_back(tokens - 1);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

// Every element of a BF16 output written (no poison left) and finite.
inline void expect_all_written_and_finite(const std::vector<uint16_t>& out, const std::string& label) {
  int64_t poison = 0, nonfinite = 0;
  for (uint16_t b : out) {
    if (b == kBf16Poison) ++poison;
    else if ((b & 0x7F80u) == 0x7F80u) ++nonfinite;
  }
  EXPECT_EQ(poison, 0) << label << ": " << poison << " of " << out.size() << " output elements never written";
  EXPECT_EQ(nonfinite, 0) << label << ": " << nonfinite << " output elements are NaN/Inf";
}

// Every element of an fp32 output poisoned with 0xFF bytes (a NaN) written and finite: a NaN or Inf left
// is either an unwritten element or a non-finite result.
inline void expect_all_written_and_finite(const std::vector<float>& out, const std::string& label) {
  int64_t bad = 0;
  for (float x : out) bad += !std::isfinite(x);
  EXPECT_EQ(bad, 0) << label << ": " << bad << " of " << out.size() << " output elements unwritten or non-finite";
}

// Compares the sampled rows with the reference and judges them against the MoE budget; returns the
// result for logging.
inline CompareResult expect_within_budget(const std::vector<uint16_t>& out, const std::vector<float>& ref,
                                          int64_t tokens, int64_t cols, const std::vector<int64_t>& rows,
                                          ActivationMode mode, const std::string& label) {
  const CompareResult r = compare_bf16(out, ref, tokens, cols, kBf16Poison, rows);
  const BudgetVerdict v = judge(r, error_budget(CheckedOp::kMoe, mode));
  EXPECT_TRUE(v.pass) << label << ": " << v.reason << "\n  " << r.describe(cols);
  EXPECT_GT(r.reference_norm, 0.0) << label << ": the reference is all zero (degenerate probe)";
  return r;
}

}  // namespace fp4moe::test
