// Test probe for the fused decode's W4A4 activation quantization (src/kernels/cuda/
// moe_fused_decode_sm80_w4a4.cuh): quantize_block_w4a4 run by one GPU thread per 16-value block.
#pragma once
#include <cstdint>
#include <vector>

namespace fp4moe::test {

// `values`: BF16 bit patterns, a multiple of 16 (one NVFP4 block per thread). Returns the blocks'
// quantize-dequantized values (without the tensor scale) as BF16 bits. Throws on CUDA errors.
std::vector<uint16_t> run_w4a4_quantize_blocks(const std::vector<uint16_t>& values, float tensor_scale);

}  // namespace fp4moe::test
