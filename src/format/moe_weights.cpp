#include "format/moe_weights.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"

namespace fp4moe {

void MoeWeights::allocate(int64_t experts, int64_t hidden_size, int64_t inter_size) {
  FP4MOE_CHECK(experts > 0 && hidden_size > 0 && inter_size > 0, "MoeWeights: experts, hidden and inter must be > 0, got ",
               experts, ", ", hidden_size, ", ", inter_size);
  FP4MOE_CHECK(hidden_size % kNvfp4BlockSize == 0 && inter_size % kNvfp4BlockSize == 0,
               "MoeWeights: hidden (", hidden_size, ") and inter (", inter_size, ") must be multiples of 16");
  num_experts = experts;
  hidden = hidden_size;
  inter = inter_size;
  const auto E = static_cast<size_t>(experts), H = static_cast<size_t>(hidden_size), I = static_cast<size_t>(inter_size);
  w13_packed.assign(E * 2 * I * H / 2, 0);
  w13_scales.assign(E * 2 * I * H / 16, 0);
  w2_packed.assign(E * H * I / 2, 0);
  w2_scales.assign(E * H * I / 16, 0);
  gate_scale2.assign(E, 0.0f);
  up_scale2.assign(E, 0.0f);
  down_scale2.assign(E, 0.0f);
  w13_input_scale.assign(E, 0.0f);
  w2_input_scale.assign(E, 0.0f);
}

void MoeWeights::validate() const {
  FP4MOE_CHECK(num_experts > 0 && hidden > 0 && inter > 0, "MoeWeights: empty shape");
  const auto E = static_cast<size_t>(num_experts), H = static_cast<size_t>(hidden), I = static_cast<size_t>(inter);
  auto check_size = [](const char* name, size_t got, size_t want) {
    FP4MOE_CHECK(got == want, "MoeWeights: ", name, " has ", got, " elements, expected ", want);
  };
  check_size("w13_packed", w13_packed.size(), E * 2 * I * H / 2);
  check_size("w13_scales", w13_scales.size(), E * 2 * I * H / 16);
  check_size("w2_packed", w2_packed.size(), E * H * I / 2);
  check_size("w2_scales", w2_scales.size(), E * H * I / 16);
  auto check_scales = [&](const char* name, const std::vector<float>& values) {
    check_size(name, values.size(), E);
    for (size_t e = 0; e < values.size(); ++e) {
      FP4MOE_CHECK(std::isfinite(values[e]) && values[e] > 0.0f, "MoeWeights: ", name, "[", e,
                   "] must be finite and > 0, got ", values[e]);
    }
  };
  check_scales("gate_scale2", gate_scale2);
  check_scales("up_scale2", up_scale2);
  check_scales("down_scale2", down_scale2);
  // Activation scales: 0 means absent (a W4A16_NVFP4 checkpoint has none); W4A4 needs them > 0,
  // which has_input_scales() tells and the W4A4 paths check.
  auto check_input_scales = [&](const char* name, const std::vector<float>& values) {
    check_size(name, values.size(), E);
    for (size_t e = 0; e < values.size(); ++e) {
      FP4MOE_CHECK(std::isfinite(values[e]) && values[e] >= 0.0f, "MoeWeights: ", name, "[", e,
                   "] must be finite and >= 0 (0: absent), got ", values[e]);
    }
  };
  check_input_scales("w13_input_scale", w13_input_scale);
  check_input_scales("w2_input_scale", w2_input_scale);
  for (size_t i = 0; i < w13_scales.size(); ++i) {
    FP4MOE_CHECK((w13_scales[i] & 0x7F) != 0x7F, "MoeWeights: w13 block scale ", i, " is an E4M3 NaN code");
  }
  for (size_t i = 0; i < w2_scales.size(); ++i) {
    FP4MOE_CHECK((w2_scales[i] & 0x7F) != 0x7F, "MoeWeights: w2 block scale ", i, " is an E4M3 NaN code");
  }
}

namespace {

void check_expert(const MoeWeights& w, int64_t e, const char* what) {
  FP4MOE_CHECK(e >= 0 && e < w.num_experts, "MoeWeights::", what, ": expert ", e, " out of range [0, ", w.num_experts,
               ")");
}

void copy_into(const Nvfp4Matrix& m, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scales, const char* what) {
  FP4MOE_CHECK(m.rows == rows && m.cols == cols, "MoeWeights: ", what, " must be [", rows, ", ", cols, "], got [",
               m.rows, ", ", m.cols, "]");
  FP4MOE_CHECK(static_cast<int64_t>(m.packed.size()) == rows * cols / 2 &&
                   static_cast<int64_t>(m.scales.size()) == rows * cols / kNvfp4BlockSize,
               "MoeWeights: ", what, " has ", m.packed.size(), " packed bytes and ", m.scales.size(),
               " scales, [", rows, ", ", cols, "] needs ", rows * cols / 2, " and ", rows * cols / kNvfp4BlockSize);
  std::copy(m.packed.begin(), m.packed.end(), packed);
  std::copy(m.scales.begin(), m.scales.end(), scales);
}

}  // namespace

// w13 holds per expert 2I rows of H: gate rows first, then up rows, so projection p (0 gate, 1 up)
// of expert e starts at row (2e + p) * I.
bool MoeWeights::has_input_scales() const {
  for (float s : w13_input_scale)
    if (!(s > 0.0f)) return false;
  for (float s : w2_input_scale)
    if (!(s > 0.0f)) return false;
  return !w13_input_scale.empty() && !w2_input_scale.empty();
}

Nvfp4View MoeWeights::gate(int64_t e) const {
  check_expert(*this, e, "gate");
  return {w13_packed.data() + e * 2 * inter * hidden / 2, w13_scales.data() + e * 2 * inter * hidden / 16,
          gate_scale2[e], inter, hidden};
}

Nvfp4View MoeWeights::up(int64_t e) const {
  check_expert(*this, e, "up");
  return {w13_packed.data() + (e * 2 + 1) * inter * hidden / 2, w13_scales.data() + (e * 2 + 1) * inter * hidden / 16,
          up_scale2[e], inter, hidden};
}

Nvfp4View MoeWeights::down(int64_t e) const {
  check_expert(*this, e, "down");
  return {w2_packed.data() + e * hidden * inter / 2, w2_scales.data() + e * hidden * inter / 16, down_scale2[e],
          hidden, inter};
}

void MoeWeights::set_gate(int64_t e, const Nvfp4Matrix& m) {
  check_expert(*this, e, "set_gate");
  copy_into(m, inter, hidden, w13_packed.data() + e * 2 * inter * hidden / 2,
            w13_scales.data() + e * 2 * inter * hidden / 16, "gate_proj");
  gate_scale2[e] = m.tensor_scale;
}

void MoeWeights::set_up(int64_t e, const Nvfp4Matrix& m) {
  check_expert(*this, e, "set_up");
  copy_into(m, inter, hidden, w13_packed.data() + (e * 2 + 1) * inter * hidden / 2,
            w13_scales.data() + (e * 2 + 1) * inter * hidden / 16, "up_proj");
  up_scale2[e] = m.tensor_scale;
}

void MoeWeights::set_down(int64_t e, const Nvfp4Matrix& m) {
  check_expert(*this, e, "set_down");
  copy_into(m, hidden, inter, w2_packed.data() + e * hidden * inter / 2, w2_scales.data() + e * hidden * inter / 16,
            "down_proj");
  down_scale2[e] = m.tensor_scale;
}

int64_t MoeWeights::bytes_per_expert() const { return 3 * hidden * inter / 2 + 3 * hidden * inter / 16; }

}  // namespace fp4moe
