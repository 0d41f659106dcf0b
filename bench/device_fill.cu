// Device-side random fill (bench/device_fill.h).
// Inputs: a device pointer and a count; one thread per 4 values (grid-stride). Values come from a
// splitmix64 hash of (seed, index): deterministic, independent of the launch shape, never all zero.
#include <cuda_bf16.h>

#include "bench/device_fill.h"
#include "kernels/cuda/common/cuda_check.h"

namespace fp4moe::bench {
namespace {

__device__ inline float hash_uniform(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  // 24 random bits -> [-1, 1)
  return static_cast<float>(static_cast<int32_t>(z >> 40) - (1 << 23)) * (1.0f / (1 << 23));
}

template <typename T>
__global__ void fill_kernel(T* data, size_t count, uint64_t seed, float scale) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const float v = hash_uniform(seed, i) * scale;
    if constexpr (sizeof(T) == 2) {
      data[i] = __float2bfloat16_rn(v);
    } else {
      data[i] = v;
    }
  }
}

template <typename T>
void launch_fill(T* data, size_t count, uint64_t seed, float scale, void* stream) {
  if (count == 0) return;
  const int threads = 256;
  const size_t wanted = (count + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(wanted < 65536 ? wanted : 65536);
  fill_kernel<T><<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(data, count, seed, scale);
  FP4MOE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void fill_random_bf16(void* data, size_t count, uint64_t seed, float scale, void* stream) {
  launch_fill(static_cast<__nv_bfloat16*>(data), count, seed, scale, stream);
}

void fill_random_f32(float* data, size_t count, uint64_t seed, float scale, void* stream) {
  launch_fill(data, count, seed, scale, stream);
}

}  // namespace fp4moe::bench
