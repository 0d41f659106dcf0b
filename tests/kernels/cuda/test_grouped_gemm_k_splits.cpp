// Split-K sizing of the sm80 decode GEMM (grouped_gemm_k_splits), host side: the most splits (warps per
// decode CTA) whose CTAs are all resident at once on the device it is given, never fewer than one.
#include <gtest/gtest.h>

#include "common/error.h"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm80.h"

namespace fp4moe {
namespace {

// Qwen3.5-397B at one token: K = 10 rows over 10 experts; GEMM1 N = 2I = 2048, K = H = 4096, so
// 2048 / 32 x 10 = 640 decode CTAs.
constexpr int64_t kH = 4096, kI = 1024, kRows = 10;
constexpr int kE = 512;

constexpr GemmEpilogue kGemm1 = GemmEpilogue::kSwiglu, kGemm2 = GemmEpilogue::kScaleFp32;

// A device of `sms` SMs holding `warps` decode warps per SM for every instance family (register-bound:
// floor(warps / s) CTAs of s warps).
DecodeResidency residency(int sms, int warps) {
  DecodeResidency r;
  r.sms = sms;
  for (auto& family : r.ctas_per_sm)
    for (int s = 1; s <= kMaxKSplits; ++s) family[s] = warps / s;
  return r;
}

TEST(GroupedGemmKSplits, AllCtasResidentOnTheGivenDevice) {
  // H200: 132 SMs x 16 warps: 4 splits fit 528 CTAs, 3 splits 660 >= 640 -> 3.
  EXPECT_EQ(grouped_gemm_k_splits(2 * kI, kH, kRows, kE, 16, residency(132, 16), kGemm1, false), 3);
  // 84 SMs: 2 splits fit 672 CTAs -> 2; with 9 warps per SM, 2 splits fit 336 -> 1.
  EXPECT_EQ(grouped_gemm_k_splits(2 * kI, kH, kRows, kE, 16, residency(84, 16), kGemm1, false), 2);
  EXPECT_EQ(grouped_gemm_k_splits(2 * kI, kH, kRows, kE, 16, residency(84, 9), kGemm1, false), 1);
  // Fewer CTAs than one split needs: still one pass, not zero.
  EXPECT_EQ(grouped_gemm_k_splits(2 * kI, kH, kRows, kE, 16, residency(10, 10), kGemm1, false), 1);
  // GEMM2 (N = H = 4096, K = I = 1024): 1280 CTAs, 2 splits fit 1056 -> unsplit on the H200.
  EXPECT_EQ(grouped_gemm_k_splits(kH, kI, kRows, kE, 16, residency(132, 16), kGemm2, false), 1);
  // Shared memory can bind before registers: 3-warp CTAs limited to 4 per SM -> 528 < 640 -> 2.
  DecodeResidency smem_bound = residency(132, 16);
  smem_bound.ctas_per_sm[decode_family(kGemm1, false)][3] = 4;
  EXPECT_EQ(grouped_gemm_k_splits(2 * kI, kH, kRows, kE, 16, smem_bound, kGemm1, false), 2);
}

TEST(GroupedGemmKSplits, CappedByKAndOnlyForTheDecodeTile) {
  // A very large device: the cap is kMaxKSplits, and each split keeps >= 2 chunks of 128.
  EXPECT_EQ(grouped_gemm_k_splits(2 * kI, kH, kRows, kE, 16, residency(1 << 16, 16), kGemm1, false), kMaxKSplits);
  EXPECT_EQ(grouped_gemm_k_splits(2 * kI, 512, kRows, kE, 16, residency(1 << 16, 16), kGemm1, false), 2);
  EXPECT_EQ(grouped_gemm_k_splits(2 * kI, 256, kRows, kE, 16, residency(1 << 16, 16), kGemm1, false), 1);
  // Prefill tiles: never split.
  EXPECT_EQ(grouped_gemm_k_splits(2 * kI, kH, kRows, kE, 64, residency(1 << 16, 16), kGemm1, false), 1);
}

TEST(GroupedGemmKSplits, EachInstanceFamilyUsesItsOwnResidency) {
  // One token's GEMM2 (1280 CTAs): 2 splits need 10 two-warp CTAs per SM (20 warps) on 132 SMs.
  DecodeResidency r = residency(132, 18);
  EXPECT_EQ(grouped_gemm_k_splits(kH, kI, kRows, kE, 16, r, kGemm2, true), 1);
  for (int s = 1; s <= kMaxKSplits; ++s) r.ctas_per_sm[decode_family(kGemm2, true)][s] = 20 / s;
  EXPECT_EQ(grouped_gemm_k_splits(kH, kI, kRows, kE, 16, r, kGemm2, true), 2);
  // The other families keep theirs: GEMM2's general instances, and the same shape with GEMM1's.
  EXPECT_EQ(grouped_gemm_k_splits(kH, kI, kRows, kE, 16, r, kGemm2, false), 1);
  EXPECT_EQ(grouped_gemm_k_splits(kH, kI, kRows, kE, 16, r, kGemm1, false), 1);
  EXPECT_EQ(grouped_gemm_k_splits(kH, kI, kRows, kE, 16, r, GemmEpilogue::kSwigluNvfp4, false), 1);
  // The families are distinct, and one-row tiles are GEMM2's only.
  EXPECT_NE(decode_family(kGemm2, true), decode_family(kGemm2, false));
  EXPECT_NE(decode_family(kGemm1, false), decode_family(GemmEpilogue::kSwigluNvfp4, false));
  EXPECT_THROW(decode_family(kGemm1, true), Error);
  EXPECT_THROW(decode_family(static_cast<GemmEpilogue>(7), false), Error);
  // A family without a residency (not queried) is an error, not a silent single split.
  DecodeResidency partial = residency(132, 16);
  for (int& ctas : partial.ctas_per_sm[decode_family(kGemm2, true)]) ctas = 0;
  EXPECT_THROW(grouped_gemm_k_splits(kH, kI, kRows, kE, 16, partial, kGemm2, true), Error);
  EXPECT_EQ(grouped_gemm_k_splits(kH, kI, kRows, kE, 16, partial, kGemm2, false), 1);
}

TEST(GroupedGemmKSplits, AnUnknownDeviceIsAnError) {
  EXPECT_THROW(grouped_gemm_k_splits(2 * kI, kH, kRows, kE, 16, DecodeResidency{}, kGemm1, false), Error);
}

}  // namespace
}  // namespace fp4moe
