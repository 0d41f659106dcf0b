// MoeWeights: allocation, validation errors, and the gate/up/down views into the stacked
// w13 = [gate; up] and w2 arrays.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "format/moe_weights.h"
#include "format/nvfp4.h"

namespace fp4moe {
namespace {

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A quantized [rows, cols] matrix whose values depend on tag, so different projections differ.
Nvfp4Matrix tagged_matrix(int64_t rows, int64_t cols, int tag) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * static_cast<float>(i) + tag) * (1.0f + tag);
  return quantize_nvfp4(x, rows, cols);
}

constexpr int64_t kE = 3, kH = 64, kI = 32;

MoeWeights filled() {
  MoeWeights w;
  w.allocate(kE, kH, kI);
  for (int64_t e = 0; e < kE; ++e) {
    w.set_gate(e, tagged_matrix(kI, kH, static_cast<int>(3 * e)));
    w.set_up(e, tagged_matrix(kI, kH, static_cast<int>(3 * e + 1)));
    w.set_down(e, tagged_matrix(kH, kI, static_cast<int>(3 * e + 2)));
    w.w13_input_scale[e] = 0.01f;
    w.w2_input_scale[e] = 0.02f;
  }
  return w;
}

TEST(MoeWeights, AllocateSizes) {
  MoeWeights w;
  w.allocate(kE, kH, kI);
  EXPECT_EQ(w.w13_packed.size(), static_cast<size_t>(kE * 2 * kI * kH / 2));
  EXPECT_EQ(w.w13_scales.size(), static_cast<size_t>(kE * 2 * kI * kH / 16));
  EXPECT_EQ(w.w2_packed.size(), static_cast<size_t>(kE * kH * kI / 2));
  EXPECT_EQ(w.w2_scales.size(), static_cast<size_t>(kE * kH * kI / 16));
  EXPECT_EQ(w.gate_scale2.size(), static_cast<size_t>(kE));
  EXPECT_EQ(w.w2_input_scale.size(), static_cast<size_t>(kE));
  EXPECT_EQ(w.bytes_per_expert(), 3 * 64 * 32 / 2 + 3 * 64 * 32 / 16);
  EXPECT_THROW(w.allocate(0, kH, kI), Error);
  EXPECT_THROW(w.allocate(kE, 40, kI), Error);  // hidden not a multiple of 16
  EXPECT_THROW(w.allocate(kE, kH, 8), Error);
}

TEST(MoeWeights, FreshAllocationDoesNotValidate) {
  MoeWeights w;
  w.allocate(kE, kH, kI);
  const std::string message = error_of([&] { w.validate(); });
  EXPECT_NE(message.find("gate_scale2[0]"), std::string::npos) << message;
  EXPECT_NO_THROW(filled().validate());
}

TEST(MoeWeights, ValidateNamesTheBadField) {
  {
    MoeWeights w = filled();
    w.w13_packed.pop_back();
    EXPECT_NE(error_of([&] { w.validate(); }).find("w13_packed"), std::string::npos);
  }
  {
    MoeWeights w = filled();
    w.w2_scales.push_back(0x38);
    EXPECT_NE(error_of([&] { w.validate(); }).find("w2_scales"), std::string::npos);
  }
  {
    MoeWeights w = filled();
    w.up_scale2[2] = 0.0f;  // zero tensor scale
    EXPECT_NE(error_of([&] { w.validate(); }).find("up_scale2[2]"), std::string::npos);
  }
  {
    MoeWeights w = filled();
    w.down_scale2[1] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_NE(error_of([&] { w.validate(); }).find("down_scale2[1]"), std::string::npos);
  }
  {
    MoeWeights w = filled();
    w.w2_input_scale[0] = -1.0f;
    EXPECT_NE(error_of([&] { w.validate(); }).find("w2_input_scale[0]"), std::string::npos);
  }
  {
    MoeWeights w = filled();
    w.w13_scales[5] = 0x7F;  // E4M3 NaN
    const std::string message = error_of([&] { w.validate(); });
    EXPECT_NE(message.find("w13 block scale 5"), std::string::npos) << message;
  }
  {
    MoeWeights w = filled();
    w.w2_scales[7] = 0xFF;  // negative-signed E4M3 NaN
    EXPECT_NE(error_of([&] { w.validate(); }).find("w2 block scale 7"), std::string::npos);
  }
  {
    MoeWeights w = filled();
    w.w2_scales[7] = 0x7E;  // 448 is fine
    EXPECT_NO_THROW(w.validate());
  }
}

