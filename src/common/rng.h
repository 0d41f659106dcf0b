// Rng: a small deterministic generator (splitmix64 seeding + xoshiro256**). std:: distributions
// differ between standard libraries, so fp4moe draws its own floats: the same seed gives the same
// numbers on every platform, which synthetic checkpoints and tests rely on.
#pragma once
#include <cmath>
#include <cstdint>

namespace fp4moe {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& word : state_) word = splitmix64(seed);
  }
  // Derive an independent stream, e.g. one per tensor: Rng(seed).fork(tensor_index).
  Rng fork(uint64_t stream) const { return Rng(state_[0] ^ splitmix_mix(stream + 0x9E3779B97F4A7C15ull)); }

  uint64_t next_u64() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next_u64() % n; }
  // Approximately standard normal, cheap: the sum of four 16-bit uniforms (Irwin-Hall), scaled to
  // variance 1; tails end at +-3.46. For bulk synthetic weights, where Box-Muller is too slow.
  double normal_fast() {
    const uint64_t u = next_u64();
    const double sum = static_cast<double>((u & 0xFFFF) + ((u >> 16) & 0xFFFF) + ((u >> 32) & 0xFFFF) + (u >> 48));
    return (sum * (1.0 / 65536.0) - 2.0) * 1.7320508075688772;
  }
  // Standard normal (Box-Muller; one value per call, deterministic).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  static uint64_t splitmix64(uint64_t& x) { return splitmix_mix(x += 0x9E3779B97F4A7C15ull); }
  uint64_t state_[4];
};

}  // namespace fp4moe
