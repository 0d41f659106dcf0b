// Block-scale layouts. Checkpoints store scales linear [rows, K/16]. Blackwell block-scaled MMA
// (CUTLASS Sm1xxBlockScaledConfig, tcgen05 / SM120) reads the swizzled 128x4 layout: rows padded to
// a multiple of 128, scale columns padded to a multiple of 4, zeros in the padding, stored as
// [Rp/128, Kbp/4, 32, 4, 4] 512-byte atoms with the K tiles fastest (nvfp4-format.md section 6.1):
//   offset(r, kb) = ((r / 128) * (Kbp / 4) + kb / 4) * 512 + (r % 32) * 16 + ((r / 32) % 4) * 4 + kb % 4
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace fp4moe {

struct SwizzledShape {
  int64_t padded_rows;    // roundup(rows, 128)
  int64_t padded_kblocks; // roundup(kblocks, 4)
  int64_t bytes() const { return padded_rows * padded_kblocks; }
};

SwizzledShape swizzled_128x4_shape(int64_t rows, int64_t kblocks);
// Byte offset of scale (r, kb) in the swizzled buffer for a matrix with `kblocks` scale columns.
int64_t swizzled_128x4_offset(int64_t r, int64_t kb, int64_t kblocks);
// linear [rows, kblocks] -> swizzled (zero padding).
std::vector<uint8_t> swizzle_scales_128x4(std::span<const uint8_t> linear, int64_t rows, int64_t kblocks);
// swizzled -> linear [rows, kblocks]; the padding is dropped.
std::vector<uint8_t> unswizzle_scales_128x4(std::span<const uint8_t> swizzled, int64_t rows, int64_t kblocks);

}  // namespace fp4moe