TEST(MoeWeights, ViewsSeeWhatWasSetAtTheStackedPositions) {
  const MoeWeights w = filled();
  for (int64_t e = 0; e < kE; ++e) {
    const Nvfp4Matrix gate = tagged_matrix(kI, kH, static_cast<int>(3 * e));
    const Nvfp4Matrix up = tagged_matrix(kI, kH, static_cast<int>(3 * e + 1));
    const Nvfp4Matrix down = tagged_matrix(kH, kI, static_cast<int>(3 * e + 2));
    EXPECT_NE(gate.tensor_scale, up.tensor_scale);
    // Views: shape, tensor scale, bytes.
    const Nvfp4View g = w.gate(e), u = w.up(e), d = w.down(e);
    EXPECT_EQ(g.rows, kI);
    EXPECT_EQ(g.cols, kH);
    EXPECT_EQ(d.rows, kH);
    EXPECT_EQ(d.cols, kI);
    EXPECT_EQ(g.tensor_scale, gate.tensor_scale);
    EXPECT_EQ(u.tensor_scale, up.tensor_scale);
    EXPECT_EQ(d.tensor_scale, down.tensor_scale);
    EXPECT_EQ(std::vector<uint8_t>(g.packed, g.packed + gate.packed.size()), gate.packed);
    EXPECT_EQ(std::vector<uint8_t>(u.scales, u.scales + up.scales.size()), up.scales);
    EXPECT_EQ(std::vector<uint8_t>(d.packed, d.packed + down.packed.size()), down.packed);
    // Stacked layout: w13 row (2e * I + r) is gate row r, row ((2e + 1) * I + r) is up row r.
    for (int64_t r = 0; r < kI; ++r) {
      for (int64_t j = 0; j < kH / 2; ++j) {
        ASSERT_EQ(w.w13_packed[((2 * e) * kI + r) * kH / 2 + j], gate.packed[r * kH / 2 + j]);
        ASSERT_EQ(w.w13_packed[((2 * e + 1) * kI + r) * kH / 2 + j], up.packed[r * kH / 2 + j]);
      }
      for (int64_t b = 0; b < kH / 16; ++b) {
        ASSERT_EQ(w.w13_scales[((2 * e + 1) * kI + r) * kH / 16 + b], up.scales[r * kH / 16 + b]);
      }
    }
    EXPECT_EQ(w.gate_scale2[e], gate.tensor_scale);
    EXPECT_EQ(w.up_scale2[e], up.tensor_scale);
    EXPECT_EQ(w.down_scale2[e], down.tensor_scale);
    // Dequantizing through the view gives what the matrix itself gives.
    std::vector<float> a(static_cast<size_t>(kH * kI)), b(a.size());
    dequantize_nvfp4(d, a);
    dequantize_nvfp4(down.view(), b);
    EXPECT_EQ(a, b);
  }
}

TEST(MoeWeights, SettersAndViewsRejectBadInput) {
  MoeWeights w = filled();
  EXPECT_NE(error_of([&] { w.set_gate(0, tagged_matrix(kH, kI, 0)); }).find("gate_proj"), std::string::npos);
  EXPECT_NE(error_of([&] { w.set_down(0, tagged_matrix(kI, kH, 0)); }).find("down_proj"), std::string::npos);
  EXPECT_NE(error_of([&] { w.set_up(kE, tagged_matrix(kI, kH, 0)); }).find("out of range"), std::string::npos);
  Nvfp4Matrix truncated = tagged_matrix(kI, kH, 0);
  truncated.packed.pop_back();
  EXPECT_THROW(w.set_gate(0, truncated), Error);
  EXPECT_THROW(w.gate(-1), Error);
  EXPECT_THROW(w.up(kE), Error);
  EXPECT_THROW(w.down(kE), Error);
}

}  // namespace
}  // namespace fp4moe
