// The sm80 GEMM weight layout (kernels/cuda/nvfp4_mma_layout.h), host side: decoding the repacked
// words with the kernel's decode_word at the documented lane/word/output gives back every original
// code (as the bf16 pattern of e2m1 * 2^-126) and scale, and
// the gate/up interleave puts matching rows side by side. The table-free scale multiplier
// (e4m3_scale_bits.h) equals the scale table's entry for exactly the codes it is used for, and the
// per-expert flags select those experts.
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/rng.h"
#include "format/bf16.h"
#include "format/fp_codes.h"
#include "kernels/cuda/nvfp4_decode_layout.h"
#include "kernels/cuda/nvfp4_mma_layout.h"

namespace fp4moe {
namespace {

TEST(Nvfp4MmaLayout, RepackedNibblesFollowTheFragmentFormula) {
  const int64_t N = 24, K = 256;
  Rng rng(3);
  std::vector<uint8_t> packed(N * K / 2), scales(N * K / 16);
  for (auto& b : packed) b = static_cast<uint8_t>(rng.below(256));
  for (auto& s : scales) s = static_cast<uint8_t>(rng.below(0x7F));
  const Nvfp4View view{packed.data(), scales.data(), 1.0f, N, K};
  std::vector<int64_t> order(N);
  for (int64_t r = 0; r < N; ++r) order[r] = (r * 7) % N;  // a permutation (7 is prime to 24)
  std::vector<uint8_t> out(N * K / 2), out_scales(N * K / 16);
  repack_nvfp4_for_mma(view, order, out.data(), out_scales.data());
  const int64_t chunks = K / 128;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t nb = r / 8, g = r % 8, src = order[r];
    for (int64_t kc = 0; kc < chunks; ++kc) {
      for (int t = 0; t < 4; ++t) {
        for (int j = 0; j < 4; ++j) {
          const uint8_t* w = out.data() + (nb * chunks + kc) * 512 + (4 * g + t) * 16 + 4 * j;
          const uint32_t word = w[0] | w[1] << 8 | w[2] << 16 | static_cast<uint32_t>(w[3]) << 24;
          uint32_t decoded[4];  // as the kernel decodes the word: out 2*step + i is b_i of step 2j + step
          decode_word(word, decoded);
          for (int step = 0; step < 2; ++step) {
            const int64_t base = kc * 128 + 32 * j + 16 * step + 2 * t;
            const int64_t ks[4] = {base, base + 1, base + 8, base + 9};  // b0.lo, b0.hi, b1.lo, b1.hi
            for (int q = 0; q < 4; ++q) {
              const uint32_t half = (decoded[2 * step + q / 2] >> (16 * (q % 2))) & 0xFFFFu;
              const uint32_t code = nvfp4_code_at(view, src, ks[q]);
              // bf16 bits of e2m1 * 2^-126: magnitude at bits 8:6, sign at bit 15
              ASSERT_EQ(half, ((code & 7u) << 6) | ((code & 8u) << 12)) << "row " << r << " k " << ks[q];
            }
          }
        }
        for (int s = 0; s < 8; ++s)
          ASSERT_EQ(out_scales[(nb * chunks + kc) * 64 + g * 8 + s], scales[src * K / 16 + kc * 8 + s]);
      }
    }
  }
}

TEST(Nvfp4MmaLayout, GateUpInterleaveAndBadShapes) {
  const std::vector<int64_t> rows = gate_up_interleaved_rows(16);
  const std::vector<int64_t> expected = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23,
                                         8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
  EXPECT_EQ(rows, expected);
  EXPECT_THROW(gate_up_interleaved_rows(12), Error);
  std::vector<uint8_t> packed(8 * 64 / 2), scales(8 * 64 / 16), out(packed.size()), out_s(scales.size());
  const Nvfp4View bad_k{packed.data(), scales.data(), 1.0f, 8, 64};  // K not a multiple of 128
  EXPECT_THROW(repack_nvfp4_for_mma(bad_k, {}, out.data(), out_s.data()), Error);
}

// The kernels' scale table holds bf16(e4m3 * 2^117) (sm80::scale_lut_entry); (code << 4) + bias must
// give the same bits for every positive normal code, and the classification must not admit a code
// where it does not (zero, subnormals, NaN, negative codes).
TEST(Nvfp4MmaLayout, TableFreeScaleBitsEqualTheTableForPositiveNormalCodes) {
  int admitted = 0;
  for (int code = 0; code < 256; ++code) {
    const uint16_t table = float_to_bf16(e4m3_decode(static_cast<uint8_t>(code)) * 0x1p117f);
    const uint32_t formula = (static_cast<uint32_t>(code) << 4) + kNormalScaleBf16Bias;
    const bool admitted_code = e4m3_is_positive_normal(static_cast<uint8_t>(code));
    admitted += admitted_code;
    if (admitted_code) {
      EXPECT_EQ(formula, table) << "code 0x" << std::hex << code;
    } else {
      EXPECT_NE(formula, table) << "code 0x" << std::hex << code << " is left to the table but would also work";
    }
  }
  EXPECT_EQ(admitted, 0x7E - 0x08 + 1);
  EXPECT_FALSE(e4m3_is_positive_normal(0x00));  // zero
  EXPECT_FALSE(e4m3_is_positive_normal(0x07));  // largest subnormal
  EXPECT_TRUE(e4m3_is_positive_normal(0x08));   // 2^-6
  EXPECT_TRUE(e4m3_is_positive_normal(0x7E));   // 448
  EXPECT_FALSE(e4m3_is_positive_normal(0x7F));  // NaN
  EXPECT_FALSE(e4m3_is_positive_normal(0x88));  // -2^-6
}

TEST(Nvfp4MmaLayout, PositiveNormalScaleFlagsPerExpert) {
  const int64_t E = 4, per = 40;
  std::vector<uint8_t> scales(E * per, 0x38);  // 1.0
  scales[1 * per + 39] = 0x07;                 // expert 1: one subnormal scale (its last)
  scales[2 * per + 0] = 0x00;                  // expert 2: a zero scale (its first)
  scales[3 * per + 17] = 0x7E;                 // expert 3: the largest normal code, still normal
  EXPECT_EQ(experts_with_positive_normal_scales(scales, E, per), (std::vector<uint8_t>{1, 0, 0, 1}));
  scales[3 * per + 17] = 0xB8;  // -1.0
  EXPECT_EQ(experts_with_positive_normal_scales(scales, E, per), (std::vector<uint8_t>{1, 0, 0, 0}));
  EXPECT_THROW(experts_with_positive_normal_scales(scales, E, per + 1), Error);
  EXPECT_TRUE(experts_with_positive_normal_scales({}, 0, per).empty());
}

}  // namespace
}  // namespace fp4moe
