// CPU dense NVFP4 linear reference and the W4A4 activation quantizer (moe_reference.h).
// linear_nvfp4_reference: x [T, K] float row-major, W [N, K] NVFP4 (linear block scales), out [T, N]
// fp32: out[t, n] = fp32( sum_k x[t, k] * (e2m1 * e4m3)[n, k]  (fp64, exact terms)
//                          * tensor_scale  [* input_scale for W4A4, with x replaced by its unscaled
//                          NVFP4 values] ), the scales applied in double after the sum.
// Parallel over blocks of output features; each W row is decoded once and used for every token.
// quantize_dequantize_activations: per row, per 16-value block, nvfp4_quantize_block with the static
// input scale, then the ModelOpt dequantization e2m1 * fp32(fp32(e4m3) * input_scale) (the same
// formula as dequantize_nvfp4).
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "common/parallel.h"
#include "format/fp_codes.h"
#include "kernels/cpu/moe_reference.h"
#include "kernels/cpu/reference_detail.h"

namespace fp4moe {

namespace {

constexpr int64_t kLinearRowBlock = 16;

void check_finite_matrix(const char* what, std::span<const float> x, int64_t cols) {
  for (size_t i = 0; i < x.size(); ++i) {
    FP4MOE_CHECK(std::isfinite(x[i]), what, ": element [", static_cast<int64_t>(i) / cols, ", ",
                 static_cast<int64_t>(i) % cols, "] = ", x[i], " is not finite");
  }
}

}  // namespace

void quantize_dequantize_activations(std::span<const float> x, int64_t rows, int64_t cols, float input_scale,
                                     std::span<float> out) {
  FP4MOE_CHECK(rows >= 0 && cols > 0 && cols % kNvfp4BlockSize == 0, "quantize_dequantize_activations: shape [",
               rows, ", ", cols, "] needs rows >= 0 and cols a positive multiple of ", kNvfp4BlockSize);
  FP4MOE_CHECK(static_cast<int64_t>(x.size()) == rows * cols, "quantize_dequantize_activations: input has ", x.size(),
               " values, expected ", rows * cols);
  FP4MOE_CHECK(static_cast<int64_t>(out.size()) == rows * cols, "quantize_dequantize_activations: output has ",
               out.size(), " values, expected ", rows * cols);
  FP4MOE_CHECK(std::isfinite(input_scale) && input_scale > 0.0f,
               "quantize_dequantize_activations: input_scale must be finite and > 0, got ", input_scale);
  check_finite_matrix("quantize_dequantize_activations: input", x, cols);
  uint8_t packed[kNvfp4BlockSize / 2];
  uint8_t code = 0;
  for (int64_t b = 0; b < rows * cols / kNvfp4BlockSize; ++b) {
    nvfp4_quantize_block(x.data() + b * kNvfp4BlockSize, input_scale, packed, &code);
    const float scale = e4m3_decode(code) * input_scale;
    float* o = out.data() + b * kNvfp4BlockSize;
    for (int j = 0; j < kNvfp4BlockSize / 2; ++j) {
      o[2 * j] = e2m1_decode(packed[j] & 0xF) * scale;
      o[2 * j + 1] = e2m1_decode(static_cast<uint8_t>(packed[j] >> 4)) * scale;
    }
  }
}

void linear_nvfp4_reference(const Nvfp4View& w, std::span<const float> x, int64_t tokens, ActivationMode mode,
                            float input_scale, std::span<float> out) {
  FP4MOE_CHECK(w.rows > 0 && w.cols > 0 && w.cols % kNvfp4BlockSize == 0, "linear reference: weight shape [", w.rows,
               ", ", w.cols, "] needs positive dims and cols a multiple of ", kNvfp4BlockSize);
  FP4MOE_CHECK(w.packed != nullptr && w.scales != nullptr, "linear reference: weight view has no data");
  FP4MOE_CHECK(std::isfinite(w.tensor_scale) && w.tensor_scale > 0.0f,
               "linear reference: weight tensor scale must be finite and > 0, got ", w.tensor_scale);
  const int64_t N = w.rows, K = w.cols;
  FP4MOE_CHECK(tokens >= 0, "linear reference: negative token count ", tokens);
  FP4MOE_CHECK(static_cast<int64_t>(x.size()) == tokens * K, "linear reference: input has ", x.size(),
               " values, expected tokens (", tokens, ") x K (", K, ") = ", tokens * K);
  FP4MOE_CHECK(static_cast<int64_t>(out.size()) == tokens * N, "linear reference: output has ", out.size(),
               " values, expected tokens (", tokens, ") x N (", N, ") = ", tokens * N);
  const bool w4a4 = mode == ActivationMode::kW4A4;
  FP4MOE_CHECK(mode == ActivationMode::kW4A16 || w4a4, "linear reference: unknown activation mode ",
               static_cast<int>(mode));
  if (w4a4) {
    FP4MOE_CHECK(std::isfinite(input_scale) && input_scale > 0.0f,
                 "linear reference: W4A4 input_scale must be finite and > 0, got ", input_scale);
  }
  check_finite_matrix("linear reference: input", x, K);
  if (tokens == 0) return;

  // Activations in double: as given (W4A16) or as unscaled NVFP4 values (W4A4; exact).
  std::vector<double> xd(static_cast<size_t>(tokens * K));
  if (w4a4) {
    for (int64_t t = 0; t < tokens; ++t) detail::quantize_row_unscaled(x.data() + t * K, K, input_scale, xd.data() + t * K);
  } else {
    std::copy(x.begin(), x.end(), xd.begin());
  }
  const double scale = static_cast<double>(w.tensor_scale) * (w4a4 ? static_cast<double>(input_scale) : 1.0);
  const int64_t blocks = (N + kLinearRowBlock - 1) / kLinearRowBlock;
  parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    std::vector<double> row(static_cast<size_t>(K));
    for (int64_t n = b0 * kLinearRowBlock; n < std::min(N, b1 * kLinearRowBlock); ++n) {
      FP4MOE_CHECK(detail::decode_row_unscaled(w, n, row.data()), "linear reference: weight row ", n,
                   " has an E4M3 NaN block scale (code 0x7F/0xFF)");
      for (int64_t t = 0; t < tokens; ++t) {
        out[t * N + n] = static_cast<float>(detail::dot_f64(xd.data() + t * K, row.data(), K) * scale);
      }
    }
  });
}

}  // namespace fp4moe
