// The fused decode's W4A4 activation quantization on the GPU (moe_fused_decode_sm80_w4a4.cuh, through
// fused_decode_w4a4_probe.cu): for every item token count 1..8 (its four ways of sharing a row among
// lanes), every lane's 32 values must be the CPU reference's NVFP4 quantize-dequantize
// (nvfp4_quantize_block) of the row it stands for, bit for bit: random rows with typical static scales;
// rows of exact rounding midpoints and their BF16 neighbours (where only the division decides);
// all-zero, saturating and tiny blocks; tensor scales whose divisors have no normal reciprocal.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "format/bf16.h"
#include "format/fp_codes.h"
#include "format/nvfp4.h"
#include "format/synthetic.h"
#include "fused_decode_w4a4_probe.h"
#include "gpu_test_util.h"

namespace fp4moe {
namespace {

using test::kW4A4ProbeColumns;

// The reference quantize-dequantize (without the tensor scale) of one row, as BF16 bits.
std::vector<uint16_t> reference_row(const uint16_t* row, float tensor_scale) {
  std::vector<uint16_t> out(kW4A4ProbeColumns);
  for (int blk = 0; blk < kW4A4ProbeColumns / kNvfp4BlockSize; ++blk) {
    float values[kNvfp4BlockSize];
    for (int i = 0; i < kNvfp4BlockSize; ++i) values[i] = bf16_to_float(row[blk * kNvfp4BlockSize + i]);
    uint8_t packed[kNvfp4BlockSize / 2], code = 0;
    nvfp4_quantize_block(values, tensor_scale, packed, &code);
    const float scale = e4m3_decode(code);
    for (int i = 0; i < kNvfp4BlockSize; ++i) {
      const uint8_t nibble = (packed[i / 2] >> (4 * (i % 2))) & 0xF;
      out[blk * kNvfp4BlockSize + i] = float_to_bf16(e2m1_decode(nibble) * scale);  // exact in BF16
    }
  }
  return out;
}

// Runs the probe and compares every lane with the reference of its row (g % rows, or row 0 past the
// tokens: launch 1 only uses lanes g < tokens, but the others must be consistent too).
void expect_reference(const std::vector<uint16_t>& rows, int tokens, float tensor_scale, const std::string& label) {
  const std::vector<uint16_t> got = test::run_w4a4_quantize(rows, tokens, tensor_scale);
  const int row_count = tokens <= 1 ? 1 : tokens <= 2 ? 2 : tokens <= 4 ? 4 : 8;
  int wrong = 0;
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4, row = g % row_count < tokens ? g % row_count : 0;
    const std::vector<uint16_t> want = reference_row(rows.data() + row * kW4A4ProbeColumns, tensor_scale);
    for (int i = 0; i < 32; ++i) {
      const uint16_t w = want[32 * t + i], v = got[32 * lane + i];
      if (v != w && ++wrong <= 4)
        ADD_FAILURE() << label << ": lane " << lane << " (row " << row << ") column " << 32 * t + i << ": got "
                      << bf16_to_float(v) << " (0x" << std::hex << v << "), reference " << bf16_to_float(w) << " (0x"
                      << w << std::dec << ") from " << bf16_to_float(rows[row * kW4A4ProbeColumns + 32 * t + i]);
    }
  }
  EXPECT_EQ(wrong, 0) << label;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = float_to_bf16(values[i]);
  return bits;
}

uint16_t next_bf16(uint16_t bits, int direction) {  // the BF16 neighbour of a positive finite value
  return static_cast<uint16_t>(bits + direction);
}

// Rows whose blocks hold midpoint * divisor (tensor scale 1 and an anchor 6 * block_scale, so the block
// scale and the divisor are block_scale) and their BF16 neighbours, both signs, different in every row.
std::vector<uint16_t> midpoint_rows(int tokens, float block_scale) {
  std::vector<uint16_t> pool;
  for (float midpoint : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f}) {
    const uint16_t exact = float_to_bf16(midpoint * block_scale);
    for (uint16_t bits : {exact, next_bf16(exact, 1), next_bf16(exact, -1)}) {
      pool.push_back(bits);
      pool.push_back(static_cast<uint16_t>(bits | 0x8000u));
    }
  }
  std::vector<uint16_t> rows(static_cast<size_t>(tokens) * kW4A4ProbeColumns);
  for (int r = 0; r < tokens; ++r)
    for (int blk = 0; blk < kW4A4ProbeColumns / kNvfp4BlockSize; ++blk)
      for (int i = 0; i < kNvfp4BlockSize; ++i) {
        const size_t at = size_t(r) * kW4A4ProbeColumns + blk * kNvfp4BlockSize + i;
        rows[at] = i == (r + blk) % kNvfp4BlockSize
                       ? float_to_bf16((blk % 2 ? -6.0f : 6.0f) * block_scale)
                       : pool[(r * 31 + blk * 15 + i) % pool.size()];
      }
  return rows;
}

