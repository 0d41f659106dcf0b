// DIAGNOSTIC r38 (run in r39: docs/perf/2026-12-06-h200-r39-route-latency.txt): cycles of one warp's
// routing of one token through route_token_warp (kernels/cuda/moe_route_device.cuh), warm, in isolation:
// one warp, 4096 calls over 64 logits rows (L1-resident after the first pass), clock64 around each call.
// Build it against a tree's headers, e.g. main and a copy with a candidate patch applied, and compare the medians:
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I<tree>/src THIS.cu -o /tmp/route_latency
// Prints per routing config and weights_needed: median / p10 / p90 cycles, the first three calls of the
// launch, and (softmax methods) the ids' mismatches against a CPU top-k in the reference order (score
// descending, -0 == +0, NaN below -inf, ties to the lower expert). Then the latency of the warp-wide
// primitives a top-k round chains. r38's first version (select_top_k<16> directly, call 8) gave
// docs/perf/2026-12-06-h100-r38-topk-latency.txt.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "common/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/moe_route_device.cuh"

using namespace fp4moe;
using namespace fp4moe::route_device;

constexpr int kIters = 4096, kRows = 64;

__global__ void route_kernel(RouteParams p, int iters, bool weights_needed, long long* cycles, int* ids) {
  __shared__ float scratch[2 * kMaxExperts];
  __shared__ int32_t ids_out[kMaxTopK];
  __shared__ float weights_out[kMaxTopK];
  const int lane = threadIdx.x;
  for (int it = 0; it < iters; ++it) {
    __syncwarp();
    const long long t0 = clock64();
    route_token_warp(p, it % p.tokens, scratch, scratch + p.num_experts, ids_out, weights_out, weights_needed);
    __syncwarp();
    const int id = lane < p.top_k ? ids_out[lane] : 0;
    const int sink = __reduce_add_sync(0xFFFFFFFFu, id);
    const long long t1 = clock64();
    if (lane == 0) cycles[it] = (t1 - t0) + (sink == 0x7FFFFFFF ? 1 : 0);
    if (lane < p.top_k) ids[size_t(it) * p.top_k + lane] = id;
  }
}

__global__ void chain_kernel(int n, long long* out, unsigned* sink) {
  const int lane = threadIdx.x;
  unsigned v = lane * 7u + 1u;
  long long t0 = clock64();
  for (int i = 0; i < n; ++i) v = __reduce_max_sync(0xFFFFFFFFu, v) + lane;
  long long t1 = clock64();
  for (int i = 0; i < n; ++i) v = __ballot_sync(0xFFFFFFFFu, (v >> (lane & 7)) & 1u) + lane;
  long long t2 = clock64();
  for (int i = 0; i < n; ++i) v = __shfl_sync(0xFFFFFFFFu, v, (v + 1u) & 31u) + lane;
  long long t3 = clock64();
  if (lane == 0) out[0] = t1 - t0, out[1] = t2 - t1, out[2] = t3 - t2;
  sink[lane] = v;
}

// The reference order on raw logits (softmax methods select on them).
static void cpu_top_k(const float* row, int E, int K, int* ids) {
  auto better = [&](int a, int b) {  // a before b
    const float x = row[a], y = row[b];
    const bool xn = x != x, yn = y != y;
    if (xn != yn) return yn;  // a number before NaN
    if (!xn && x != y) return x > y;
    return a < b;
  };
  std::vector<int> order(E);
  for (int e = 0; e < E; ++e) order[e] = e;
  std::stable_sort(order.begin(), order.end(), better);
  for (int k = 0; k < K; ++k) ids[k] = order[k];
}

struct Config {
  const char* name;
  int method, E, K, n_group, topk_group;
};

