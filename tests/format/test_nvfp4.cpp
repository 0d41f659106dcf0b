// NVFP4 block quantization against the worked examples of nvfp4-format.md section 9 (ModelOpt
// column), bit for bit, plus the edge cases decided in docs/format.md. Random and edge-case
// matrices are also compared against an independent numpy + ml_dtypes implementation in
// check_against_ml_dtypes.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "format/fp_codes.h"
#include "format/nvfp4.h"

namespace fp4moe {
namespace {

std::vector<uint8_t> codes_of(const Nvfp4Matrix& m) {
  std::vector<uint8_t> codes;
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) codes.push_back(nvfp4_code_at(m.view(), r, c));
  return codes;
}

std::vector<float> dequantized(const Nvfp4Matrix& m) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  dequantize_nvfp4(m.view(), out);
  return out;
}

// e2m1 value of each code: the table of nvfp4-format.md 1.1, written out independently.
float spec_e2m1(uint8_t code) {
  const float magnitudes[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  return (code & 8) ? -magnitudes[code & 7] : magnitudes[code & 7];
}

// Checks one 16-element worked example: scale code, codes, packed bytes, and dequantized values
// (each e2m1 * fp32(scale_value * tensor_scale), ModelOpt's order).
void check_example(const Nvfp4Matrix& m, uint8_t scale_code, float scale_value, const std::vector<uint8_t>& codes,
                   const std::vector<uint8_t>& packed) {
  ASSERT_EQ(m.scales.size(), 1u);
  EXPECT_EQ(m.scales[0], scale_code);
  EXPECT_EQ(codes_of(m), codes);
  EXPECT_EQ(m.packed, packed);
  const std::vector<float> deq = dequantized(m);
  const float step = scale_value * m.tensor_scale;
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(deq[i], spec_e2m1(codes[i]) * step) << "element " << i;
    EXPECT_EQ(nvfp4_exact_value(m.view(), 0, i), static_cast<double>(spec_e2m1(codes[i])) * scale_value *
                                                     static_cast<double>(m.tensor_scale));
  }
}

std::vector<float> padded(std::vector<float> values) {
  values.resize(16, 0.0f);
  return values;
}

TEST(Nvfp4Examples, A_GeneralBlockScaleRoundsUp) {
  const float ts = nvfp4_tensor_scale_for_amax(10.0f);
  EXPECT_FLOAT_EQ(ts, 0.00372023811f);
  const std::vector<float> x = {0.1f, -0.25f, 0.5f, 0.73f, -1, 1.2f, 2.3f, -3.1f, 4, 0, 0.05f, -0.6f, 1.8f, 2.9f, -4.4f, 6.1f};
  const Nvfp4Matrix m = quantize_nvfp4(x, 1, 16, ts);
  check_example(m, 0x79, 288.0f, {0x0, 0x8, 0x1, 0x1, 0xA, 0x2, 0x4, 0xD, 0x6, 0x0, 0x0, 0x9, 0x3, 0x5, 0xE, 0x7},
                {0x80, 0x11, 0x2A, 0xD4, 0x06, 0x90, 0x53, 0x7E});
  const std::vector<float> deq = dequantized(m);
  const float doc[16] = {0, -0.0f, .5357f, .5357f, -1.0714f, 1.0714f, 2.1429f, -3.2143f,
                         4.2857f, 0, 0, -.5357f, 1.6071f, 3.2143f, -4.2857f, 6.4286f};
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(deq[i], doc[i], 1e-4) << "element " << i;
}

TEST(Nvfp4Examples, B_TiesRoundToEven) {
  const float ts = nvfp4_tensor_scale_for_amax(2688.0f);
  EXPECT_EQ(ts, 1.0f);
  const std::vector<float> x = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5, 6,
                                -0.25f, -0.75f, -1.25f, -1.75f, -2.5f, -3.5f, -5, -6};
  const Nvfp4Matrix m = quantize_nvfp4(x, 1, 16, ts);
  check_example(m, 0x38, 1.0f, {0x0, 0x2, 0x2, 0x4, 0x4, 0x6, 0x6, 0x7, 0x8, 0xA, 0xA, 0xC, 0xC, 0xE, 0xE, 0xF},
                {0x20, 0x42, 0x64, 0x76, 0xA8, 0xCA, 0xEC, 0xFE});
}

