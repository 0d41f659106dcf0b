#include "format/synthetic.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "common/error.h"
#include "common/parallel.h"
#include "common/rng.h"
#include "format/bf16.h"
#include "format/fp_codes.h"

namespace fp4moe {

namespace {

// Rows [begin, end) of a synthetic matrix; one random stream per row, so the result does not depend
// on how rows are split over threads. Returns max |value| of those rows (saves a pass over memory).
float fill_weight_rows(float* out, int64_t begin, int64_t end, int64_t cols, uint64_t seed,
                       const SyntheticWeightOptions& options) {
  // Outliers: drawing a uniform per element would double the generator cost (512-expert layers
  // generate ~6e9 values). When p <= 1/16 a block gets one outlier with probability 16p, at a
  // uniform position: the expected number of outliers per element stays exactly p.
  const double p = options.outlier_probability;
  const bool per_block_outliers = p * kNvfp4BlockSize <= 1.0;
  float amax = 0.0f;
  for (int64_t r = begin; r < end; ++r) {
    Rng rng = Rng(seed).fork(static_cast<uint64_t>(r));
    float* row = out + r * cols;
    for (int64_t b = 0; b < cols / kNvfp4BlockSize; ++b) {
      // expf: the per-block factor only needs to be log-normal-ish, and exp in double was ~10% of
      // the time of a 512-expert layer.
      const double block_scale =
          options.stddev * static_cast<double>(std::exp(static_cast<float>(options.block_log_sigma * rng.normal_fast())));
      float* block = row + b * kNvfp4BlockSize;
      for (int i = 0; i < kNvfp4BlockSize; ++i) block[i] = static_cast<float>(rng.normal_fast() * block_scale);
      if (per_block_outliers) {
        if (rng.uniform() < p * kNvfp4BlockSize) {
          float& v = block[rng.below(kNvfp4BlockSize)];
          v = static_cast<float>(static_cast<double>(v) * options.outlier_factor);
        }
      } else {
        for (int i = 0; i < kNvfp4BlockSize; ++i) {
          if (rng.uniform() < p) block[i] = static_cast<float>(static_cast<double>(block[i]) * options.outlier_factor);
        }
      }
      for (int i = 0; i < kNvfp4BlockSize; ++i) amax = std::max(amax, std::fabs(block[i]));
    }
  }
  return amax;
}

}  // namespace

std::vector<float> synthetic_weight_matrix(int64_t rows, int64_t cols, uint64_t seed,
                                           const SyntheticWeightOptions& options) {
  FP4MOE_CHECK(rows > 0 && cols > 0 && cols % kNvfp4BlockSize == 0, "synthetic_weight_matrix: bad shape [", rows,
               ", ", cols, "]");
  std::vector<float> out(static_cast<size_t>(rows * cols));
  parallel_for(rows, [&](int64_t begin, int64_t end) { fill_weight_rows(out.data(), begin, end, cols, seed, options); },
               16);
  return out;
}

MoeWeights synthetic_moe_weights(int64_t num_experts, int64_t hidden, int64_t inter, uint64_t seed,
                                 const SyntheticMoeOptions& options) {
  MoeWeights w;
  w.allocate(num_experts, hidden, inter);
  SyntheticWeightOptions w13_options = options.weights, w2_options = options.weights;
  w13_options.stddev = 1.0 / std::sqrt(static_cast<double>(hidden));
  w2_options.stddev = 1.0 / std::sqrt(static_cast<double>(inter));
  const float w13_input_scale = nvfp4_tensor_scale_for_amax(options.activation_amax);
  const float w2_input_scale = nvfp4_tensor_scale_for_amax(options.intermediate_amax);
  const int64_t H = hidden, I = inter, proj = I * H;  // elements per projection (gate, up and down alike)
  auto packed_span = [](std::vector<uint8_t>& v, int64_t index, int64_t elements) {
    return std::span<uint8_t>(v.data() + index * elements / 2, static_cast<size_t>(elements / 2));
  };
  auto scale_span = [](std::vector<uint8_t>& v, int64_t index, int64_t elements) {
    return std::span<uint8_t>(v.data() + index * elements / kNvfp4BlockSize, static_cast<size_t>(elements / kNvfp4BlockSize));
  };
  // Experts are independent: generate them in parallel, each single-threaded inside, quantizing
  // straight into w (w13 = [gate; up] per expert) with float buffers reused across the chunk.
  parallel_for(num_experts, [&](int64_t e_begin, int64_t e_end) {
    std::vector<float> gate(static_cast<size_t>(proj)), up(static_cast<size_t>(proj)), down(static_cast<size_t>(proj));
    for (int64_t e = e_begin; e < e_end; ++e) {
      const uint64_t base = seed * 0x100000001B3ull + static_cast<uint64_t>(e) * 8;
      const float gate_amax = fill_weight_rows(gate.data(), 0, I, H, base + 1, w13_options);
      float up_amax = fill_weight_rows(up.data(), 0, I, H, base + 2, w13_options);
      const float down_amax = fill_weight_rows(down.data(), 0, H, I, base + 3, w2_options);
      float gate_scale, up_scale;
      if (options.distinct_gate_up_scales) {
        // Make the two tensor scales differ clearly, so a kernel that uses the gate's scale for up
        // (or swaps gate and up) fails its tests.
        for (float& v : up) v *= 1.75f;
        up_amax *= 1.75f;  // fp32 rounding is monotone: still the max of the scaled values
        gate_scale = nvfp4_tensor_scale_for_amax(gate_amax);
        up_scale = nvfp4_tensor_scale_for_amax(up_amax);
      } else {
        // One weight_scale_2 for both, from the larger amax (as ModelOpt's export syncs them).
        gate_scale = up_scale =
            nvfp4_tensor_scale_for_amax(std::max(gate_amax, up_amax));
      }
      const float down_scale = nvfp4_tensor_scale_for_amax(down_amax);
      quantize_nvfp4_into(gate, I, H, gate_scale, packed_span(w.w13_packed, 2 * e, proj),
                          scale_span(w.w13_scales, 2 * e, proj));
      quantize_nvfp4_into(up, I, H, up_scale, packed_span(w.w13_packed, 2 * e + 1, proj),
                          scale_span(w.w13_scales, 2 * e + 1, proj));
      quantize_nvfp4_into(down, H, I, down_scale, packed_span(w.w2_packed, e, proj), scale_span(w.w2_scales, e, proj));
      w.gate_scale2[e] = gate_scale;
      w.up_scale2[e] = up_scale;
      w.down_scale2[e] = down_scale;
      w.w13_input_scale[e] = w13_input_scale;
      w.w2_input_scale[e] = w2_input_scale;
    }
  });
  return w;
}

std::vector<float> synthetic_activations(int64_t rows, int64_t cols, uint64_t seed, double scale) {
  FP4MOE_CHECK(rows >= 0 && cols >= 0, "synthetic_activations: negative shape [", rows, ", ", cols, "]");
  std::vector<float> out(static_cast<size_t>(rows * cols));
  Rng rng(seed);
  for (float& v : out) v = round_to_bf16(static_cast<float>(rng.normal() * scale));
  return out;
}

}  // namespace fp4moe
