// Block-wide exclusive prefix sum of one integer per thread, for the counting sorts of the align
// kernel (int counts) and of the fused decode kernels (packed 64-bit counters). Integer sums are exact
// and the order is fixed, so every thread's result is deterministic.
#pragma once

namespace fp4moe {

// kWarps = blockDim.x / 32 (at most 32). `scratch` holds kWarps values of shared memory. Returns the sum
// of the values of the threads before this one; `total` is the sum over the block. Every thread of the
// block must call it; it ends with a barrier, so `scratch` may be reused right away.
template <int kWarps, typename T>
__device__ T block_exclusive_scan(T value, T* scratch, T& total) {
  static_assert(kWarps >= 1 && kWarps <= 32, "one scratch value per warp, at most 32 warps");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  T inclusive = value;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const T other = __shfl_up_sync(0xFFFFFFFFu, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  T before = 0, all = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) before += scratch[w];
    all += scratch[w];
  }
  __syncthreads();
  total = all;
  return before + inclusive - value;
}

}  // namespace fp4moe
