#include "format/sf_layout.h"

#include "common/error.h"

namespace fp4moe {

namespace {
int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }
}  // namespace

SwizzledShape swizzled_128x4_shape(int64_t rows, int64_t kblocks) {
  FP4MOE_CHECK(rows >= 0 && kblocks >= 0, "swizzled scale layout: negative shape [", rows, ", ", kblocks, "]");
  return {round_up(rows, 128), round_up(kblocks, 4)};
}

int64_t swizzled_128x4_offset(int64_t r, int64_t kb, int64_t kblocks) {
  const int64_t k_tiles = round_up(kblocks, 4) / 4;
  return ((r / 128) * k_tiles + kb / 4) * 512 + (r % 32) * 16 + ((r / 32) % 4) * 4 + kb % 4;
}

std::vector<uint8_t> swizzle_scales_128x4(std::span<const uint8_t> linear, int64_t rows, int64_t kblocks) {
  const SwizzledShape shape = swizzled_128x4_shape(rows, kblocks);
  FP4MOE_CHECK(static_cast<int64_t>(linear.size()) == rows * kblocks, "swizzle_scales_128x4: got ", linear.size(),
               " scales, shape [", rows, ", ", kblocks, "] needs ", rows * kblocks);
  std::vector<uint8_t> out(static_cast<size_t>(shape.bytes()), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kb = 0; kb < kblocks; ++kb) out[swizzled_128x4_offset(r, kb, kblocks)] = linear[r * kblocks + kb];
  return out;
}

std::vector<uint8_t> unswizzle_scales_128x4(std::span<const uint8_t> swizzled, int64_t rows, int64_t kblocks) {
  const SwizzledShape shape = swizzled_128x4_shape(rows, kblocks);
  FP4MOE_CHECK(static_cast<int64_t>(swizzled.size()) == shape.bytes(), "unswizzle_scales_128x4: got ",
               swizzled.size(), " bytes, shape [", rows, ", ", kblocks, "] padded to [", shape.padded_rows, ", ",
               shape.padded_kblocks, "] needs ", shape.bytes());
  std::vector<uint8_t> out(static_cast<size_t>(rows * kblocks));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kb = 0; kb < kblocks; ++kb) out[r * kblocks + kb] = swizzled[swizzled_128x4_offset(r, kb, kblocks)];
  return out;
}

}  // namespace fp4moe
