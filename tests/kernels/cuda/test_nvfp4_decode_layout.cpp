// The fused decode weight layout (kernels/cuda/nvfp4_decode_layout.h), host side: decoding every word of
// the repacked bytes with decode_word (the kernels' own 10-op decode) gives e2m1(code) * 2^-126 of the
// documented row and column for every element, every pair of codes comes out of every output whatever
// the word's other codes are, the scales sit where the lanes read them, and bad shapes are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/rng.h"
#include "format/fp_codes.h"
#include "format/nvfp4.h"
#include "kernels/cuda/nvfp4_decode_layout.h"

namespace fp4moe {
namespace {

float bf16_bits_to_float(uint32_t bits16) {
  const uint32_t bits = bits16 << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TEST(Nvfp4DecodeLayout, DecodedWordsAreTheDocumentedElements) {
  const int64_t N = 48, K = 384;
  Rng rng(11);
  std::vector<uint8_t> packed(N * K / 2), scales(N * K / 16);
  for (auto& b : packed) b = static_cast<uint8_t>(rng.below(256));
  for (auto& s : scales) s = static_cast<uint8_t>(rng.below(0x7F));
  const Nvfp4View view{packed.data(), scales.data(), 1.0f, N, K};
  std::vector<int64_t> order(N);
  for (int64_t r = 0; r < N; ++r) order[r] = (r * 5) % N;  // a permutation (5 is prime to 48)
  std::vector<uint8_t> out(static_cast<size_t>(decode_layout_bytes(N, K)));
  repack_nvfp4_for_decode(view, order, out.data());
  const int64_t chunks = K / kDecodeChunkK;
  int64_t checked = 0;
  for (int64_t tile = 0; tile < N / 16; ++tile) {
    for (int64_t kc = 0; kc < chunks; ++kc) {
      const uint8_t* block = out.data() + (tile * chunks + kc) * kDecodeBlockBytes;
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        for (int half_row = 0; half_row < 2; ++half_row) {
          const int64_t row = order[16 * tile + 8 * half_row + g];
          for (int j = 0; j < 4; ++j) {
            uint32_t word;
            std::memcpy(&word, block + decode_code_offset(lane, half_row) + 4 * j, 4);
            uint32_t decoded[4];
            decode_word(word, decoded);
            for (int k = 0; k < 4; ++k) {
              for (int h = 0; h < 2; ++h) {
                const int64_t col = kc * 128 + 32 * t + 8 * j + 2 * k + h;
                const uint8_t code = nvfp4_code_at(view, row, col);
                const float got = bf16_bits_to_float((decoded[k] >> (16 * h)) & 0xFFFFu);
                const float want = std::ldexp(e2m1_decode(code), -126);
                ASSERT_EQ(got, want) << "tile " << tile << " chunk " << kc << " lane " << lane << " word " << j
                                     << " out " << k << " half " << h;
                ASSERT_EQ(std::signbit(got), (code & 8) != 0) << "sign of code " << int(code);
                ++checked;
              }
            }
          }
          for (int b = 0; b < 2; ++b)
            ASSERT_EQ(block[kDecodeScaleOffset + lane * 4 + 2 * half_row + b], scales[row * K / 16 + (kc * 128 + 32 * t) / 16 + b]);
        }
      }
    }
  }
  EXPECT_EQ(checked, N * K);  // every element exactly once
}

// Exhaustive per output: each of the 256 (low, high) code pairs at output k's bit positions, the word's
// other 6 codes random (8 draws), decodes to the two bf16 patterns of e2m1 * 2^-126 bit for bit (-0 for
// code 8 included). Output 2's multiply (two shifted copies added, not ORed) is right only if the copies
// never carry into its mask: this is the check that covers every input of its 8 source bits.
TEST(Nvfp4DecodeLayout, EveryCodePairComesOutOfEveryOutput) {
  Rng rng(12);
  auto bf16_pattern = [](uint32_t code) {  // e2m1(code) * 2^-126 as bf16 bits: sign, then magnitude at 8:6
    return ((code & 8u) << 12) | ((code & 7u) << 6);
  };
  for (int k = 0; k < 4; ++k) {
    for (uint32_t pair = 0; pair < 256; ++pair) {
      const uint32_t lo = pair & 15u, hi = pair >> 4;
      for (int draw = 0; draw < 8; ++draw) {
        uint32_t word = decode_word_code_bits(lo, k, 0) | decode_word_code_bits(hi, k, 1);
        for (int other = 0; other < 4; ++other)
          if (other != k)
            word |= decode_word_code_bits(static_cast<uint32_t>(rng.below(16)), other, 0) |
                    decode_word_code_bits(static_cast<uint32_t>(rng.below(16)), other, 1);
        uint32_t decoded[4];
        decode_word(word, decoded);
        ASSERT_EQ(decoded[k], bf16_pattern(lo) | (bf16_pattern(hi) << 16))
            << "output " << k << " codes " << lo << ", " << hi << " word " << std::hex << word;
        ASSERT_EQ(bf16_bits_to_float(decoded[k] & 0xFFFFu), std::ldexp(e2m1_decode(static_cast<uint8_t>(lo)), -126));
      }
    }
  }
}

TEST(Nvfp4DecodeLayout, RefusesBadShapesAndRowOrders) {
  std::vector<uint8_t> packed(16 * 256 / 2), scales(16 * 256 / 16), out(16 * 256);
  const Nvfp4View bad_k{packed.data(), scales.data(), 1.0f, 16, 64};  // K not a multiple of 128
  EXPECT_THROW(repack_nvfp4_for_decode(bad_k, {}, out.data()), Error);
  const Nvfp4View bad_n{packed.data(), scales.data(), 1.0f, 8, 256};  // N not a multiple of 16
  EXPECT_THROW(repack_nvfp4_for_decode(bad_n, {}, out.data()), Error);
  const Nvfp4View ok{packed.data(), scales.data(), 1.0f, 16, 256};
  EXPECT_THROW(repack_nvfp4_for_decode(ok, std::vector<int64_t>(15, 0), out.data()), Error);  // wrong length
  std::vector<int64_t> bad_row(16, 0);
  bad_row[3] = 16;
  EXPECT_THROW(repack_nvfp4_for_decode(ok, bad_row, out.data()), Error);  // row out of range
}

}  // namespace
}  // namespace fp4moe
