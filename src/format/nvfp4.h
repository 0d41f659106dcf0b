// NVFP4: E2M1 values, one E4M3 block scale per 16 consecutive values along K (the last dim), one
// FP32 tensor scale (weight_scale_2 / input_scale, the *decode* direction: amax / (6 * 448)).
//
// Quantization is ModelOpt-exact (nvfp4-format.md section 3.2): true fp32 division, round to
// nearest even, saturation at 6, block scales clamped to [2^-9, 448]. Edge cases (all-zero blocks
// and tensors, tiny blocks, NaN/Inf input) are decided in docs/format.md.
// Packing: byte j of a row holds element 2j in the LOW nibble and 2j+1 in the high nibble.
// Scales here are always the linear [rows, cols/16] layout; see sf_layout.h for the 128x4 swizzle.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace fp4moe {

inline constexpr int kNvfp4BlockSize = 16;

// Non-owning view of an NVFP4 matrix [rows, cols].
struct Nvfp4View {
  const uint8_t* packed = nullptr;  // rows * cols / 2 bytes
  const uint8_t* scales = nullptr;  // rows * cols / 16 E4M3 codes, linear layout
  float tensor_scale = 0.0f;
  int64_t rows = 0;
  int64_t cols = 0;
};

// Owning NVFP4 matrix [rows, cols].
struct Nvfp4Matrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> packed;
  std::vector<uint8_t> scales;
  float tensor_scale = 0.0f;
  Nvfp4View view() const { return {packed.data(), scales.data(), tensor_scale, rows, cols}; }
};

// weight_scale_2 for a tensor amax: fp32(amax) / 2688. amax must be finite and >= 0, and either 0
// or large enough (>= ~3.2e-35) that the scale is a normal fp32; otherwise Error.
float nvfp4_tensor_scale_for_amax(float amax);

// The E4M3 block scale code for a block amax: s = fp32(amax / fp32(6 * tensor_scale)); s == 0 (or
// amax == 0) -> 1.0; clamp to [2^-9, 448]; RNE to E4M3. Element codes use ModelOpt's sign rule
// (q < 0), so -0.0 encodes as +0.
uint8_t nvfp4_block_scale_code(float block_amax, float tensor_scale);

// Quantize one block of 16 values with a known tensor scale: writes 8 packed bytes and the scale
// code. A NaN/Inf value throws (through the block amax) without naming the element; the matrix
// functions below name it.
void nvfp4_quantize_block(const float* values, float tensor_scale, uint8_t* packed, uint8_t* scale_code);

// Quantize x [rows, cols] (row-major) with the tensor scale derived from amax(x). Throws Error on
// NaN/Inf input (naming the element) or cols % 16 != 0.
Nvfp4Matrix quantize_nvfp4(std::span<const float> x, int64_t rows, int64_t cols);
// Same with a given tensor scale (a static activation input_scale, or a weight_scale_2 to reuse);
// tensor_scale must be a finite, normal fp32 > 0. Blocks above 6 * 448 * tensor_scale saturate.
Nvfp4Matrix quantize_nvfp4(std::span<const float> x, int64_t rows, int64_t cols, float tensor_scale);

// max |x| over a row-major [*, cols] tensor; throws Error naming the first NaN/Inf element [r, c].
float nvfp4_tensor_amax(std::span<const float> x, int64_t cols);
// quantize_nvfp4 with a given tensor scale into caller storage: packed rows*cols/2 bytes, scales
// rows*cols/16 codes (linear). tensor_scale: finite normal fp32 > 0, or 0 for an all-zero x.
void quantize_nvfp4_into(std::span<const float> x, int64_t rows, int64_t cols, float tensor_scale,
                         std::span<uint8_t> packed, std::span<uint8_t> scales);

// ModelOpt dequantization: e2m1(q) * fp32(fp32(scale) * tensor_scale). out has rows * cols floats.
void dequantize_nvfp4(const Nvfp4View& m, std::span<float> out);

// The E2M1 code of element (r, c) (0..15).
inline uint8_t nvfp4_code_at(const Nvfp4View& m, int64_t r, int64_t c) {
  uint8_t byte = m.packed[(r * m.cols + c) / 2];
  return (c & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0xF);
}

// Exact value of element (r, c) in double: e2m1 * scale * tensor_scale has at most 29 significant
// bits, so double holds it exactly (the references accumulate in double).
double nvfp4_exact_value(const Nvfp4View& m, int64_t r, int64_t c);

}  // namespace fp4moe
