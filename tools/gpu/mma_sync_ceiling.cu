// tools/gpu/mma_sync_ceiling.cu: the rate of mma.sync m16n8k16 BF16 (fp32 accumulation) on this GPU, the
// instruction the portable pipeline's GEMMs are made of. The BF16 ceiling of `fp4moe bench` is cuBLAS
// (wgmma on Hopper), which mma.sync cannot reach there; this probe says how far mma.sync itself goes, so
// a GEMM's tensor-pipe activity can be read against the instruction's own limit.
// Each warp runs CHAINS independent accumulator chains of mma.sync on register operands (random, never
// zeros; no memory traffic in the loop), WARPS_PER_SM warps per SM on every SM. CUDA events, warm-up,
// median of the repeats; every CUDA call checked (FP4MOE_CUDA_CHECK: the error is printed, exit 1). The
// sum of all accumulators is written out so the loop cannot be removed, and printed. The mma is the
// kernels' own (sm80::mma_bf16).
// Build and run (GPU machine, repository root): nvcc -O3 -std=c++17 -Isrc \
//   -gencode=arch=compute_90a,code=sm_90a -o /tmp/mma_ceiling tools/gpu/mma_sync_ceiling.cu && /tmp/mma_ceiling
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/mma_sm80.cuh"

constexpr int kIterations = 4096;

template <int CHAINS>
__global__ void mma_loop(float* out, uint32_t seed) {
  // Operands: bf16x2 words of random values in [1, 2) (never zeros; sums stay far from overflow).
  uint32_t x = seed ^ (blockIdx.x * 977u + threadIdx.x * 131u);
  auto next = [&x] {
    x = x * 1664525u + 1013904223u;
    return (x & 0x007F007Fu) | 0x3F803F80u;
  };
  uint32_t a[4] = {next(), next(), next(), next()};
  uint32_t b[2] = {next(), next()};
  float acc[CHAINS][4];
  for (int c = 0; c < CHAINS; ++c)
    for (int q = 0; q < 4; ++q) acc[c][q] = 0.0f;
  for (int it = 0; it < kIterations; ++it) {
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) fp4moe::sm80::mma_bf16(acc[c], a, b[0], b[1]);
  }
  float sum = 0.0f;
  for (int c = 0; c < CHAINS; ++c)
    for (int q = 0; q < 4; ++q) sum += acc[c][q];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

template <int CHAINS>
void measure(int sms, int warps_per_sm, float* out) {
  const int threads = 32 * std::min(warps_per_sm, 8), blocks_per_sm = (warps_per_sm * 32) / threads;
  const int blocks = sms * blocks_per_sm;
  cudaEvent_t start, stop;
  FP4MOE_CUDA_CHECK(cudaEventCreate(&start));
  FP4MOE_CUDA_CHECK(cudaEventCreate(&stop));
  for (int w = 0; w < 3; ++w) mma_loop<CHAINS><<<blocks, threads>>>(out, 1234u + w);
  FP4MOE_CUDA_CHECK(cudaGetLastError());
  std::vector<float> ms;
  for (int r = 0; r < 15; ++r) {
    FP4MOE_CUDA_CHECK(cudaEventRecord(start));
    mma_loop<CHAINS><<<blocks, threads>>>(out, 99u + r);
    FP4MOE_CUDA_CHECK(cudaGetLastError());
    FP4MOE_CUDA_CHECK(cudaEventRecord(stop));
    FP4MOE_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    FP4MOE_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double med_ms = ms[ms.size() / 2];
  const double flops = 2.0 * 16 * 8 * 16 * double(kIterations) * CHAINS * blocks * (threads / 32);
  std::vector<float> host(size_t(blocks) * threads);
  FP4MOE_CUDA_CHECK(cudaMemcpy(host.data(), out, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double check = 0;
  for (float v : host) check += v;
  std::printf("warps/SM %2d  chains/warp %d  blocks %4d x %3d threads  %8.3f ms  %7.1f TFLOP/s  (checksum %.6g)\n",
              warps_per_sm, CHAINS, blocks, threads, med_ms, flops / (med_ms * 1e-3) / 1e12, check);
  FP4MOE_CUDA_CHECK(cudaEventDestroy(start));
  FP4MOE_CUDA_CHECK(cudaEventDestroy(stop));
}

int run() {
  int device = 0, sms = 0, clock_khz = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
  cudaDeviceProp prop;
  FP4MOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  std::printf("%s, SM %d.%d, %d SMs, max clock %.0f MHz; mma.sync.m16n8k16 bf16 -> fp32, %d iterations\n", prop.name,
              prop.major, prop.minor, sms, clock_khz / 1e3, kIterations);
  float* out = nullptr;
  FP4MOE_CUDA_CHECK(cudaMalloc(&out, size_t(sms) * 32 * 32 * sizeof(float)));
  for (int warps : {4, 8, 16, 32}) {
    measure<4>(sms, warps, out);
    measure<8>(sms, warps, out);
  }
  FP4MOE_CUDA_CHECK(cudaFree(out));
  return 0;
}

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mma_sync_ceiling: %s\n", e.what());
    return 1;
  }
}
