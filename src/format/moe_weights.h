// MoeWeights: the routed experts of one MoE layer in the checkpoint's NVFP4 encoding, stacked over
// experts. This is the layout every backend prepares (repacks) from; it mirrors what a ModelOpt
// export holds per expert (gate_proj / up_proj / down_proj with weight, weight_scale,
// weight_scale_2, input_scale), with gate and up stacked as w13 = [gate; up] (HF order).
#pragma once
#include <cstdint>
#include <vector>

#include "format/nvfp4.h"

namespace fp4moe {

struct MoeWeights {
  int64_t num_experts = 0;
  int64_t hidden = 0;  // H
  int64_t inter = 0;   // I (per expert)
  std::vector<uint8_t> w13_packed;     // [E, 2I, H/2]; rows [0, I) gate_proj, [I, 2I) up_proj
  std::vector<uint8_t> w13_scales;     // [E, 2I, H/16] E4M3 codes, linear layout
  std::vector<float> gate_scale2;      // [E] gate_proj.weight_scale_2
  std::vector<float> up_scale2;        // [E] up_proj.weight_scale_2 (may differ from gate's)
  std::vector<uint8_t> w2_packed;      // [E, H, I/2]
  std::vector<uint8_t> w2_scales;      // [E, H, I/16]
  std::vector<float> down_scale2;      // [E] down_proj.weight_scale_2
  std::vector<float> w13_input_scale;  // [E] GEMM1 activation scale for W4A4 (max of gate/up input_scale); 0: absent
  std::vector<float> w2_input_scale;   // [E] down_proj.input_scale (GEMM2 activation scale for W4A4); 0: absent

  // Allocates all arrays for the shape (contents zero; scales 0).
  void allocate(int64_t experts, int64_t hidden_size, int64_t inter_size);
  // Throws Error naming the field when sizes disagree with the shape or a scale is not finite > 0.
  void validate() const;
  // True when every expert has its static activation scales (> 0), which W4A4 needs. A
  // W4A16_NVFP4 checkpoint has none: its input scales are 0.
  bool has_input_scales() const;

  // Views into expert e (Error when e is out of range).
  Nvfp4View gate(int64_t e) const;  // [I, H]
  Nvfp4View up(int64_t e) const;    // [I, H]
  Nvfp4View down(int64_t e) const;  // [H, I]
  // Copies one quantized projection into expert e (shape and sizes must match, else Error).
  void set_gate(int64_t e, const Nvfp4Matrix& m);
  void set_up(int64_t e, const Nvfp4Matrix& m);
  void set_down(int64_t e, const Nvfp4Matrix& m);
  int64_t bytes_per_expert() const;  // packed + scales of gate, up and down
};

}  // namespace fp4moe
