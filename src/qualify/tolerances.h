// Error budgets per (op, activation mode): what every GPU test and the qualifier judge a kernel's
// output by, against the CPU reference on the same quantized weights and inputs (compare.h). All
// budgets live in this file, each with the reason for its size (architecture.md, "Qualification").
//
// How they were derived (tests/qualify/test_tolerances.cpp, DISABLED_MeasureBudgetDistribution):
// the reference itself, with every fp32 result it rounds (gate, up, GEMM2 output, combine sum)
// multiplied by (1 + level * u), u uniform in [-1, 1), simulates a correct kernel with another fp32
// summation order. Shape: H=4096, I=1024, K=10 (Qwen3.5-397B per expert), 32 synthetic experts,
// 64 tokens, softmax_topk_renorm routing, 8 perturbation seeds. Measured (max over seeds):
//
//   level  | W4A16 normalized  max-row   | W4A4 normalized  max-row
//   1e-7   | 1.7e-4            1.0e-3    | 5.2e-5           2.5e-4
//   1e-6   | 3.1e-4            1.1e-3    | 1.2e-3           9.9e-3
//   1e-5   | 7.3e-4            1.4e-3    | 2.1e-3           9.9e-3
//   faults | gate/up swapped: 0.95 (W4A16), 0.93 (W4A4); gate's weight_scale_2 used for up (1.75x
//          apart in the synthetic weights): 0.43 (W4A16), 0.40 (W4A4); max-row 0.55-1.07.
//
// A real fp32 GEMM over K=4096 differs from the exact sum by about sqrt(K) * 2^-24 ~ 4e-6 relative
// for a sequential sum and less for the blocked sums tensor cores do, so 1e-6..1e-5 is the level
// that matters; the budgets sit 4-7x above the 1e-5 maxima and 20x or more below the faults.
#pragma once
#include <string>

#include "common/error.h"
#include "kernels/moe_problem.h"
#include "qualify/compare.h"

namespace fp4moe {

enum class CheckedOp {
  kMoe,         // the whole MoE layer (moe_reference / moe_reference_routed), BF16 output
  kLinearF32,   // dense NVFP4 linear (linear_nvfp4_reference), fp32 output
  kLinearBf16,  // the same linear written as BF16 (compared with the fp32 reference)
};

struct ErrorBudget {
  double normalized_error = 0.0;      // max ||out - ref||_2 / ||ref||_2 over everything compared
  double row_normalized_error = 0.0;  // max of the same ratio over single rows (tokens)
};

inline ErrorBudget error_budget(CheckedOp op, ActivationMode mode) {
  const bool w4a4 = mode == ActivationMode::kW4A4;
  FP4MOE_CHECK(w4a4 || mode == ActivationMode::kW4A16, "error_budget: unknown activation mode ",
               static_cast<int>(mode));
  switch (op) {
    case CheckedOp::kMoe:
      // W4A16: the output is BF16 (2^-9 relative rounding) and so is the intermediate h; a kernel
      // with another fp32 order flips single BF16 ulps of h (each moves all H outputs by ~1e-4
      // relative) and of the output. Measured 7.3e-4 / 1.4e-3 (row) at 1e-5 -> 3e-3 / 1e-2.
      // W4A4: additionally h is quantized to FP4: a value near a rounding boundary (or a block amax
      // near an E4M3 boundary) flips a whole FP4 step (up to 1/3 of the value, or 1/8 of 16 values
      // for a block scale). Rare, but one flip moves its token's row by up to ~1e-2: measured
      // 2.1e-3 / 9.9e-3 (row) at 1e-5 -> 1e-2 / 5e-2. The activation quantization of x is the
      // same ModelOpt formula in reference and kernels (format/nvfp4.h); a kernel that computes
      // it differently (reciprocal instead of division) flips codes at exact ties and may need
      // the row margin.
      return w4a4 ? ErrorBudget{1e-2, 5e-2} : ErrorBudget{3e-3, 1e-2};
    case CheckedOp::kLinearF32:
      // Only fp32 summation order differs (activation quantization for W4A4 is exact and equal
      // on both sides; no intermediate rounding): ~4e-6 relative per output for K=4096 at worst;
      // a uniform 1e-5 perturbation measures 5.8e-6 normalized, 6.1e-6 max-row -> 1e-4 / 3e-4.
      return ErrorBudget{1e-4, 3e-4};
    case CheckedOp::kLinearBf16:
      // The fp32 result rounded to BF16: the RMS relative rounding error lies between
      // 2^-8/sqrt(12) = 1.1e-3 and 2^-7/sqrt(12) = 2.3e-3 depending on where values sit in their
      // binade (measured 1.65e-3 normalized, 1.74e-3 max-row over 1024 columns, T=16, K=4096,
      // W4A16 and W4A4) -> 4e-3 / 8e-3: above the theoretical worst case 2.3e-3.
      return ErrorBudget{4e-3, 8e-3};
  }
  fail("error_budget: unknown op ", static_cast<int>(op));
}

// Above this normalized error an output is not imprecise but wrong (gate/up order, a tensor scale,
// routing, layout): the faults above measure 0.40-0.95. The verdict calls it garbage.
inline constexpr double kGarbageNormalizedError = 0.1;

struct BudgetVerdict {
  bool pass = false;
  std::string reason;  // empty when pass
};

// Pass iff every compared element was written and finite and both normalized errors are within
// the budget; otherwise the first failing check, in that order.
inline BudgetVerdict judge(const CompareResult& r, const ErrorBudget& budget) {
  if (r.reference_nonfinite) {
    return {false, detail::concat("the reference has ", r.reference_nonfinite, " non-finite values (bad probe input)")};
  }
  if (r.unwritten) return {false, detail::concat(r.unwritten, " of ", r.elements, " output elements were never written")};
  if (r.nan_or_inf) return {false, detail::concat(r.nan_or_inf, " of ", r.elements, " output elements are NaN or Inf")};
  if (r.normalized_error > budget.normalized_error) {
    const char* kind = r.normalized_error >= kGarbageNormalizedError ? "garbage: " : "drift: ";
    return {false, detail::concat(kind, "normalized error ", r.normalized_error, " exceeds the budget ",
                                  budget.normalized_error)};
  }
  if (r.max_row_normalized_error > budget.row_normalized_error) {
    const char* kind = r.max_row_normalized_error >= kGarbageNormalizedError ? "garbage: " : "drift: ";
    return {false, detail::concat(kind, "row ", r.worst_row, " has normalized error ", r.max_row_normalized_error,
                                  ", over the per-row budget ", budget.row_normalized_error)};
  }
  return {true, {}};
}

}  // namespace fp4moe
