// Scale-factor layouts: the 128x4 swizzle's closed form against the sample offsets of
// nvfp4-format.md 6.1, round trips on odd shapes, and zero padding. The numpy reshape/permute form
// is compared byte for byte in check_against_ml_dtypes.py.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "common/error.h"
#include "format/sf_layout.h"

namespace fp4moe {
namespace {

TEST(SfLayout, SampleOffsetsFromTheSpec) {
  struct Sample {
    int64_t r, kb, offset;
  };
  // R = 200, Kb = 6 (padded to 256 x 8).
  const Sample samples[] = {{0, 0, 0},     {0, 1, 1},     {0, 4, 512},   {1, 0, 16},     {31, 0, 496},  {32, 0, 4},
                            {64, 0, 8},    {96, 0, 12},   {127, 3, 511}, {128, 0, 1024}, {199, 5, 1657}};
  for (const Sample& s : samples) EXPECT_EQ(swizzled_128x4_offset(s.r, s.kb, 6), s.offset) << s.r << ", " << s.kb;
}

TEST(SfLayout, PaddedShape) {
  const SwizzledShape shape = swizzled_128x4_shape(200, 6);
  EXPECT_EQ(shape.padded_rows, 256);
  EXPECT_EQ(shape.padded_kblocks, 8);
  EXPECT_EQ(shape.bytes(), 2048);
  EXPECT_EQ(swizzled_128x4_shape(128, 4).bytes(), 512);
  EXPECT_EQ(swizzled_128x4_shape(1, 1).bytes(), 512);
  EXPECT_EQ(swizzled_128x4_shape(129, 5).bytes(), 256 * 8);
  EXPECT_THROW(swizzled_128x4_shape(-1, 4), Error);
}

class SfLayoutShapes : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(SfLayoutShapes, OffsetsAreABijectionOntoThePaddedBuffer) {
  const auto [rows, kblocks] = GetParam();
  const SwizzledShape shape = swizzled_128x4_shape(rows, kblocks);
  std::set<int64_t> seen;
  for (int64_t r = 0; r < shape.padded_rows; ++r)
    for (int64_t kb = 0; kb < shape.padded_kblocks; ++kb) {
      const int64_t offset = swizzled_128x4_offset(r, kb, kblocks);
      ASSERT_GE(offset, 0);
      ASSERT_LT(offset, shape.bytes());
      seen.insert(offset);
    }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), shape.bytes());
}

TEST_P(SfLayoutShapes, RoundTripAndZeroPadding) {
  const auto [rows, kblocks] = GetParam();
  std::vector<uint8_t> linear(static_cast<size_t>(rows * kblocks));
  for (size_t i = 0; i < linear.size(); ++i) linear[i] = static_cast<uint8_t>(1 + (i * 37) % 255);  // never 0
  const std::vector<uint8_t> swizzled = swizzle_scales_128x4(linear, rows, kblocks);
  ASSERT_EQ(static_cast<int64_t>(swizzled.size()), swizzled_128x4_shape(rows, kblocks).bytes());
  // Every real scale lands at its offset; everything else (the padding) is zero.
  std::vector<bool> used(swizzled.size(), false);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kb = 0; kb < kblocks; ++kb) {
      const int64_t offset = swizzled_128x4_offset(r, kb, kblocks);
      EXPECT_EQ(swizzled[offset], linear[r * kblocks + kb]);
      used[offset] = true;
    }
  for (size_t i = 0; i < swizzled.size(); ++i) {
    if (!used[i]) {
      EXPECT_EQ(swizzled[i], 0) << "padding byte " << i;
    }
  }
  EXPECT_EQ(unswizzle_scales_128x4(swizzled, rows, kblocks), linear);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SfLayoutShapes,
                         ::testing::Values(std::pair<int64_t, int64_t>{200, 6}, std::pair<int64_t, int64_t>{1, 1},
                                           std::pair<int64_t, int64_t>{128, 4}, std::pair<int64_t, int64_t>{129, 5},
                                           std::pair<int64_t, int64_t>{300, 17}, std::pair<int64_t, int64_t>{64, 3},
                                           std::pair<int64_t, int64_t>{256, 8}));

TEST(SfLayout, AtomStructure) {
  // Within one 512-byte atom the four scales of a row are contiguous (32 bits per row), and rows
  // r, r+32, r+64, r+96 share a 16-byte line: the 32x4 column-major M tile.
  for (int64_t r = 0; r < 32; ++r) {
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_EQ(swizzled_128x4_offset(r + 32 * i, 0, 4), r * 16 + i * 4);
      EXPECT_EQ(swizzled_128x4_offset(r + 32 * i, 3, 4), r * 16 + i * 4 + 3);
    }
  }
  // K tiles vary fastest between atoms, then 128-row tiles.
  EXPECT_EQ(swizzled_128x4_offset(0, 8, 12), 2 * 512);
  EXPECT_EQ(swizzled_128x4_offset(128, 0, 12), 3 * 512);
}

TEST(SfLayout, WrongSizesAreErrors) {
  EXPECT_THROW(swizzle_scales_128x4(std::vector<uint8_t>(11), 2, 6), Error);
  EXPECT_THROW(unswizzle_scales_128x4(std::vector<uint8_t>(511), 2, 4), Error);
}

}  // namespace
}  // namespace fp4moe
