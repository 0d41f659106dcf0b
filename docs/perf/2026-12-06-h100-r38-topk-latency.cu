// DIAGNOSTIC r38 (as run in call 8, not for main): latency of one warp's top-k selection (select_top_k<16>,
// E = 512, K = 0, 1, 10) in isolation, warm caches, main's and a variant with a ballot instead of the second
// warp reduction (-topk-ballot.patch's form), and of the warp-wide primitives a round chains. Output:
// docs/perf/2026-12-06-h100-r38-topk-latency.txt. Build on the device, from the repository root (edd85cb):
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Isrc THIS.cu -o /tmp/topk_lat
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/moe_route_device.cuh"

using namespace fp4moe::route_device;

#define CHECK(x)                                                                     \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

// Variant 2: the round's second reduction (lowest index among the holders of the max bits) only where
// two lanes hold them; otherwise the one holder is the ballot's lowest set bit and records its expert.
template <int kLaneExperts>
__device__ __noinline__ int select_top_k_ballot(const float* row, const float* bias, int E, int K, bool sigmoid,
                                                int n_group, int topk_group, float* score, float* value, int lane) {
  float logits[kLaneExperts];
#pragma unroll
  for (int j = 0; j < kLaneExperts; ++j) logits[j] = lane + 32 * j < E ? row[lane + 32 * j] : 0.0f;
#pragma unroll
  for (int j = 0; j < kLaneExperts; ++j)
    if (lane + 32 * j < E) value[lane + 32 * j] = logits[j];
  uint32_t bits[kLaneExperts];
  if (sigmoid) {
    sigmoid_scores(bias, E, lane, score, value);
#pragma unroll
    for (int j = 0; j < kLaneExperts; ++j) bits[j] = lane + 32 * j < E ? ordered_score_bits(score[lane + 32 * j]) : 0u;
  } else {
#pragma unroll
    for (int j = 0; j < kLaneExperts; ++j) bits[j] = lane + 32 * j < E ? ordered_score_bits(logits[j]) : 0u;
  }
  __syncwarp();
  uint32_t out = sigmoid && n_group > 1 ? grouped_exclusions(score, E, n_group, topk_group, lane) : 0u;
  __syncwarp();  // score's readers are done: the winners go there
  int* winners = reinterpret_cast<int*>(score);
  for (int k = 0; k < K; ++k) {
    uint32_t best_bits[kLaneExperts];
    int best_j[kLaneExperts];
#pragma unroll
    for (int j = 0; j < kLaneExperts; ++j) best_bits[j] = (out >> j) & 1u ? 0u : bits[j], best_j[j] = j;
#pragma unroll
    for (int stride = 1; stride < kLaneExperts; stride *= 2) {
#pragma unroll
      for (int j = 0; j + stride < kLaneExperts; j += 2 * stride) {
        const bool upper = best_bits[j + stride] > best_bits[j];
        best_bits[j] = upper ? best_bits[j + stride] : best_bits[j];
        best_j[j] = upper ? best_j[j + stride] : best_j[j];
      }
    }
    const uint32_t top = __reduce_max_sync(0xFFFFFFFFu, best_bits[0]);
    const bool holds = best_bits[0] == top;
    const uint32_t holders = __ballot_sync(0xFFFFFFFFu, holds);
    int winner_lane;
    if ((holders & (holders - 1u)) == 0u) {
      winner_lane = __ffs(static_cast<int>(holders)) - 1;
    } else {  // the max bits on two lanes or more (equal scores, or no candidate left: top 0)
      const uint32_t index =
          __reduce_min_sync(0xFFFFFFFFu, holds ? static_cast<uint32_t>(lane + 32 * best_j[0]) : 0xFFFFFFFFu);
      winner_lane = static_cast<int>(index % 32u);
    }
    if (lane == winner_lane) {
      out |= 1u << best_j[0];
      winners[k] = top == 0 ? -1 : lane + 32 * best_j[0];
    }
  }
  __syncwarp();
  return lane < K ? winners[lane] : -1;
}

template <int kVariant>
__global__ void topk_kernel(const float* logits, int rows, int E, int K, int iters, long long* cycles, int* ids) {
  __shared__ float score[1024], value[1024];
  const int lane = threadIdx.x;
  for (int it = 0; it < iters; ++it) {
    const float* row = logits + size_t(it % rows) * E;
    __syncwarp();
    const long long t0 = clock64();
    int id = kVariant == 0 ? select_top_k<16>(row, nullptr, E, K, false, 1, 1, score, value, lane)
                           : select_top_k_ballot<16>(row, nullptr, E, K, false, 1, 1, score, value, lane);
    const int sink = __reduce_add_sync(0xFFFFFFFFu, id);
    const long long t1 = clock64();
    if (lane == 0) cycles[it] = (t1 - t0) + (sink == 0x7FFFFFFF ? 1 : 0);
    if (lane < K) ids[size_t(it) * K + lane] = id;
  }
}

// Chains of one primitive: cycles per link.
__global__ void chain_kernel(int n, long long* out, unsigned* sink) {
  const int lane = threadIdx.x;
  unsigned v = lane * 7u + 1u;
  long long t0 = clock64();
  for (int i = 0; i < n; ++i) v = __reduce_max_sync(0xFFFFFFFFu, v) + lane;
  long long t1 = clock64();
  for (int i = 0; i < n; ++i) v = __reduce_min_sync(0xFFFFFFFFu, v) + lane;
  long long t2 = clock64();
  for (int i = 0; i < n; ++i) v = __ballot_sync(0xFFFFFFFFu, (v >> (lane & 7)) & 1u) + lane;
  long long t3 = clock64();
  for (int i = 0; i < n; ++i) v = __shfl_sync(0xFFFFFFFFu, v, (v + 1u) & 31u) + lane;
  long long t4 = clock64();
  for (int i = 0; i < n; ++i) v = max(v ^ 0x55u, v + 3u) + lane;
  long long t5 = clock64();
  if (lane == 0) out[0] = t1 - t0, out[1] = t2 - t1, out[2] = t3 - t2, out[3] = t4 - t3, out[4] = t5 - t4;
  sink[lane] = v;
}