static int run() {
  const Config configs[] = {
      {"Qwen3.5 softmax_topk_renorm E512 K10", int(RoutingMethod::kSoftmaxTopkRenorm), 512, 10, 1, 1},
      {"Qwen3.5-35B softmax_topk_renorm E256 K8", int(RoutingMethod::kSoftmaxTopkRenorm), 256, 8, 1, 1},
      {"Qwen3 softmax_topk_renorm E128 K8", int(RoutingMethod::kSoftmaxTopkRenorm), 128, 8, 1, 1},
      {"E300 K7 (bounds)", int(RoutingMethod::kSoftmaxTopkRenorm), 300, 7, 1, 1},
      {"DeepSeek sigmoid_grouped E256 K8 g8/4", int(RoutingMethod::kSigmoidGroupedTopk), 256, 8, 8, 4},
  };
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const Config& c : configs) {
    std::vector<float> logits(size_t(kRows) * c.E), bias(c.E);
    for (float& x : logits) x = normal(rng);
    for (int e = 0; e < c.E; ++e) bias[e] = 0.01f * float((e * 37) % 11) - 0.05f;
    // Rows 16..31: few distinct values (ties); 32..39: NaNs, infinities and zeros of both signs.
    for (int r = 16; r < 32; ++r)
      for (int e = 0; e < c.E; ++e) logits[size_t(r) * c.E + e] = std::floor(logits[size_t(r) * c.E + e] * 2.0f) * 0.5f;
    for (int r = 32; r < 40; ++r)
      for (int e = 0; e < c.E; e += 37)
        logits[size_t(r) * c.E + e] = e % 4 == 0 ? NAN : (e % 4 == 1 ? INFINITY : (e % 4 == 2 ? -0.0f : -INFINITY));
    float *d_logits, *d_bias;
    long long* d_cycles;
    int* d_ids;
    FP4MOE_CUDA_CHECK(cudaMalloc(&d_logits, logits.size() * 4));
    FP4MOE_CUDA_CHECK(cudaMalloc(&d_bias, bias.size() * 4));
    FP4MOE_CUDA_CHECK(cudaMalloc(&d_cycles, kIters * sizeof(long long)));
    FP4MOE_CUDA_CHECK(cudaMalloc(&d_ids, size_t(kIters) * c.K * 4));
    FP4MOE_CUDA_CHECK(cudaMemcpy(d_logits, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice));
    FP4MOE_CUDA_CHECK(cudaMemcpy(d_bias, bias.data(), bias.size() * 4, cudaMemcpyHostToDevice));
    RouteParams p{d_logits, d_bias, nullptr, nullptr, kRows, c.E, c.K, c.method, c.n_group, c.topk_group, 2.5f, true};
    for (int weights_needed = 0; weights_needed < 2; ++weights_needed) {
      route_kernel<<<1, 32>>>(p, kIters, weights_needed != 0, d_cycles, d_ids);
      FP4MOE_CUDA_CHECK(cudaGetLastError());
      FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<long long> cycles(kIters);
      std::vector<int> ids(size_t(kIters) * c.K);
      FP4MOE_CUDA_CHECK(cudaMemcpy(cycles.data(), d_cycles, kIters * sizeof(long long), cudaMemcpyDeviceToHost));
      FP4MOE_CUDA_CHECK(cudaMemcpy(ids.data(), d_ids, ids.size() * 4, cudaMemcpyDeviceToHost));
      int mismatches = -1;  // not checked (sigmoid_grouped_topk: tests/kernels/cuda/test_moe_route_permute.cpp)
      if (c.method != int(RoutingMethod::kSigmoidGroupedTopk)) {
        mismatches = 0;
        std::vector<int> ref(c.K);
        for (int r = 0; r < kRows; ++r) {
          cpu_top_k(logits.data() + size_t(r) * c.E, c.E, c.K, ref.data());
          for (int k = 0; k < c.K; ++k) mismatches += ids[size_t(r) * c.K + k] != ref[k];
        }
      }
      std::vector<long long> warm(cycles.begin() + kRows, cycles.end());
      std::sort(warm.begin(), warm.end());
      std::printf("%-40s weights %d: median %5lld cycles, p10 %5lld, p90 %5lld (calls 0-2: %lld %lld %lld); "
                  "mismatches %d\n",
                  c.name, weights_needed, warm[warm.size() / 2], warm[warm.size() / 10], warm[warm.size() * 9 / 10],
                  cycles[0], cycles[1], cycles[2], mismatches);
    }
    FP4MOE_CUDA_CHECK(cudaFree(d_logits));
    FP4MOE_CUDA_CHECK(cudaFree(d_bias));
    FP4MOE_CUDA_CHECK(cudaFree(d_cycles));
    FP4MOE_CUDA_CHECK(cudaFree(d_ids));
  }
  long long* d_out;
  unsigned* d_sink;
  FP4MOE_CUDA_CHECK(cudaMalloc(&d_out, 3 * sizeof(long long)));
  FP4MOE_CUDA_CHECK(cudaMalloc(&d_sink, 32 * sizeof(unsigned)));
  for (int pass = 0; pass < 2; ++pass) chain_kernel<<<1, 32>>>(1000, d_out, d_sink);
  FP4MOE_CUDA_CHECK(cudaGetLastError());
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  long long c3[3];
  FP4MOE_CUDA_CHECK(cudaMemcpy(c3, d_out, sizeof c3, cudaMemcpyDeviceToHost));
  std::printf("cycles per link (incl. one add): redux.max %.1f, ballot %.1f, shfl %.1f\n", c3[0] / 1000.0,
              c3[1] / 1000.0, c3[2] / 1000.0);
  return 0;
}

int main() {
  try {
    return run();
  } catch (const Error& e) {
    std::fprintf(stderr, "route_latency: %s\n", e.what());
    return 1;
  }
}
