// Synthetic data for tests, qualification, benchmarks and `fp4moe synth`: deterministic from a
// seed (common/rng.h), never all-zero, with block magnitudes that vary the way trained weights do
// (a log-normal factor per 16-value block, rare outliers), so E4M3 block scales span a realistic
// range instead of sitting at one value.
#pragma once
#include <cstdint>
#include <vector>

#include "format/moe_weights.h"
#include "format/nvfp4.h"

namespace fp4moe {

struct SyntheticWeightOptions {
  double stddev = 0.02;             // base element standard deviation
  double block_log_sigma = 0.6;     // sigma of the per-block log-normal magnitude factor
  double outlier_probability = 1e-4;  // expected fraction of elements multiplied by outlier_factor
                                      // (up to 1/16: at most one per block, drawn once per block)
  double outlier_factor = 8.0;
};

// Random row-major float matrix [rows, cols] (cols % 16 == 0).
std::vector<float> synthetic_weight_matrix(int64_t rows, int64_t cols, uint64_t seed,
                                           const SyntheticWeightOptions& options = {});

struct SyntheticMoeOptions {
  SyntheticWeightOptions weights;
  bool distinct_gate_up_scales = true;  // false: gate and up share weight_scale_2 (as ModelOpt exports)
  float activation_amax = 8.0f;         // calibrated amax behind w13_input_scale
  float intermediate_amax = 8.0f;       // calibrated amax behind w2_input_scale
};

// Routed experts with weight stddev ~ 1/sqrt(fan_in) so activations stay O(1) through the MLP.
MoeWeights synthetic_moe_weights(int64_t num_experts, int64_t hidden, int64_t inter, uint64_t seed,
                                 const SyntheticMoeOptions& options = {});

// Random activations [rows, cols] ~ N(0, scale^2), rounded to BF16 values (stored as float).
std::vector<float> synthetic_activations(int64_t rows, int64_t cols, uint64_t seed, double scale = 1.0);

}  // namespace fp4moe
