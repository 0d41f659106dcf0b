// Random device buffers for benchmarks: a counter-based hash fills BF16 or fp32 values uniform in
// [-scale, scale] straight on the device, so multi-gigabyte inputs need no host round trip. Never
// zeros (METHOD.md: zeros make matrix products faster than real data and hide unwritten outputs).
#pragma once
#include <cstddef>
#include <cstdint>

namespace fp4moe::bench {

// count BF16 values at `data` (device), uniform in [-scale, scale], deterministic in (seed, index).
void fill_random_bf16(void* data, size_t count, uint64_t seed, float scale, void* stream);
// Same for fp32.
void fill_random_f32(float* data, size_t count, uint64_t seed, float scale, void* stream);

}  // namespace fp4moe::bench