TEST(Nvfp4Examples, C_AllZeroBlockStoresScaleOne) {
  const Nvfp4Matrix m = quantize_nvfp4(std::vector<float>(16, 0.0f), 1, 16, nvfp4_tensor_scale_for_amax(10.0f));
  check_example(m, 0x38, 1.0f, std::vector<uint8_t>(16, 0), std::vector<uint8_t>(8, 0));
}

TEST(Nvfp4Examples, D_TinyBlockClampsToMinSubnormal) {
  const Nvfp4Matrix m = quantize_nvfp4(padded({0.001f, -0.0005f, 0.0002f}), 1, 16, nvfp4_tensor_scale_for_amax(2688));
  std::vector<uint8_t> codes(16, 0);
  codes[0] = 0x1;
  codes[1] = 0x9;
  check_example(m, 0x01, 0x1p-9f, codes, {0x91, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(dequantized(m)[0], 0.0009765625f);
  EXPECT_EQ(dequantized(m)[1], -0.0009765625f);
}

TEST(Nvfp4Examples, E_ActivationAboveCalibratedAmaxSaturates) {
  const float input_scale = nvfp4_tensor_scale_for_amax(10.0f);  // static, calibrated amax 10
  const Nvfp4Matrix m = quantize_nvfp4(padded({20, -10, 5, 2.5f, 1, -0.5f, 0.25f, 0.1f}), 1, 16, input_scale);
  std::vector<uint8_t> codes = {0x7, 0xF, 0x5, 0x3, 0x1, 0x9, 0x0, 0x0};
  codes.resize(16, 0);
  check_example(m, 0x7E, 448.0f, codes, {0xF7, 0x35, 0x91, 0, 0, 0, 0, 0});
  const std::vector<float> deq = dequantized(m);
  const float doc[8] = {10, -10, 5, 2.5f, 0.8333f, -0.8333f, 0, 0};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(deq[i], doc[i], 1e-4) << "element " << i;
}

TEST(Nvfp4Examples, F_SubnormalBlockScale) {
  const Nvfp4Matrix m = quantize_nvfp4(padded({0.03f, -0.02f, 0.01f, 0.005f}), 1, 16, nvfp4_tensor_scale_for_amax(2688));
  std::vector<uint8_t> codes = {0x7, 0xD, 0x3, 0x2};
  codes.resize(16, 0);
  check_example(m, 0x03, 0.005859375f, codes, {0xD7, 0x23, 0, 0, 0, 0, 0, 0});
  const std::vector<float> deq = dequantized(m);
  const float doc[4] = {0.0351562f, -0.0175781f, 0.0087891f, 0.0058594f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(deq[i], doc[i], 1e-7) << "element " << i;
}

TEST(Nvfp4, AutoTensorScaleIsAmaxOver2688) {
  std::vector<float> x(2 * 32, 0.5f);
  x[37] = -26.88f;
  const Nvfp4Matrix m = quantize_nvfp4(x, 2, 32);
  EXPECT_EQ(m.tensor_scale, 26.88f / 2688.0f);
  // The block holding the amax gets s = amax / (6 * amax / 2688) ~ 448: code 0x7E.
  EXPECT_EQ(m.scales[2], 0x7E);
  EXPECT_EQ(nvfp4_code_at(m.view(), 1, 5), 0xF);
}

TEST(Nvfp4, AllZeroTensor) {
  // fp4moe's decision (docs/format.md): weight_scale_2 = 0, block scales 0x38, codes 0, zeros back.
  const Nvfp4Matrix m = quantize_nvfp4(std::vector<float>(3 * 48, 0.0f), 3, 48);
  EXPECT_EQ(m.tensor_scale, 0.0f);
  EXPECT_EQ(m.scales, std::vector<uint8_t>(9, 0x38));
  EXPECT_EQ(m.packed, std::vector<uint8_t>(3 * 24, 0));
  for (float v : dequantized(m)) {
    EXPECT_EQ(v, 0.0f);
    EXPECT_FALSE(std::signbit(v));
  }
}

TEST(Nvfp4, NegativeZeroGetsThePlusZeroCode) {
  // ModelOpt's sign bit is (x < 0): -0.0, and a negative quotient that rounds to magnitude 0 but is
  // not zero keeps the sign (code 0x8), as example A shows for -0.25.
  const Nvfp4Matrix m = quantize_nvfp4(padded({-0.0f, 6.0f, -0.1f}), 1, 16, 1.0f / 448.0f);
  EXPECT_EQ(nvfp4_code_at(m.view(), 0, 0), 0x0);
  EXPECT_EQ(nvfp4_code_at(m.view(), 0, 2), 0x8);
  EXPECT_EQ(nvfp4_code_at(m.view(), 0, 1), 0x7);
}

TEST(Nvfp4, ZeroBlocksInsideANonZeroTensor) {
  std::vector<float> x(64, 0.0f);
  x[20] = 3.0f;  // only block 1 is non-zero
  const Nvfp4Matrix m = quantize_nvfp4(x, 1, 64);
  EXPECT_EQ(m.scales[0], 0x38);
  EXPECT_EQ(m.scales[2], 0x38);
  EXPECT_EQ(m.scales[3], 0x38);
  EXPECT_EQ(m.scales[1], 0x7E);
}

TEST(Nvfp4, BlockScaleUnderflowFollowsModelOpt) {
  // ModelOpt: s = amax_b / (6 * scale_2); s == 0 -> 1.0; then clamp to >= 2^-9.
  const float ts = nvfp4_tensor_scale_for_amax(1e30f);
  // s ~ 4.5e-43 is a nonzero fp32 subnormal: clamped up to 2^-9 (code 0x01).
  EXPECT_EQ(nvfp4_block_scale_code(1e-15f, ts), 0x01);
  // s ~ 4.5e-68 underflows to 0 in fp32: ModelOpt's zero rule gives 1.0 (code 0x38).
  EXPECT_EQ(nvfp4_block_scale_code(1e-40f, ts), 0x38);
  EXPECT_EQ(nvfp4_block_scale_code(0.0f, ts), 0x38);
  EXPECT_EQ(nvfp4_block_scale_code(0.0f, 0.0f), 0x38);  // all-zero tensor: 0/0 -> 1.0 as well
  // Far above the tensor amax (static activation scale): clamp to 448.
  EXPECT_EQ(nvfp4_block_scale_code(1e30f, 1e-6f), 0x7E);
  // A tie on the E4M3 grid: s = 6.375 / 6 = 1.0625 exactly, between 1 and 1.125 -> 1.0 (even).
  EXPECT_EQ(nvfp4_block_scale_code(6.375f, 1.0f), 0x38);
}

TEST(Nvfp4, DequantizeUsesModelOptRounding) {
  // out = e2m1 * fp32(fp32(scale) * tensor_scale): check against that formula on a random-ish row.
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = std::sin(0.37f * i) * (1 + i % 7) * 0.013f;
  const Nvfp4Matrix m = quantize_nvfp4(x, 2, 32);
  const std::vector<float> deq = dequantized(m);
  for (int i = 0; i < 64; ++i) {
    const float step = e4m3_decode(m.scales[i / 16]) * m.tensor_scale;
    EXPECT_EQ(deq[i], spec_e2m1(nvfp4_code_at(m.view(), i / 32, i % 32)) * step) << i;
    // And the quantization error is at most half an E2M1 step of the block (or the clip at 6).
    EXPECT_LE(std::fabs(deq[i] - x[i]), 1.0f * step + 1e-7f) << i;
  }
}

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Nvfp4Errors, NanAndInfInputNameTheElement) {
  std::vector<float> x(2 * 32, 1.0f);
  x[32 + 17] = std::numeric_limits<float>::quiet_NaN();
  std::string message = error_of([&] { quantize_nvfp4(x, 2, 32); });
  EXPECT_NE(message.find("[1, 17]"), std::string::npos) << message;
  EXPECT_NE(message.find("non-finite"), std::string::npos) << message;
  message = error_of([&] { quantize_nvfp4(x, 2, 32, 0.01f); });
  EXPECT_NE(message.find("[1, 17]"), std::string::npos) << message;
  x[32 + 17] = 1.0f;
  x[3] = -std::numeric_limits<float>::infinity();
  message = error_of([&] { quantize_nvfp4(x, 2, 32); });
  EXPECT_NE(message.find("[0, 3]"), std::string::npos) << message;
  // The per-block entry point refuses it too (through the block amax).
  uint8_t packed[8], scale;
  EXPECT_THROW(nvfp4_quantize_block(x.data(), 0.01f, packed, &scale), Error);
}

TEST(Nvfp4Errors, BadShapesAndScales) {
  std::vector<float> x(40, 1.0f);
  EXPECT_NE(error_of([&] { quantize_nvfp4(x, 2, 20); }).find("multiple of 16"), std::string::npos);
  EXPECT_NE(error_of([&] { quantize_nvfp4(x, 3, 16); }).find("needs 48"), std::string::npos);
  std::vector<float> y(32, 1.0f);
  EXPECT_THROW(quantize_nvfp4(y, 1, 32, 0.0f), Error);
  EXPECT_THROW(quantize_nvfp4(y, 1, 32, -1.0f), Error);
  EXPECT_THROW(quantize_nvfp4(y, 1, 32, std::numeric_limits<float>::quiet_NaN()), Error);
  EXPECT_THROW(quantize_nvfp4(y, 1, 32, std::numeric_limits<float>::infinity()), Error);
  EXPECT_THROW(quantize_nvfp4(y, 1, 32, std::numeric_limits<float>::denorm_min()), Error);
  EXPECT_THROW(nvfp4_tensor_scale_for_amax(-1.0f), Error);
  EXPECT_THROW(nvfp4_tensor_scale_for_amax(std::numeric_limits<float>::quiet_NaN()), Error);
  // A tensor so small that amax / 2688 is not a normal fp32 is refused with a clear message.
  std::vector<float> tiny(16, 1e-37f);
  EXPECT_NE(error_of([&] { quantize_nvfp4(tiny, 1, 16); }).find("too small"), std::string::npos);
  // The smallest accepted amax gives a normal scale and a working quantization.
  std::vector<float> small(16, 1e-34f);
  EXPECT_GE(quantize_nvfp4(small, 1, 16).tensor_scale, std::numeric_limits<float>::min());
}

TEST(Nvfp4Errors, QuantizeIntoChecksBuffersAndZeroScale) {
  std::vector<float> x(32, 1.0f);
  std::vector<uint8_t> packed(16), scales(2), short_packed(15);
  EXPECT_THROW(quantize_nvfp4_into(x, 1, 32, 0.01f, short_packed, scales), Error);
  EXPECT_THROW(quantize_nvfp4_into(x, 1, 32, 0.0f, packed, scales), Error);  // 0 only for all-zero x
  std::vector<float> zeros(32, 0.0f);
  quantize_nvfp4_into(zeros, 1, 32, 0.0f, packed, scales);
  EXPECT_EQ(scales, std::vector<uint8_t>(2, 0x38));
  quantize_nvfp4_into(x, 1, 32, 1.0f / 448.0f, packed, scales);
  const Nvfp4Matrix m = quantize_nvfp4(x, 1, 32, 1.0f / 448.0f);
  EXPECT_EQ(packed, m.packed);
  EXPECT_EQ(scales, m.scales);
}

TEST(Nvfp4Errors, DequantizeChecksOutputSize) {
  const Nvfp4Matrix m = quantize_nvfp4(std::vector<float>(32, 1.0f), 1, 32);
  std::vector<float> out(31);
  EXPECT_THROW(dequantize_nvfp4(m.view(), out), Error);
}

}  // namespace
}  // namespace fp4moe
