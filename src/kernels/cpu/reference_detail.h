// Internal helpers of the CPU references (not a public API): exact NVFP4 row decoding, the fp64
// dot product, unscaled NVFP4 activation quantization, and cost-balanced parallel work splitting.
//
// Exactness: an NVFP4 value without its tensor scale, e2m1 * e4m3, has at most 6 significant bits
// and lies in [2^-10, 2688], so it is exact in float and double. Products with BF16 activations
// (8 bits) or with other unscaled NVFP4 values (6 bits) are exact in double, so every dot product
// below is a sum of exact terms in double; fp64 summation order only affects the last double bits.
// The tensor scales are applied to the double sum afterwards, in double.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "format/nvfp4.h"
#include "kernels/moe_problem.h"

namespace fp4moe::detail {

// Decodes row r of m without the tensor scale (e2m1 * e4m3 block scale) into out[0, m.cols).
// Returns false when a block scale of the row is an E4M3 NaN code (out is then incomplete).
bool decode_row_unscaled(const Nvfp4View& m, int64_t r, double* out);

// sum_j a[j] * b[j] in double, in a fixed order (8 interleaved partial sums, combined pairwise),
// so that the compiler can vectorize it without reassociation. n % 8 == 0.
double dot_f64(const double* a, const double* b, int64_t n);

// Quantizes one row x[0, n) (n % 16 == 0, finite values) to NVFP4 with the tensor scale
// input_scale (ModelOpt formula, format/nvfp4.h) and writes the values WITHOUT the tensor scale,
// e2m1 * e4m3, to out as doubles (exact). Multiply by input_scale to get the dequantized value.
void quantize_row_unscaled(const float* x, int64_t n, float input_scale, double* out);

// Runs fn(item) for every item in [0, costs.size()) on `threads` threads; items are split into
// contiguous ranges of about equal total cost. Which thread runs an item never changes what the
// item computes, so results do not depend on the thread count.
void parallel_items(const std::vector<double>& costs, int threads, const std::function<void(int64_t item)>& fn);

// route_reference restricted to the token rows listed in `rows` (all tokens when empty); other
// rows of topk_ids / topk_weights are left untouched. Errors name the original token index.
void route_rows(const RoutingConfig& config, std::span<const float> logits, int64_t tokens,
                const float* correction_bias, std::span<const int64_t> rows, std::span<int32_t> topk_ids,
                std::span<float> topk_weights);

}  // namespace fp4moe::detail
