#include "format/synthetic.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/parallel.h"
#include "common/rng.h"
#include "format/bf16.h"
#include "format/fp_codes.h"

namespace fp4moe {

namespace {

// Rows [begin, end) of a synthetic matrix; one random stream per row, so the result does not depend
// on how rows are split over threads.
void fill_weight_rows(float* out, int64_t begin, int64_t end, int64_t cols, uint64_t seed,
                      const SyntheticWeightOptions& options) {
  for (int64_t r = begin; r < end; ++r) {
    Rng rng = Rng(seed).fork(static_cast<uint64_t>(r));
    for (int64_t b = 0; b < cols / kNvfp4BlockSize; ++b) {
      const double block_factor = std::exp(options.block_log_sigma * rng.normal_fast());
      for (int i = 0; i < kNvfp4BlockSize; ++i) {
        double v = rng.normal_fast() * options.stddev * block_factor;
        if (rng.uniform() < options.outlier_probability) v *= options.outlier_factor;
        out[r * cols + b * kNvfp4BlockSize + i] = static_cast<float>(v);
      }
    }
  }
}

std::vector<float> weight_matrix(int64_t rows, int64_t cols, uint64_t seed, const SyntheticWeightOptions& options,
                                 bool threaded) {
  FP4MOE_CHECK(rows > 0 && cols > 0 && cols % kNvfp4BlockSize == 0, "synthetic_weight_matrix: bad shape [", rows,
               ", ", cols, "]");
  std::vector<float> out(static_cast<size_t>(rows * cols));
  auto fill = [&](int64_t begin, int64_t end) { fill_weight_rows(out.data(), begin, end, cols, seed, options); };
  if (threaded) parallel_for(rows, fill, 16);
  else fill(0, rows);
  return out;
}

}  // namespace

std::vector<float> synthetic_weight_matrix(int64_t rows, int64_t cols, uint64_t seed,
                                           const SyntheticWeightOptions& options) {
  return weight_matrix(rows, cols, seed, options, /*threaded=*/true);
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
  // Experts are independent: generate them in parallel, each single-threaded inside.
  parallel_for(num_experts, [&](int64_t e_begin, int64_t e_end) {
  for (int64_t e = e_begin; e < e_end; ++e) {
    const uint64_t base = seed * 0x100000001B3ull + static_cast<uint64_t>(e) * 8;
    std::vector<float> gate = weight_matrix(inter, hidden, base + 1, w13_options, false);
    std::vector<float> up = weight_matrix(inter, hidden, base + 2, w13_options, false);
    std::vector<float> down = weight_matrix(hidden, inter, base + 3, w2_options, false);
    if (options.distinct_gate_up_scales) {
      // Make the two tensor scales differ clearly, so a kernel that uses the gate's scale for up
      // (or swaps gate and up) fails its tests.
      for (float& v : up) v *= 1.75f;
      w.set_gate(e, quantize_nvfp4(gate, inter, hidden));
      w.set_up(e, quantize_nvfp4(up, inter, hidden));
    } else {
      float amax = 0.0f;
      for (float v : gate) amax = std::max(amax, std::fabs(v));
      for (float v : up) amax = std::max(amax, std::fabs(v));
      const float shared = nvfp4_tensor_scale_for_amax(amax);
      w.set_gate(e, quantize_nvfp4(gate, inter, hidden, shared));
      w.set_up(e, quantize_nvfp4(up, inter, hidden, shared));
    }
    w.set_down(e, quantize_nvfp4(down, hidden, inter));
    w.w13_input_scale[e] = w13_input_scale;
    w.w2_input_scale[e] = w2_input_scale;
  }
  });
  return w;
}

std::vector<float> synthetic_activations(int64_t rows, int64_t cols, uint64_t seed, double scale) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  Rng rng(seed);
  for (float& v : out) v = round_to_bf16(static_cast<float>(rng.normal() * scale));
  return out;
}

}  // namespace fp4moe
