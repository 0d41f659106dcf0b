// r44 probe (fused-decode.md road item 12's first open question): do the SM80+ tensor cores take the
// fused decode's raw decoded weights exactly? decode_word (nvfp4_decode_layout.h) yields e2m1 * 2^-126 as
// bf16, so FP4 code 1 (0.5) is the bf16 subnormal 2^-127 and every other code sits at the bottom of the
// normal range. Post-mma block scales (item 12) would feed those values to the mma unscaled, with the
// activations multiplied by 2^p per token so that the fp32 sums stay normal.
// Test: one warp per trial runs a chunk's 8 chained m16n8k16 bf16 mma (K = 128, fp32 accumulate from 0)
// twice: A = e2m1 (normal, the reference) with activations x, and A = e2m1 * 2^-126 (subnormal path) with
// x * 2^p. If the tensor cores read the subnormal inputs exactly and flush nothing, the second result
// times 2^(126 - p) equals the first bit for bit (every scale is a power of two). Reported per p: the
// elements that differ, those flushed to zero, the largest relative difference. Also single products.
// Ran in r44 on an H100 (docs/perf/2026-12-07-h100-r44-mma-bf16-subnormal-probe.txt): equal bits for every p,
// and every single product exact, fp32 subnormal results (2^-147) included: nothing flushed.
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a X.cu
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

constexpr int kM = 16, kN = 8, kK = 128, kSteps = kK / 16;

// a: [trial][16][128] row-major bf16 bits; b: [trial][8][128] (n-major: column n of B is row n here);
// d: [trial][16][8] fp32.
__global__ void chunk_mma(const uint16_t* a, const uint16_t* b, float* d, int trials) {
  const int trial = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (trial >= trials) return;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint16_t* at = a + size_t(trial) * kM * kK;
  const uint16_t* bt = b + size_t(trial) * kN * kK;
  auto pair = [](const uint16_t* p) { return uint32_t(p[0]) | (uint32_t(p[1]) << 16); };
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int s = 0; s < kSteps; ++s) {
    const int k0 = 16 * s;
    const uint32_t a0 = pair(at + g * kK + k0 + 2 * t), a1 = pair(at + (g + 8) * kK + k0 + 2 * t);
    const uint32_t a2 = pair(at + g * kK + k0 + 2 * t + 8), a3 = pair(at + (g + 8) * kK + k0 + 2 * t + 8);
    const uint32_t b0 = pair(bt + g * kK + k0 + 2 * t), b1 = pair(bt + g * kK + k0 + 2 * t + 8);
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  float* dt = d + size_t(trial) * kM * kN;
  dt[g * kN + 2 * t] = acc[0], dt[g * kN + 2 * t + 1] = acc[1];
  dt[(g + 8) * kN + 2 * t] = acc[2], dt[(g + 8) * kN + 2 * t + 1] = acc[3];
}

// The value of FP4 (e2m1) code `code`: sign bit 3, magnitude by the low 3 bits.
float e2m1_value(uint32_t code) {
  static const float kMagnitudes[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  return kMagnitudes[code & 7u] * ((code & 8u) ? -1.f : 1.f);
}
// FP4 code -> bf16 bits of e2m1 (normal) or e2m1 * 2^-126 (the decode's pattern: magnitude bits at 6..8).
uint16_t e2m1_bf16(uint32_t code) {
  const float v = e2m1_value(code);
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return uint16_t(bits >> 16);  // exact: e2m1 needs 1 mantissa bit
}
uint16_t decoded_bf16(uint32_t code) { return uint16_t(((code & 7u) << 6) | ((code & 8u) << 12)); }
// bf16 bits of x * 2^p (x a normal bf16, result normal): the exponent field plus p.
uint16_t times_pow2(uint16_t x, int p) {
  if ((x & 0x7FFFu) == 0) return x;
  const int e = int((x >> 7) & 0xFFu) + p;
  if (e <= 0 || e >= 255) { std::fprintf(stderr, "prescale out of range\n"); std::exit(1); }
  return uint16_t((x & 0x807Fu) | (uint32_t(e) << 7));
}

std::vector<float> run(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int trials) {
  uint16_t *da, *db;
  float* dd;
  CHECK(cudaMalloc(&da, a.size() * 2));
  CHECK(cudaMalloc(&db, b.size() * 2));
  CHECK(cudaMalloc(&dd, size_t(trials) * kM * kN * 4));
  CHECK(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dd, 0xFF, size_t(trials) * kM * kN * 4));  // NaN: an unwritten element shows
  chunk_mma<<<(trials + 7) / 8, 256>>>(da, db, dd, trials);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<float> d(size_t(trials) * kM * kN);
  CHECK(cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dd));
  return d;
}

