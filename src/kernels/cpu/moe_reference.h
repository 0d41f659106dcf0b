// CPU references (the oracle for every GPU test and for qualification): routing, NVFP4 expert MLP
// with SwiGLU, the whole MoE layer, and a dense NVFP4 linear. fp64 accumulation over exactly
// dequantized weights; multithreaded (common/parallel.h) with results independent of the thread count.
//
// Numerics contract (architecture.md), mirrored here so that a correct kernel differs only by fp32
// summation order and an occasional one-ulp BF16 flip:
//   routing    selection on pre-activation scores (ties -> lower expert index), weights in fp32;
//   GEMM1      gate = gate_scale2 * sum(x * w_gate), up = up_scale2 * sum(x * w_up), each rounded to fp32;
//              W4A4: x first quantized to NVFP4 with w13_input_scale[e] (format/nvfp4.h) and dequantized;
//   SwiGLU     h = silu(gate) * up in fp32, then rounded to BF16 (W4A16) or quantized to NVFP4 with
//              w2_input_scale[e] (W4A4): the one defined intermediate rounding point;
//   GEMM2      o = down_scale2 * sum(h * w_down), rounded to fp32;
//   combine    y = sum over slots k = 0..K-1 of weight_k * o_k in fp32, in slot order; rounded to BF16.
// Hidden states and outputs are passed as floats holding BF16 values.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "format/moe_weights.h"
#include "format/nvfp4.h"
#include "kernels/moe_problem.h"

namespace fp4moe {

// Routing for `tokens` rows of logits [tokens, E]. Writes topk_ids / topk_weights [tokens, K], slots
// in descending selection score (ties: lower expert index first). correction_bias [E] is used by
// kSigmoidGroupedTopk only (may be null: zeros).
void route_reference(const RoutingConfig& config, std::span<const float> logits, int64_t tokens,
                     const float* correction_bias, std::span<int32_t> topk_ids, std::span<float> topk_weights);

struct MoeReferenceOptions {
  // Evaluate only these token rows (others in `out` are left untouched); empty = all tokens.
  // MoE is per-token independent, so large-T GPU checks compare a sample of rows.
  std::vector<int64_t> token_rows;
};

// The MoE layer with routing given (ids [T, K] in [0, E), weights [T, K]).
void moe_reference_routed(const MoeProblem& problem, const MoeWeights& weights, std::span<const float> hidden,
                          int64_t tokens, std::span<const int32_t> topk_ids, std::span<const float> topk_weights,
                          std::span<float> out, const MoeReferenceOptions& options = {});

// The whole MoE layer: route_reference, then moe_reference_routed.
void moe_reference(const MoeProblem& problem, const MoeWeights& weights, std::span<const float> hidden,
                   std::span<const float> router_logits, const float* correction_bias, int64_t tokens,
                   std::span<float> out, const MoeReferenceOptions& options = {});

// Dense NVFP4 linear y[T, N] = x[T, K] * W^T with W [N, K]; fp64 accumulation, result in fp32 (not
// rounded to BF16). W4A4: x quantized with input_scale first.
void linear_nvfp4_reference(const Nvfp4View& w, std::span<const float> x, int64_t tokens, ActivationMode mode,
                            float input_scale, std::span<float> out);

// Activation quantization used by W4A4 everywhere (CPU reference and CUDA emulation): the ModelOpt
// formula of format/nvfp4.h with the static input scale, applied per row of 16-value blocks.
// Returns the dequantized values (what the tensor cores would multiply).
void quantize_dequantize_activations(std::span<const float> x, int64_t rows, int64_t cols, float input_scale,
                                     std::span<float> out);

}  // namespace fp4moe
