// Builds the MoeWeights (format/moe_weights.h) of one MoE layer from an opened ModelOpt NVFP4
// checkpoint: per expert gate_proj / up_proj / down_proj with weight (U8 [out, in/2]),
// weight_scale (F8_E4M3 [out, in/16]), weight_scale_2 (F32 scalar) and input_scale (F32 scalar,
// W4A4 only), stacked as w13 = [gate; up] and w2 = down.
// w13_input_scale = max(gate, up input_scale) per expert (vLLM's per-expert max); gate and up
// weight_scale_2 are kept separately (MoeWeights carries both). W4A16 checkpoints have no
// input_scale: the input scales are set to 1.0 and unused (W4A16 backends keep activations BF16).
// Every dtype or shape mismatch is an Error naming the tensor and the checkpoint.
#pragma once
#include <cstdint>

#include "format/moe_weights.h"
#include "io/hf_config.h"
#include "io/presets.h"
#include "io/safetensors.h"

namespace fp4moe {

MoeWeights load_moe_layer(const SafetensorsCheckpoint& checkpoint, const ModelConfig& config,
                          const QuantConfig& quant, int64_t layer);

}  // namespace fp4moe
