// Split-K sizing of the sm80 decode GEMM (grouped_gemm_k_splits), host side: the splits fill one wave of
// the device it is given (SMs x resident decode CTAs), never more, and never fewer than one.
#include <gtest/gtest.h>

#include "common/error.h"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm80.h"

namespace fp4moe {
namespace {

// Qwen3.5-397B at one token: K = 10 rows over 10 experts; GEMM1 N = 2I = 2048, K = H = 4096, so
// 2048 / 32 x 10 = 640 one-warp CTAs per split.
constexpr int64_t kH = 4096, kI = 1024, kRows = 10;
constexpr int kE = 512;

TEST(GroupedGemmKSplits, FillOneWaveOfTheGivenDevice) {
  // H200: 132 SMs x 16 decode CTAs = 2112 -> 3 splits (the measured optimum there).
  EXPECT_EQ(grouped_gemm_k_splits(2 * kI, kH, kRows, kE, 16, 132 * 16), 3);
  // A part with 84 SMs and the same residency: 1344 / 640 -> 2; with 9 resident CTAs: 756 / 640 -> 1.
  EXPECT_EQ(grouped_gemm_k_splits(2 * kI, kH, kRows, kE, 16, 84 * 16), 2);
  EXPECT_EQ(grouped_gemm_k_splits(2 * kI, kH, kRows, kE, 16, 84 * 9), 1);
  // Fewer CTAs than one split needs: still one pass, not zero.
  EXPECT_EQ(grouped_gemm_k_splits(2 * kI, kH, kRows, kE, 16, 100), 1);
  // GEMM2 (N = H = 4096, K = I = 1024): 1280 CTAs per split -> unsplit on the H200.
  EXPECT_EQ(grouped_gemm_k_splits(kH, kI, kRows, kE, 16, 132 * 16), 1);
}

TEST(GroupedGemmKSplits, CappedByKAndOnlyForTheDecodeTile) {
  // A very large device: the cap is kMaxKSplits, and each split keeps >= 2 chunks of 128.
  EXPECT_EQ(grouped_gemm_k_splits(2 * kI, kH, kRows, kE, 16, 1 << 20), kMaxKSplits);
  EXPECT_EQ(grouped_gemm_k_splits(2 * kI, 512, kRows, kE, 16, 1 << 20), 2);
  EXPECT_EQ(grouped_gemm_k_splits(2 * kI, 256, kRows, kE, 16, 1 << 20), 1);
  // Prefill tiles and more rows than the split workspace holds: never split.
  EXPECT_EQ(grouped_gemm_k_splits(2 * kI, kH, kRows, kE, 64, 1 << 20), 1);
  EXPECT_EQ(grouped_gemm_k_splits(2 * kI, kH, kSplitMaxRows + 1, kE, 16, 1 << 20), 1);
}

TEST(GroupedGemmKSplits, AnUnknownDeviceSizeIsAnError) {
  EXPECT_THROW(grouped_gemm_k_splits(2 * kI, kH, kRows, kE, 16, 0), Error);
}

}  // namespace
}  // namespace fp4moe
