// The weight layout of the fused decode kernels (moe_fused_decode_sm80.cu), produced once at prepare()
// from the checkpoint's row-major NVFP4 [N, K]. Why: at decode every weight is read once and the
// kernel is bound by instruction issue as much as by HBM, so the layout minimizes instructions per
// weight. The weights are the A operand of mma.sync m16n8k16 (16 weight rows x up to 8 tokens), and
// the K order inside each 128-wide chunk is permuted so that lane (g = lane/4, t = lane%4) owns the
// columns [32t, 32t + 32) of the chunk: two whole NVFP4 blocks per row, so 4 scales per chunk instead
// of 16, and its activations are 64 contiguous bytes. The mma sums over k, so the permutation (the
// same for weights and activations) does not change the result beyond fp32 summation order.
//
// One block of 1152 bytes per (16-row tile, 128-column chunk), tiles outer, chunks inner:
//   bytes [0, 512):     lane l's 16 bytes of row0 = 16*tile + g at 16 l;
//   bytes [512, 1024):  lane l's 16 bytes of row1 = row0 + 8 at 512 + 16 l (decode_code_offset): a warp's
//                       16-byte copies and loads each cover 512 contiguous bytes, so they are coalesced
//                       and free of shared-memory bank conflicts;
//                       word j (bytes 4j..4j+3, little endian) of a row holds lane columns 8j..8j+7;
//   bytes [1024, 1152): lane l (32 x 4 bytes): E4M3 scales (row0, blk 2t), (row0, 2t+1), (row1, 2t),
//                       (row1, 2t+1) of the chunk.
// Inside a word the 8 codes are placed so that 4 bf16x2 operands come out of 10 integer ops
// (decode_word below): output k (k = 0..3) holds lane columns 8j+2k (low half) and 8j+2k+1 (high);
// in k-step s = 2j + u the A fragment is {out(2u) of row0, out(2u) of row1, out(2u+1) of row0,
// out(2u+1) of row1}. Each half is the bf16 bit pattern of e2m1 * 2^-126 (sign bit 15, magnitude
// bits 8:6; code 1 = 0.5 is a bf16 subnormal): the block scale table folds the 2^126 back.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/cuda/common/host_device.h"

