// The fused decode's W4A4 activation quantization on the GPU (quantize_block_w4a4 in
// moe_fused_decode_sm80_w4a4.cuh, through fused_decode_w4a4_probe.cu): every block must be the CPU
// reference's NVFP4 quantize-dequantize (detail::quantize_row_unscaled) bit for bit: random rows with typical
// static scales; exact rounding midpoints and their BF16 neighbours (where only the division decides);
// all-zero, saturating, tiny and near-subnormal blocks; tensor scales whose divisors have no normal
// reciprocal or whose block-scale quotient is 0 (6 * 3e38 = inf).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "format/bf16.h"
#include "format/nvfp4.h"
#include "format/synthetic.h"
#include "fused_decode_w4a4_probe.h"
#include "gpu_test_util.h"
#include "kernels/cpu/reference_detail.h"

namespace fp4moe {
namespace {

// The CPU reference's own activation quantization (without the tensor scale) of whole blocks, as BF16
// bits (exact: at most 6 significant bits).
std::vector<uint16_t> reference_blocks(const std::vector<uint16_t>& bits, float tensor_scale) {
  std::vector<float> values(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) values[i] = bf16_to_float(bits[i]);
  std::vector<double> quantized(bits.size());
  detail::quantize_row_unscaled(values.data(), static_cast<int64_t>(values.size()), tensor_scale, quantized.data());
  std::vector<uint16_t> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = float_to_bf16(static_cast<float>(quantized[i]));
  return out;
}

void expect_reference(const std::vector<uint16_t>& bits, float tensor_scale, const std::string& label) {
  const std::vector<uint16_t> got = test::run_w4a4_quantize_blocks(bits, tensor_scale);
  const std::vector<uint16_t> want = reference_blocks(bits, tensor_scale);
  int wrong = 0;
  for (size_t i = 0; i < bits.size(); ++i)
    if (got[i] != want[i] && ++wrong <= 4)
      ADD_FAILURE() << label << ": value " << i << " (" << bf16_to_float(bits[i]) << "): got " << bf16_to_float(got[i])
                    << " (0x" << std::hex << got[i] << "), reference " << bf16_to_float(want[i]) << " (0x" << want[i]
                    << std::dec << ")";
  EXPECT_EQ(wrong, 0) << label;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = float_to_bf16(values[i]);
  return bits;
}

// Blocks of midpoint * block_scale (tensor scale 1 and an anchor +-6 * block_scale, so the block scale
// and the divisor are block_scale), their BF16 neighbours, both signs.
std::vector<uint16_t> midpoint_blocks(float block_scale) {
  std::vector<uint16_t> pool;
  for (float midpoint : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f}) {
    const uint16_t exact = float_to_bf16(midpoint * block_scale);
    for (uint16_t bits : {exact, static_cast<uint16_t>(exact + 1), static_cast<uint16_t>(exact - 1)}) {
      pool.push_back(bits);
      pool.push_back(static_cast<uint16_t>(bits | 0x8000u));
    }
  }
  std::vector<uint16_t> bits(64 * kNvfp4BlockSize);
  for (int blk = 0; blk < 64; ++blk)
    for (int i = 0; i < kNvfp4BlockSize; ++i)
      bits[blk * kNvfp4BlockSize + i] = i == blk % kNvfp4BlockSize
                                            ? float_to_bf16((blk % 2 ? -6.0f : 6.0f) * block_scale)
                                            : pool[(blk * 15 + i) % pool.size()];
  return bits;
}

TEST(FusedDecodeW4A4, BlockQuantizationMatchesTheReferenceBits) {
  std::string why;
  const DeviceInfo* device = test::sm80_device(why);
  if (!device) GTEST_SKIP() << why;
  FP4MOE_CUDA_CHECK(cudaSetDevice(device->ordinal));
  // Random rows: the static scale of their amax (as calibration gives), one 8x smaller (saturating
  // blocks), and 1.0.
  for (uint64_t seed : {1, 2, 3}) {
    const std::vector<float> values = synthetic_activations(8, 4096, 40 + seed);
    float amax = 0.0f;
    for (float v : values) amax = std::fmax(amax, std::fabs(v));
    const std::vector<uint16_t> bits = to_bf16(values);
    for (float scale : {nvfp4_tensor_scale_for_amax(amax), nvfp4_tensor_scale_for_amax(amax / 8), 1.0f})
      expect_reference(bits, scale, "random seed " + std::to_string(seed) + " scale " + std::to_string(scale));
  }
  for (float block_scale : {1.0f, 0.375f, 0x1p-9f, 448.0f})
    expect_reference(midpoint_blocks(block_scale), 1.0f, "midpoints, block scale " + std::to_string(block_scale));
  // A zero block; a saturating value beside ordinary ones; tiny values; values near the smallest normal
  // float (with the 1e-39 scale their divisor is subnormal).
  std::vector<float> special(256, 0.0f);
  for (int i = 16; i < 256; ++i) {
    float v = -0.7f * static_cast<float>(i - 200);
    if (i < 48) v = i == 20 ? 3e30f : 0.5f + 0.01f * static_cast<float>(i);
    else if (i < 96) v = (i % 3 ? 1.5e-30f : -1.5e-30f) * static_cast<float>(i);
    else if (i < 160) v = (i % 2 ? 2e-38f : -2e-38f) * static_cast<float>(1 + i % 5);
    special[i] = v;
  }
  for (float scale : {1.0f, 1e-39f, 3e38f, 1e-30f})
    expect_reference(to_bf16(special), scale, "special values, scale " + std::to_string(scale));
}

}  // namespace
}  // namespace fp4moe
