#include "format/nvfp4.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "format/fp_codes.h"

namespace fp4moe {

float nvfp4_tensor_scale_for_amax(float amax) {
  FP4MOE_CHECK(std::isfinite(amax) && amax >= 0.0f, "NVFP4 tensor amax must be finite and >= 0, got ", amax);
  return amax / (kE2m1Max * kE4m3Max);
}

uint8_t nvfp4_block_scale_code(float block_amax, float tensor_scale) {
  float s = block_amax / (kE2m1Max * tensor_scale);
  if (block_amax == 0.0f) s = 1.0f;  // all-zero block: ModelOpt stores 1.0 (0x38)
  s = std::clamp(s, kE4m3MinSubnormal, kE4m3Max);
  return e4m3_encode_satfinite(s);
}

void nvfp4_quantize_block(const float* values, float tensor_scale, uint8_t* packed, uint8_t* scale_code) {
  float block_amax = 0.0f;
  for (int i = 0; i < kNvfp4BlockSize; ++i) block_amax = std::max(block_amax, std::fabs(values[i]));
  const uint8_t code = nvfp4_block_scale_code(block_amax, tensor_scale);
  *scale_code = code;
  const float denominator = e4m3_decode(code) * tensor_scale;
  uint8_t codes[kNvfp4BlockSize];
  for (int i = 0; i < kNvfp4BlockSize; ++i) {
    if (block_amax == 0.0f) {
      codes[i] = 0;  // avoids 0/0 when the tensor scale is 0 too (all-zero tensor)
      continue;
    }
    float q = values[i] / denominator;  // true division, as ModelOpt
    uint8_t c = e2m1_encode(q);
    if (q == 0.0f) c = 0;  // ModelOpt's sign bit is (x < 0): -0.0 encodes as +0
    codes[i] = c;
  }
  for (int j = 0; j < kNvfp4BlockSize / 2; ++j) {
    packed[j] = static_cast<uint8_t>(codes[2 * j] | (codes[2 * j + 1] << 4));
  }
}

namespace {

void check_shape(std::span<const float> x, int64_t rows, int64_t cols) {
  FP4MOE_CHECK(rows >= 0 && cols >= 0, "NVFP4 quantize: negative shape [", rows, ", ", cols, "]");
  FP4MOE_CHECK(cols % kNvfp4BlockSize == 0, "NVFP4 quantize: the last dimension (", cols,
               ") must be a multiple of ", kNvfp4BlockSize);
  FP4MOE_CHECK(static_cast<int64_t>(x.size()) == rows * cols, "NVFP4 quantize: input has ", x.size(),
               " values, shape [", rows, ", ", cols, "] needs ", rows * cols);
}

float checked_amax(std::span<const float> x, int64_t cols) {
  float amax = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    FP4MOE_CHECK(std::isfinite(x[i]), "NVFP4 quantize: non-finite input ", x[i], " at element [",
                 static_cast<int64_t>(i) / cols, ", ", static_cast<int64_t>(i) % cols,
                 "]; NVFP4 has no NaN/Inf codes, so the quantizer refuses it");
    amax = std::max(amax, std::fabs(x[i]));
  }
  return amax;
}

Nvfp4Matrix quantize_checked(std::span<const float> x, int64_t rows, int64_t cols, float tensor_scale) {
  Nvfp4Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.tensor_scale = tensor_scale;
  m.packed.resize(static_cast<size_t>(rows * cols / 2));
  m.scales.resize(static_cast<size_t>(rows * cols / kNvfp4BlockSize));
  const int64_t blocks = rows * cols / kNvfp4BlockSize;
  for (int64_t b = 0; b < blocks; ++b) {
    nvfp4_quantize_block(x.data() + b * kNvfp4BlockSize, tensor_scale, m.packed.data() + b * 8, m.scales.data() + b);
  }
  return m;
}

}  // namespace

Nvfp4Matrix quantize_nvfp4(std::span<const float> x, int64_t rows, int64_t cols) {
  check_shape(x, rows, cols);
  const float amax = checked_amax(x, std::max<int64_t>(cols, 1));
  return quantize_checked(x, rows, cols, nvfp4_tensor_scale_for_amax(amax));
}

Nvfp4Matrix quantize_nvfp4(std::span<const float> x, int64_t rows, int64_t cols, float tensor_scale) {
  check_shape(x, rows, cols);
  FP4MOE_CHECK(std::isfinite(tensor_scale) && tensor_scale > 0.0f,
               "NVFP4 quantize: the tensor scale must be finite and > 0, got ", tensor_scale);
  checked_amax(x, std::max<int64_t>(cols, 1));
  return quantize_checked(x, rows, cols, tensor_scale);
}

void dequantize_nvfp4(const Nvfp4View& m, std::span<float> out) {
  FP4MOE_CHECK(static_cast<int64_t>(out.size()) == m.rows * m.cols, "NVFP4 dequantize: output has ", out.size(),
               " values, shape [", m.rows, ", ", m.cols, "] needs ", m.rows * m.cols);
  const int64_t blocks_per_row = m.cols / kNvfp4BlockSize;
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t b = 0; b < blocks_per_row; ++b) {
      const float scale = e4m3_decode(m.scales[r * blocks_per_row + b]) * m.tensor_scale;
      for (int i = 0; i < kNvfp4BlockSize; ++i) {
        const int64_t c = b * kNvfp4BlockSize + i;
        out[r * m.cols + c] = e2m1_decode(nvfp4_code_at(m, r, c)) * scale;
      }
    }
  }
}

double nvfp4_exact_value(const Nvfp4View& m, int64_t r, int64_t c) {
  const double scale = e4m3_decode(m.scales[(r * m.cols + c) / kNvfp4BlockSize]);
  return static_cast<double>(e2m1_decode(nvfp4_code_at(m, r, c))) * scale * static_cast<double>(m.tensor_scale);
}

}  // namespace fp4moe