namespace fp4moe {

struct Nvfp4View;  // format/nvfp4.h (not included: .cu files are compiled as C++17)

inline constexpr int kDecodeTileRows = 16;    // N granularity (one mma M tile)
inline constexpr int kDecodeChunkK = 128;     // K granularity
inline constexpr int kDecodeBlockBytes = 1152;  // one (tile, chunk): 1024 code bytes + 128 scale bytes
inline constexpr int kDecodeScaleOffset = 1024;
inline constexpr int kDecodeHalfBytes = 512;  // the code bytes of row halves 0 (rows g) and 1 (rows g + 8)
static_assert(kDecodeBlockBytes == kDecodeTileRows * kDecodeChunkK / 2 + kDecodeTileRows * kDecodeChunkK / 16,
              "the layout keeps the checkpoint's bytes: N*K/2 codes + N*K/16 scales");

// Byte offset of lane l's 16 code bytes of row half h (0: row g, 1: row g + 8) inside a block.
FP4MOE_HOST_DEVICE constexpr int decode_code_offset(int lane, int half_row) {
  return half_row * kDecodeHalfBytes + lane * 16;
}

// Left shifts (negative: right) that bring output k's magnitude bits and sign bit into place.
inline constexpr int kDecodeMagShift[4] = {0, 3, 6, -3};
inline constexpr int kDecodeSignShift[4] = {0, 3, 2, 1};

// The bf16x2 fields of two FP4 codes as e2m1 * 2^-126 (magnitudes at bits 8:6 / 24:22, signs at 15 / 31)
// where both come from left shifts of a word, by kMag and kSign: one multiply of the fields' source bits
// by 2^kMag + 2^kSign makes both shifted copies, and where they carry into no field bit their sum equals
// their OR. 3 operations instead of 4, the multiply on the FMA pipe, not the integer ALU. Used by
// decode_word's output 2 (the copies overlap only at bit 19, whose carry ends at bit 21) and the sm_90a
// prefill's nibble_pair 0 and 1 (no overlap); each use was checked equal to the shifts for all 2^32 words.
inline constexpr uint32_t kBf16x2MagnitudeBits = 0x01C001C0u, kBf16x2SignBits = 0x80008000u;
template <int kMag, int kSign>
FP4MOE_HOST_DEVICE constexpr uint32_t shifted_fields_by_multiply(uint32_t w) {
  static_assert(kMag >= 0 && kSign >= 0, "both fields must come from left shifts");
  constexpr uint32_t kSources = (kBf16x2MagnitudeBits >> kMag) | (kBf16x2SignBits >> kSign);
  return ((w & kSources) * ((1u << kMag) + (1u << kSign))) & (kBf16x2MagnitudeBits | kBf16x2SignBits);
}

// The 4 bf16x2 outputs of one layout word (see the header comment): 10 integer operations per word,
// output 2 by shifted_fields_by_multiply.
FP4MOE_HOST_DEVICE inline void decode_word(uint32_t w, uint32_t (&out)[4]) {
  out[0] = w & 0x81C081C0u;
  out[1] = (w << 3) & 0x81C081C0u;
  out[2] = shifted_fields_by_multiply<kDecodeMagShift[2], kDecodeSignShift[2]>(w);
  out[3] = ((w >> 3) & 0x01C001C0u) | ((w << 1) & 0x80008000u);
}

// The bits of a layout word that make decode_word's output k, half h (0: low, 1: high) the bf16 pattern
// of 4-bit code `code` (e2m1 * 2^-126): the magnitude bits at (6 + 16h + i) - mag shift, the sign bit at
// (15 + 16h) - sign shift, so that decode_word's shifts bring them back. Host repacks OR 8 of them.
constexpr uint32_t decode_word_code_bits(uint32_t code, int k, int h) {
  uint32_t bits = 0;
  for (int i = 0; i < 3; ++i)
    if ((code >> i) & 1u) bits |= 1u << (6 + 16 * h + i - kDecodeMagShift[k]);
  if (code & 8u) bits |= 1u << (15 + 16 * h - kDecodeSignShift[k]);
  return bits;
}

// The same for both codes of one packed byte (low nibble: half 0, high nibble: half 1), as a table: the
// host repacks place ~3.6 G codes per weight set of Qwen3.5-397B, and a lookup per byte is what keeps
// that from being the slow part of loading (a call per code took ~13 s per layer-set on 16 cores).
struct DecodeWordByteBits {
  uint32_t bits[4][256];
};
constexpr DecodeWordByteBits make_decode_word_byte_bits() {
  DecodeWordByteBits t{};
  for (int k = 0; k < 4; ++k)
    for (uint32_t b = 0; b < 256; ++b) t.bits[k][b] = decode_word_code_bits(b & 0xFu, k, 0) | decode_word_code_bits(b >> 4, k, 1);
  return t;
}
inline constexpr DecodeWordByteBits kDecodeWordByteBits = make_decode_word_byte_bits();

// Bytes of one repacked [N, K] matrix (the same as the input's codes + scales).
inline int64_t decode_layout_bytes(int64_t n, int64_t k) { return n * k / 2 + n * k / 16; }

// Repacks `m` (rows in the order of source_rows: repacked row r <- m's row source_rows[r]; all rows in
// order when empty) into `out` (decode_layout_bytes(N, K) bytes). Throws Error when N % 16 or K % 128
// is not 0 or the row order is not a list of valid rows.
void repack_nvfp4_for_decode(const Nvfp4View& m, const std::vector<int64_t>& source_rows, uint8_t* out);

}  // namespace fp4moe
