// Test probe for the fused decode's W4A4 activation quantization (src/kernels/cuda/
// moe_fused_decode_sm80_w4a4.cuh): one warp loads one 128-column chunk of up to 8 token rows as launch 1
// does (lane g: row g % rows, or row 0 past the tokens; columns [32t, 32t + 32)), quantizes it for an
// item of `tokens` tokens, and returns every lane's 32 BF16 results.
#pragma once
#include <cstdint>
#include <vector>

namespace fp4moe::test {

inline constexpr int kW4A4ProbeColumns = 128;

// `rows`: `tokens` (1..8) rows of kW4A4ProbeColumns BF16 bit patterns. Returns [32 lanes][32] BF16
// bits, lane l's values in its column order (columns 32 (l % 4) + i). Throws on CUDA errors.
std::vector<uint16_t> run_w4a4_quantize(const std::vector<uint16_t>& rows, int tokens, float tensor_scale);

}  // namespace fp4moe::test