static void cpu_top_k(const float* row, int E, int K, int* ids) {
  std::vector<uint64_t> keys(E);
  for (int e = 0; e < E; ++e) {
    float s = row[e];
    uint32_t b;
    std::memcpy(&b, &s, 4);
    if (b == 0x80000000u) b = 0;
    b = (b & 0x80000000u) ? ~b : b | 0x80000000u;
    if (s != s) b = 1;
    keys[e] = (uint64_t(b) << 32) | (0xFFFFFFFEu - uint32_t(e));
  }
  for (int k = 0; k < K; ++k) {
    int best = -1;
    for (int e = 0; e < E; ++e)
      if (keys[e] != 0 && (best < 0 || keys[e] > keys[best])) best = e;
    ids[k] = best;
    if (best >= 0) keys[best] = 0;
  }
}

template <int kVariant>
static void run_topk(const float* d_logits, const std::vector<float>& h_logits, int rows, int E, int K, const char* name) {
  const int iters = 4096;
  long long* d_cycles;
  int* d_ids;
  CHECK(cudaMalloc(&d_cycles, iters * sizeof(long long)));
  CHECK(cudaMalloc(&d_ids, size_t(iters) * K * sizeof(int)));
  topk_kernel<kVariant><<<1, 32>>>(d_logits, rows, E, K, iters, d_cycles, d_ids);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<long long> cycles(iters);
  std::vector<int> ids(size_t(iters) * K);
  CHECK(cudaMemcpy(cycles.data(), d_cycles, iters * sizeof(long long), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(ids.data(), d_ids, ids.size() * sizeof(int), cudaMemcpyDeviceToHost));
  int mismatches = 0;
  std::vector<int> ref(K);
  for (int it = 0; it < rows; ++it) {
    cpu_top_k(h_logits.data() + size_t(it) * E, E, K, ref.data());
    for (int k = 0; k < K; ++k) mismatches += ids[size_t(it) * K + k] != ref[k];
  }
  std::vector<long long> warm(cycles.begin() + rows, cycles.end());
  std::sort(warm.begin(), warm.end());
  std::printf("%-8s E=%d K=%2d: median %lld cycles, p10 %lld, p90 %lld (calls 0, 1, 2 of the launch: %lld %lld %lld); "
              "%d mismatches against the CPU order in %d rows\n",
              name, E, K, warm[warm.size() / 2], warm[warm.size() / 10], warm[warm.size() * 9 / 10], cycles[0], cycles[1],
              cycles[2], mismatches, rows);
  CHECK(cudaFree(d_cycles));
  CHECK(cudaFree(d_ids));
}

int main() {
  const int E = 512, rows = 64;
  std::vector<float> h(size_t(rows) * E);
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (float& x : h) x = normal(rng);
  // Rows 0..15 as they come; 16..31 with ties (few distinct values); 32..39 with NaNs and infinities;
  // 40..47 mostly -inf (fewer candidates than K where the rest is NaN-free -inf: still candidates).
  for (int r = 16; r < 32; ++r)
    for (int e = 0; e < E; ++e) h[size_t(r) * E + e] = float(int(h[size_t(r) * E + e] * 2.0f)) * 0.5f;
  for (int r = 32; r < 40; ++r)
    for (int e = 0; e < E; e += 37) h[size_t(r) * E + e] = (e % 3 == 0) ? NAN : (e % 3 == 1 ? INFINITY : -INFINITY);
  for (int r = 40; r < 48; ++r)
    for (int e = 0; e < E; ++e) h[size_t(r) * E + e] = e % 100 == 7 ? h[size_t(r) * E + e] : -INFINITY;
  float* d;
  CHECK(cudaMalloc(&d, h.size() * sizeof(float)));
  CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  for (int K : {0, 1, 10}) {
    for (int again = 0; again < 2; ++again) {  // the second launch finds the code fetched once already
      run_topk<0>(d, h, rows, E, K, "main");
      run_topk<1>(d, h, rows, E, K, "ballot");
    }
  }
  long long* d_out;
  unsigned* d_sink;
  CHECK(cudaMalloc(&d_out, 5 * sizeof(long long)));
  CHECK(cudaMalloc(&d_sink, 32 * sizeof(unsigned)));
  const int n = 1000;
  chain_kernel<<<1, 32>>>(n, d_out, d_sink);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  chain_kernel<<<1, 32>>>(n, d_out, d_sink);
  CHECK(cudaDeviceSynchronize());
  long long c[5];
  CHECK(cudaMemcpy(c, d_out, sizeof c, cudaMemcpyDeviceToHost));
  std::printf("cycles per link (incl. one add): redux.max %.1f, redux.min %.1f, ballot %.1f, shfl %.1f, alu pair %.1f\n",
              c[0] / double(n), c[1] / double(n), c[2] / double(n), c[3] / double(n), c[4] / double(n));
  int clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  std::printf("device clock attribute: %d MHz\n", clock_khz / 1000);
  return 0;
}
