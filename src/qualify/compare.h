// Comparison of a kernel's output with the CPU reference: the metrics every GPU test and the
// qualifier judge by (budgets in qualify/tolerances.h).
//
// Outputs are compared as the GPU writes them (BF16 bit patterns, or fp32 for fp32 outputs) against
// the reference's floats. Output buffers are poisoned before a run with a NaN payload that a
// kernel never produces (kBf16Poison), so "never written" is told apart from "wrote NaN".
// Metrics: counts of unwritten / NaN-or-Inf elements, max |out - ref|, and the normalized error
// ||out - ref||_2 / ||ref||_2 over the finite, written elements (the budgeted quantity: it is
// insensitive to a few BF16 ulp flips and large for any systematic fault).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fp4moe {

// BF16 poison: a negative quiet NaN with payload 0x41. CUDA and the references only produce the
// canonical NaN 0x7FC0/0xFFC0 (or propagate input payloads; inputs are never poisoned), so an
// element still holding 0xFFC1 was not written.
inline constexpr uint16_t kBf16Poison = 0xFFC1;
// fp32 poison: the BF16 poison repeated (a negative quiet NaN with a payload).
inline constexpr uint32_t kF32Poison = 0xFFC1FFC1u;

struct CompareResult {
  int64_t elements = 0;           // compared elements (rows compared x cols)
  int64_t nan_or_inf = 0;         // output NaN or Inf, not counting the poison pattern
  int64_t unwritten = 0;          // output still equal to the poison bit pattern
  int64_t reference_nonfinite = 0;  // reference NaN/Inf (a broken test input; never expected)
  int64_t first_bad = -1;         // flat index of the first unwritten / non-finite element, or -1
  double max_abs_error = 0.0;     // over finite, written elements
  int64_t max_abs_index = -1;     // flat index of max_abs_error
  double max_abs_reference = 0.0;  // max |ref|, for scale
  double error_norm = 0.0;        // ||out - ref||_2 over finite, written elements
  double reference_norm = 0.0;    // ||ref||_2 over the same elements
  double normalized_error = 0.0;  // error_norm / reference_norm (error_norm when reference_norm == 0)
  // The same ratio per row (token), maximum over the compared rows: catches a fault confined to a
  // few tokens, which the whole-tensor ratio dilutes (one garbage row in 4096 is only ~0.016).
  double max_row_normalized_error = 0.0;
  int64_t worst_row = -1;

  // Every element written and finite.
  bool clean() const { return nan_or_inf == 0 && unwritten == 0 && reference_nonfinite == 0; }
  // "elements=65536 unwritten=0 nan_or_inf=0 normalized_error=1.2e-05 max_abs_error=0.0039 at [3, 17] ..."
  std::string describe(int64_t cols = 0) const;
};

// Compares out (BF16 bits) with ref, both [rows, cols] row-major. row_subset: compare only these
// rows (empty: all). Throws Error on size mismatches or rows out of range.
CompareResult compare_bf16(std::span<const uint16_t> out, std::span<const float> ref, int64_t rows, int64_t cols,
                           uint16_t poison = kBf16Poison, std::span<const int64_t> row_subset = {});

// The same for fp32 outputs (e.g. a dense linear's fp32 result); poison is a float bit pattern.
CompareResult compare_f32(std::span<const float> out, std::span<const float> ref, int64_t rows, int64_t cols,
                          uint32_t poison = kF32Poison, std::span<const int64_t> row_subset = {});

// Rows to compare for a large output: all of [0, rows) when rows <= max_rows (>= 2), else row 0,
// row rows-1 and max_rows-2 distinct others drawn from a seeded generator; ascending. Feeds
// MoeReferenceOptions::token_rows and the row_subset of compare_bf16.
std::vector<int64_t> sample_rows(int64_t rows, int64_t max_rows, uint64_t seed);

// Reference floats as BF16 bits (round to nearest even), e.g. to feed compare_bf16 with a CPU result.
void floats_to_bf16_bits(std::span<const float> in, std::span<uint16_t> out);

}  // namespace fp4moe
