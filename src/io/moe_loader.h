// Builds the MoeWeights (format/moe_weights.h) of one MoE layer from an opened ModelOpt NVFP4
// checkpoint: per expert gate_proj / up_proj / down_proj with weight (U8 [out, in/2]),
// weight_scale (F8_E4M3 [out, in/16]), weight_scale_2 (F32 scalar) and input_scale (F32 scalar,
// W4A4 only), stacked as w13 = [gate; up] and w2 = down.
// w13_input_scale = max(gate, up input_scale) per expert (vLLM's per-expert max); gate and up
// weight_scale_2 are kept separately (MoeWeights carries both). W4A16 checkpoints have no
// input_scale: the input scales are left 0 ("absent", MoeWeights::has_input_scales() is false);
// W4A16 backends keep activations BF16 and never read them, W4A4 paths refuse such weights.
// Every dtype or shape mismatch is an Error naming the tensor and the checkpoint.
#pragma once
#include <cstdint>
#include <filesystem>
#include <vector>

#include "format/moe_weights.h"
#include "io/hf_config.h"
#include "io/presets.h"
#include "io/safetensors.h"

namespace fp4moe {

MoeWeights load_moe_layer(const SafetensorsCheckpoint& checkpoint, const ModelConfig& config, const QuantConfig& quant,
                          int64_t layer);

// An opened ModelOpt NVFP4 checkpoint directory (what `--model DIR` points at): the mapped
// tensors, the model config (config.json) and the quantization (hf_quant_config.json or
// config.json's quantization_config). Opening reads headers only.
struct Nvfp4Checkpoint {
  SafetensorsCheckpoint tensors;
  ModelConfig config;
  QuantConfig quant;
  MoeWeights load_moe_layer(int64_t layer) const { return fp4moe::load_moe_layer(tensors, config, quant, layer); }
  std::vector<int64_t> moe_layers() const;  // layer indices with routed experts
};

// Throws Error naming the directory when config.json is missing or unsupported, or the checkpoint
// has no NVFP4 quantization config.
Nvfp4Checkpoint open_nvfp4_checkpoint(const std::filesystem::path& dir);

}  // namespace fp4moe
