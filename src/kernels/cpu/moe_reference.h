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
//
// Exactly what the reference computes (per token t, slot k, expert e = ids[t, k]; "fp32(v)" is one
// round-to-nearest-even of the double v; w_* are NVFP4 values WITHOUT the tensor scale, e2m1 * e4m3,
// exact in float):
//   x'     W4A16: x (BF16 values). W4A4: per 16-block, nvfp4_quantize_block(x, w13_input_scale[e]),
//          taken as e2m1 * e4m3 (unscaled) and s1 = w13_input_scale[e]; W4A16: s1 = 1.
//   g[i]   = fp32( (sum_j x'[j] * w_gate[i, j]) * (gate_scale2[e] * s1) )   sums, products in double
//   u[i]   = fp32( (sum_j x'[j] * w_up[i, j])   * (up_scale2[e] * s1) )     (all terms exact)
//   h32[i] = fp32( silu_d * double(u[i]) ),  silu_d = double(g) / (1 + exp(-double(g)))   in double
//   h'     W4A16: bf16_rne(h32) and s2 = 1. W4A4: h32 row quantized per 16-block with
//          nvfp4_quantize_block(h32, w2_input_scale[e]), unscaled e2m1 * e4m3, s2 = w2_input_scale[e]
//          (a non-finite h32 is an Error in W4A4).
//   o[c]   = fp32( (sum_i h'[i] * w_down[c, i]) * (down_scale2[e] * s2) )
//   acc    = +0.0f; for k = 0..K-1: acc = fp32(acc + fp32(weight[t, k] * o_k[c]))  (no FMA)
//   y[c]   = bf16_rne(acc)
// The scale products are formed in double. Routing steps: routing_reference.cpp's header. A GPU kernel matches this
// up to fp32 summation order (its products e2m1*e4m3 x BF16 are exact in fp32 too) and its alpha =
// fp32(input_scale * weight_scale_2), which differ from the reference by ~1e-7 relative.
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
  // Threads (0: default_num_threads(), i.e. FP4MOE_NUM_THREADS or all cores). Results are
  // bitwise identical for every thread count.
  int num_threads = 0;
  // Tolerance studies only (tests/qualify): every fp32 result the contract rounds (gate, up, GEMM2
  // output, combine sum) is multiplied by (1 + fp32_perturbation * u), u uniform in [-1, 1) drawn
  // from a hash of (perturbation_seed, token, expert, index), before its rounding; this simulates
  // a kernel with another fp32 summation order. 0 = the contract's numerics.
  double fp32_perturbation = 0.0;
  uint64_t perturbation_seed = 0;
};

// The MoE layer with routing given (ids [T, K] in [0, E), weights [T, K] finite). A token may list
// an expert twice (the slots add up in slot order). Errors (fp4moe::Error, naming the input): sizes
// that disagree with the problem, ids out of range, non-finite weights or hidden values, weights of
// another shape or with non-positive tensor / input scales, E4M3 NaN block scales in a used expert,
// token_rows entries out of range or repeated.
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