TEST(FusedDecodeW4A4, LanesShareTheQuantizationAndMatchTheReferenceBits) {
  std::string why;
  const DeviceInfo* device = test::sm80_device(why);
  if (!device) GTEST_SKIP() << why;
  FP4MOE_CUDA_CHECK(cudaSetDevice(device->ordinal));
  for (int tokens = 1; tokens <= 8; ++tokens) {
    const std::string n = " tokens=" + std::to_string(tokens);
    // Random rows: the static scale of their amax (as calibration gives), one 8x smaller (saturating
    // blocks), and 1.0.
    for (uint64_t seed : {1, 2, 3}) {
      const std::vector<float> values = synthetic_activations(tokens, kW4A4ProbeColumns, 40 + seed);
      float amax = 0.0f;
      for (float v : values) amax = std::fmax(amax, std::fabs(v));
      const std::vector<uint16_t> rows = to_bf16(values);
      for (float scale : {nvfp4_tensor_scale_for_amax(amax), nvfp4_tensor_scale_for_amax(amax / 8), 1.0f})
        expect_reference(rows, tokens, scale, "random seed " + std::to_string(seed) + " scale " + std::to_string(scale) + n);
    }
    for (float block_scale : {1.0f, 0.375f, 0x1p-9f, 448.0f})
      expect_reference(midpoint_rows(tokens, block_scale), tokens, 1.0f, "midpoints, block scale " + std::to_string(block_scale) + n);
    // A zero block; a saturating value beside ordinary ones; tiny values; values near the smallest
    // normal float (with the 1e-39 scale their divisor is subnormal); then extreme tensor scales
    // (divisors outside the normal range, and 6 * 3e38 = inf: a zero quotient, block scale 1).
    std::vector<float> special(static_cast<size_t>(tokens) * kW4A4ProbeColumns, 0.0f);
    for (int r = 0; r < tokens; ++r)
      for (int i = 16; i < kW4A4ProbeColumns; ++i) {
        float v = -0.7f * static_cast<float>(i - 111) / static_cast<float>(r + 1);
        if (i < 48) v = i == 20 + r ? 3e30f : 0.5f + 0.01f * static_cast<float>(i);
        else if (i < 80) v = (i % 3 ? 1.5e-30f : -1.5e-30f) * static_cast<float>(i + r);
        else if (i < 112) v = (i % 2 ? 2e-38f : -2e-38f) * static_cast<float>(1 + (i + r) % 5);
        special[size_t(r) * kW4A4ProbeColumns + i] = v;
      }
    const std::vector<uint16_t> rows = to_bf16(special);
    for (float scale : {1.0f, 1e-39f, 3e38f, 1e-30f})
      expect_reference(rows, tokens, scale, "special values, scale " + std::to_string(scale) + n);
  }
}

}  // namespace
}  // namespace fp4moe
