// Output-vs-reference metrics (compare.h). Norms accumulate in double in index order, so the
// metrics are deterministic.
#include "qualify/compare.h"

#include <bit>
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "common/error.h"
#include "common/rng.h"
#include "format/bf16.h"

namespace fp4moe {

namespace {

// is_poison(i) and value(i) read element i of the output; both templates share the loop.
template <typename IsPoison, typename Value>
CompareResult compare_impl(IsPoison is_poison, Value value, size_t out_size, std::span<const float> ref,
                           int64_t rows, int64_t cols, std::span<const int64_t> row_subset, const char* what) {
  FP4MOE_CHECK(rows >= 0 && cols >= 0, what, ": negative shape [", rows, ", ", cols, "]");
  FP4MOE_CHECK(static_cast<int64_t>(out_size) == rows * cols, what, ": output has ", out_size,
               " elements, expected [", rows, ", ", cols, "] = ", rows * cols);
  FP4MOE_CHECK(static_cast<int64_t>(ref.size()) == rows * cols, what, ": reference has ", ref.size(),
               " elements, expected ", rows * cols);
  CompareResult r;
  double err2 = 0.0, ref2 = 0.0;
  const int64_t n_rows = row_subset.empty() ? rows : static_cast<int64_t>(row_subset.size());
  for (int64_t ri = 0; ri < n_rows; ++ri) {
    const int64_t row = row_subset.empty() ? ri : row_subset[ri];
    FP4MOE_CHECK(row >= 0 && row < rows, what, ": row_subset entry ", row, " is outside [0, ", rows, ")");
    double row_err2 = 0.0, row_ref2 = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = row * cols + c;
      ++r.elements;
      const double want = ref[i];
      bool bad = false;
      if (!std::isfinite(want)) {
        ++r.reference_nonfinite;
        bad = true;
      } else if (is_poison(i)) {
        ++r.unwritten;
        bad = true;
      } else if (!std::isfinite(value(i))) {
        ++r.nan_or_inf;
        bad = true;
      }
      if (bad) {
        if (r.first_bad < 0) r.first_bad = i;
        continue;
      }
      const double diff = std::fabs(static_cast<double>(value(i)) - want);
      if (diff > r.max_abs_error || r.max_abs_index < 0) {
        r.max_abs_error = diff;
        r.max_abs_index = i;
      }
      r.max_abs_reference = std::max(r.max_abs_reference, std::fabs(want));
      row_err2 += diff * diff;
      row_ref2 += want * want;
    }
    err2 += row_err2;
    ref2 += row_ref2;
    const double row_error = row_ref2 > 0.0 ? std::sqrt(row_err2 / row_ref2) : std::sqrt(row_err2);
    if (row_error > r.max_row_normalized_error || r.worst_row < 0) {
      r.max_row_normalized_error = row_error;
      r.worst_row = row;
    }
  }
  r.error_norm = std::sqrt(err2);
  r.reference_norm = std::sqrt(ref2);
  r.normalized_error = r.reference_norm > 0.0 ? r.error_norm / r.reference_norm : r.error_norm;
  return r;
}

std::string position(int64_t index, int64_t cols) {
  if (cols <= 0) return detail::concat("[", index, "]");
  return detail::concat("[", index / cols, ", ", index % cols, "]");
}

}  // namespace

std::string CompareResult::describe(int64_t cols) const {
  std::ostringstream s;
  s << std::setprecision(3) << "elements=" << elements << " unwritten=" << unwritten << " nan_or_inf=" << nan_or_inf;
  if (reference_nonfinite) s << " reference_nonfinite=" << reference_nonfinite;
  if (first_bad >= 0) s << " first_bad=" << position(first_bad, cols);
  s << " normalized_error=" << normalized_error << " max_abs_error=" << max_abs_error;
  if (max_abs_index >= 0) s << " at " << position(max_abs_index, cols);
  s << " max_abs_reference=" << max_abs_reference << " max_row_normalized_error=" << max_row_normalized_error;
  if (worst_row >= 0) s << " (row " << worst_row << ")";
  return s.str();
}

CompareResult compare_bf16(std::span<const uint16_t> out, std::span<const float> ref, int64_t rows, int64_t cols,
                           uint16_t poison, std::span<const int64_t> row_subset) {
  return compare_impl([&](int64_t i) { return out[i] == poison; }, [&](int64_t i) { return bf16_to_float(out[i]); },
                      out.size(), ref, rows, cols, row_subset, "compare_bf16");
}

CompareResult compare_f32(std::span<const float> out, std::span<const float> ref, int64_t rows, int64_t cols,
                          uint32_t poison, std::span<const int64_t> row_subset) {
  return compare_impl([&](int64_t i) { return std::bit_cast<uint32_t>(out[i]) == poison; },
                      [&](int64_t i) { return out[i]; }, out.size(), ref, rows, cols, row_subset, "compare_f32");
}

std::vector<int64_t> sample_rows(int64_t rows, int64_t max_rows, uint64_t seed) {
  FP4MOE_CHECK(rows >= 0, "sample_rows: negative row count ", rows);
  FP4MOE_CHECK(max_rows >= 2, "sample_rows: max_rows must be >= 2 (first and last row), got ", max_rows);
  std::vector<int64_t> picked;
  if (rows <= max_rows) {
    for (int64_t r = 0; r < rows; ++r) picked.push_back(r);
    return picked;
  }
  std::vector<char> taken(static_cast<size_t>(rows), 0);
  taken[0] = taken[rows - 1] = 1;
  Rng rng(seed);
  for (int64_t n = 2; n < max_rows;) {
    const auto r = static_cast<int64_t>(rng.below(static_cast<uint64_t>(rows)));
    if (!taken[r]) {
      taken[r] = 1;
      ++n;
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (taken[r]) picked.push_back(r);
  }
  return picked;
}

void floats_to_bf16_bits(std::span<const float> in, std::span<uint16_t> out) {
  FP4MOE_CHECK(in.size() == out.size(), "floats_to_bf16_bits: ", in.size(), " inputs but ", out.size(), " outputs");
  for (size_t i = 0; i < in.size(); ++i) out[i] = float_to_bf16(in[i]);
}

}  // namespace fp4moe
