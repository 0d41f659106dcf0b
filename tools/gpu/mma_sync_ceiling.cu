// tools/gpu/mma_sync_ceiling.cu: the rate of mma.sync m16n8k16 BF16 (fp32 accumulation) on this GPU, the
// instruction the portable pipeline's GEMMs are made of. The BF16 ceiling of `fp4moe bench` is cuBLAS
// (wgmma on Hopper), which mma.sync cannot reach there; this probe says how far mma.sync itself goes, so
// a GEMM's tensor-pipe activity can be read against the instruction's own limit.
// Each warp runs CHAINS independent accumulator chains of mma.sync on register operands (random, never
// zeros; no memory traffic in the loop), WARPS_PER_SM warps per SM on every SM. CUDA events, warm-up,
// median of the repeats; every CUDA call checked. The sum of all accumulators is written out so the
// loop cannot be removed, and printed.
// Build and run (GPU machine): nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
//   -o /tmp/mma_ceiling tools/gpu/mma_sync_ceiling.cu && /tmp/mma_ceiling
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                                    \
  do {                                                                                                 \
    cudaError_t err_ = (call);                                                                         \
    if (err_ != cudaSuccess) {                                                                         \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                                                    \
    }                                                                                                  \
  } while (0)

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
    for (int c = 0; c < CHAINS; ++c) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};\n"
          : "+f"(acc[c][0]), "+f"(acc[c][1]), "+f"(acc[c][2]), "+f"(acc[c][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
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
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  for (int w = 0; w < 3; ++w) mma_loop<CHAINS><<<blocks, threads>>>(out, 1234u + w);
  CHECK(cudaGetLastError());
  std::vector<float> ms;
  for (int r = 0; r < 15; ++r) {
    CHECK(cudaEventRecord(start));
    mma_loop<CHAINS><<<blocks, threads>>>(out, 99u + r);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double med_ms = ms[ms.size() / 2];
  const double flops = 2.0 * 16 * 8 * 16 * double(kIterations) * CHAINS * blocks * (threads / 32);
  std::vector<float> host(size_t(blocks) * threads);
  CHECK(cudaMemcpy(host.data(), out, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double check = 0;
  for (float v : host) check += v;
  std::printf("warps/SM %2d  chains/warp %d  blocks %4d x %3d threads  %8.3f ms  %7.1f TFLOP/s  (checksum %.6g)\n",
              warps_per_sm, CHAINS, blocks, threads, med_ms, flops / (med_ms * 1e-3) / 1e12, check);
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
}

int main() {
  int device = 0, sms = 0, clock_khz = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, device));
  std::printf("%s, SM %d.%d, %d SMs, max clock %.0f MHz; mma.sync.m16n8k16 bf16 -> fp32, %d iterations\n", prop.name,
              prop.major, prop.minor, sms, clock_khz / 1e3, kIterations);
  float* out = nullptr;
  CHECK(cudaMalloc(&out, size_t(sms) * 32 * 32 * sizeof(float)));
  for (int warps : {4, 8, 16, 32}) {
    measure<4>(sms, warps, out);
    measure<8>(sms, warps, out);
  }
  CHECK(cudaFree(out));
  return 0;
}
