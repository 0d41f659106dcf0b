#include "format/nvfp4.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "format/fp_codes.h"

namespace fp4moe {

namespace {

// max |x_i| through the bit patterns: for non-NaN floats, |x| orders like its bits as an unsigned
// integer, and an integer max vectorizes where a float max (NaN and -0 rules) does not. A NaN or
// Inf element gives a NaN or Inf result, which the callers reject.
float abs_max(const float* x, int64_t n) {
  uint32_t max_bits = 0;
  for (int64_t i = 0; i < n; ++i) max_bits = std::max(max_bits, std::bit_cast<uint32_t>(x[i]) & 0x7FFFFFFFu);
  return std::bit_cast<float>(max_bits);
}

void check_shape(std::span<const float> x, int64_t rows, int64_t cols) {
  FP4MOE_CHECK(rows >= 0 && cols >= 0, "NVFP4 quantize: negative shape [", rows, ", ", cols, "]");
  FP4MOE_CHECK(cols % kNvfp4BlockSize == 0, "NVFP4 quantize: the last dimension (", cols,
               ") must be a multiple of ", kNvfp4BlockSize);
  FP4MOE_CHECK(static_cast<int64_t>(x.size()) == rows * cols, "NVFP4 quantize: input has ", x.size(),
               " values, shape [", rows, ", ", cols, "] needs ", rows * cols);
}

}  // namespace

float nvfp4_tensor_scale_for_amax(float amax) {
  FP4MOE_CHECK(std::isfinite(amax) && amax >= 0.0f, "NVFP4 tensor amax must be finite and >= 0, got ", amax);
  const float scale = amax / (kE2m1Max * kE4m3Max);  // ModelOpt: fp32(amax) / (6.0 * 448.0)
  // A subnormal (or flushed-to-zero) scale would make fp32(scale_code) * scale lose bits or become 0,
  // and x / 0 would saturate every code while dequantizing to 0. No real tensor is that small.
  FP4MOE_CHECK(amax == 0.0f || scale >= std::numeric_limits<float>::min(), "NVFP4 tensor amax ", amax,
               " is too small: amax / 2688 is not a normal fp32 (needs amax >= ",
               std::numeric_limits<float>::min() * (kE2m1Max * kE4m3Max), ")");
  return scale;
}

uint8_t nvfp4_block_scale_code(float block_amax, float tensor_scale) {
  FP4MOE_CHECK(std::isfinite(block_amax) && block_amax >= 0.0f && std::isfinite(tensor_scale) && tensor_scale >= 0.0f,
               "NVFP4 block scale: block amax (", block_amax, ") and tensor scale (", tensor_scale,
               ") must be finite and >= 0");
  // ModelOpt order: t = fp32(6 * scale_2), then s = amax_b / t, both rounded to fp32.
  float s = block_amax / (kE2m1Max * tensor_scale);
  // ModelOpt replaces a zero s by 1.0 (an all-zero block, or a block whose quotient underflows to 0).
  // An all-zero tensor has tensor_scale 0 as well, s = 0/0 = NaN: fp4moe stores 1.0 there too.
  if (s == 0.0f || block_amax == 0.0f) s = 1.0f;
  s = std::clamp(s, kE4m3MinSubnormal, kE4m3Max);  // never flush to 0, never NaN (ModelOpt export)
  return e4m3_encode_satfinite(s);
}

void nvfp4_quantize_block(const float* values, float tensor_scale, uint8_t* packed, uint8_t* scale_code) {
  const float block_amax = abs_max(values, kNvfp4BlockSize);
  const uint8_t code = nvfp4_block_scale_code(block_amax, tensor_scale);
  *scale_code = code;
  uint8_t codes[kNvfp4BlockSize] = {};
  if (block_amax != 0.0f) {  // an all-zero block keeps codes 0 (also avoids 0/0 when tensor_scale is 0)
    const float denominator = e4m3_decode(code) * tensor_scale;  // fp32(fp32(scale) * scale_2)
    for (int i = 0; i < kNvfp4BlockSize; ++i) {
      const float q = values[i] / denominator;  // true division, as ModelOpt (not a reciprocal multiply)
      // Sign as ModelOpt's `x < 0`: -0.0 (and a quotient that underflows to -0.0) encodes as +0.
      codes[i] = static_cast<uint8_t>((q < 0.0f ? 0x8 : 0x0) | e2m1_magnitude_code(std::fabs(q)));
    }
  }
  for (int j = 0; j < kNvfp4BlockSize / 2; ++j) {
    packed[j] = static_cast<uint8_t>(codes[2 * j] | (codes[2 * j + 1] << 4));
  }
}

float nvfp4_tensor_amax(std::span<const float> x, int64_t cols) {
  const float amax = abs_max(x.data(), static_cast<int64_t>(x.size()));
  if (!std::isfinite(amax)) {
    cols = std::max<int64_t>(cols, 1);
    for (size_t i = 0; i < x.size(); ++i) {
      FP4MOE_CHECK(std::isfinite(x[i]), "NVFP4 quantize: non-finite input ", x[i], " at element [",
                   static_cast<int64_t>(i) / cols, ", ", static_cast<int64_t>(i) % cols,
                   "]; NVFP4 has no NaN/Inf codes, so the quantizer refuses it");
    }
  }
  return amax;
}

void quantize_nvfp4_into(std::span<const float> x, int64_t rows, int64_t cols, float tensor_scale,
                         std::span<uint8_t> packed, std::span<uint8_t> scales) {
  check_shape(x, rows, cols);
  FP4MOE_CHECK(static_cast<int64_t>(packed.size()) == rows * cols / 2 &&
                   static_cast<int64_t>(scales.size()) == rows * cols / kNvfp4BlockSize,
               "NVFP4 quantize: output buffers have ", packed.size(), " packed bytes and ", scales.size(),
               " scales, shape [", rows, ", ", cols, "] needs ", rows * cols / 2, " and ", rows * cols / kNvfp4BlockSize);
  const float amax = nvfp4_tensor_amax(x, cols);
  FP4MOE_CHECK(std::isfinite(tensor_scale) &&
                   (tensor_scale >= std::numeric_limits<float>::min() || (tensor_scale == 0.0f && amax == 0.0f)),
               "NVFP4 quantize: the tensor scale must be a finite, normal fp32 > 0 (0 only for an all-zero tensor), got ",
               tensor_scale);
  const int64_t blocks = rows * cols / kNvfp4BlockSize;
  for (int64_t b = 0; b < blocks; ++b) {
    nvfp4_quantize_block(x.data() + b * kNvfp4BlockSize, tensor_scale, packed.data() + b * (kNvfp4BlockSize / 2),
                         scales.data() + b);
  }
}

namespace {

Nvfp4Matrix quantize_with_scale(std::span<const float> x, int64_t rows, int64_t cols, float tensor_scale) {
  check_shape(x, rows, cols);
  Nvfp4Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.tensor_scale = tensor_scale;
  m.packed.resize(static_cast<size_t>(rows * cols / 2));
  m.scales.resize(static_cast<size_t>(rows * cols / kNvfp4BlockSize));
  quantize_nvfp4_into(x, rows, cols, tensor_scale, m.packed, m.scales);
  return m;
}

}  // namespace

Nvfp4Matrix quantize_nvfp4(std::span<const float> x, int64_t rows, int64_t cols) {
  check_shape(x, rows, cols);
  return quantize_with_scale(x, rows, cols, nvfp4_tensor_scale_for_amax(nvfp4_tensor_amax(x, cols)));
}

Nvfp4Matrix quantize_nvfp4(std::span<const float> x, int64_t rows, int64_t cols, float tensor_scale) {
  FP4MOE_CHECK(std::isfinite(tensor_scale) && tensor_scale >= std::numeric_limits<float>::min(),
               "NVFP4 quantize: the tensor scale must be a finite, normal fp32 > 0, got ", tensor_scale);
  return quantize_with_scale(x, rows, cols, tensor_scale);
}

void dequantize_nvfp4(const Nvfp4View& m, std::span<float> out) {
  FP4MOE_CHECK(m.rows >= 0 && m.cols >= 0 && m.cols % kNvfp4BlockSize == 0, "NVFP4 dequantize: bad shape [", m.rows,
               ", ", m.cols, "]: cols must be a multiple of ", kNvfp4BlockSize);
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