int main() {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  const int trials = 4096;
  std::mt19937 rng(20261207);
  std::vector<uint32_t> codes(size_t(trials) * kM * kK);
  for (auto& c : codes) c = rng() & 15u;
  // Activations: random sign, exponent in [-8, 8], 7 random mantissa bits (typical hidden states).
  std::vector<uint16_t> x(size_t(trials) * kN * kK);
  for (auto& v : x) v = uint16_t(((rng() & 1u) << 15) | (uint32_t(127 + int(rng() % 17) - 8) << 7) | (rng() & 0x7Fu));
  std::vector<uint16_t> a_normal(codes.size()), a_decoded(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) a_normal[i] = e2m1_bf16(codes[i]), a_decoded[i] = decoded_bf16(codes[i]);
  const std::vector<float> reference = run(a_normal, x, trials);
  size_t nan_ref = 0;
  for (float v : reference) nan_ref += std::isnan(v);
  std::printf("reference (A = e2m1, x): %zu elements, %zu NaN\n", reference.size(), nan_ref);
  std::printf("%6s %12s %12s %14s  (subnormal path times 2^(126-p) against the reference)\n", "p", "differ",
              "flushed", "max_rel_diff");
  for (int p : {0, 16, 32, 64, 96, 110}) {
    std::vector<uint16_t> xp(x.size());
    for (size_t i = 0; i < x.size(); ++i) xp[i] = times_pow2(x[i], p);
    const std::vector<float> d = run(a_decoded, xp, trials);
    size_t differ = 0, flushed = 0;
    double max_rel = 0.0;
    for (size_t i = 0; i < d.size(); ++i) {
      const float scaled = std::ldexp(d[i], 126 - p);
      uint32_t u, r;
      std::memcpy(&u, &scaled, 4);
      std::memcpy(&r, &reference[i], 4);
      if (u != r) {
        ++differ;
        if (d[i] == 0.f && reference[i] != 0.f) ++flushed;
        const double rel = std::fabs(double(scaled) - reference[i]) / std::fmax(std::fabs(double(reference[i])), 1e-30);
        if (rel > max_rel) max_rel = rel;
      }
    }
    std::printf("%6d %12zu %12zu %14.3e\n", p, differ, flushed, max_rel);
  }
  // Single products: A has one nonzero element (row 0, k 0) = code c decoded; x[0][0] = 2^q; expected
  // D[0][0] = e2m1(c) * 2^(q - 126) exactly.
  std::printf("single products (code, q): got / expected\n");
  for (uint32_t c : {1u, 2u, 3u, 7u, 9u}) {
    for (int q : {-20, 0, 1, 10}) {
      std::vector<uint16_t> a1(size_t(kM) * kK, 0), b1(size_t(kN) * kK, 0);
      a1[0] = decoded_bf16(c);
      b1[0] = uint16_t(uint32_t(127 + q) << 7);
      const std::vector<float> d = run(a1, b1, 1);
      const double expected = double(e2m1_value(c)) * std::ldexp(1.0, q - 126);
      std::printf("  code %2u q %4d: %.9e / %.9e %s\n", c, q, d[0], expected,
                  double(d[0]) == expected ? "exact" : "DIFFERENT");
    }
  }
  return 0;
}
