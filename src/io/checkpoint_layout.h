// The tensors of a Hugging Face checkpoint for a ModelConfig: names, dtypes and shapes as
// transformers' state_dict names them and as a ModelOpt NVFP4 export stores them
// (models-and-anchors.md A1 "NVFP4 checkpoints: what is quantized", nvfp4-format.md section 5):
// routed experts per expert and projection (gate_proj, up_proj, down_proj) in NVFP4
// (weight U8 [out, in/2], weight_scale F8_E4M3 [out, in/16], weight_scale_2 F32 [],
// input_scale F32 [] for W4A4), everything else BF16.
//
// Prefixes: Qwen3_5MoeForConditionalGeneration keeps its text model under
// `model.language_model.` (the vision tower under `model.visual.`, not written here);
// Qwen3-MoE, Qwen3-Next and DeepSeek-V3 use `model.`. TODO(lead): the Qwen3.5 prefix follows
// transformers' modular_qwen3_5_moe.py; check it against a real state_dict on the GPU machine.
// Not written: the MTP head (`mtp.*`, BF16 in the exports) and the vision tower.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/presets.h"
#include "io/safetensors.h"

namespace fp4moe {

// "model.language_model." or "model.".
std::string text_model_prefix(const ModelConfig& config);
// "<prefix>layers.<layer>."
std::string layer_prefix(const ModelConfig& config, int64_t layer);
// "<prefix>layers.<layer>.mlp.experts.<expert>."
std::string expert_prefix(const ModelConfig& config, int64_t layer, int64_t expert);
// True when the layer has the routed-expert MoE block (DeepSeek-V3's first layers are dense).
bool is_moe_layer(const ModelConfig& config, int64_t layer);
// Qwen3.5 / Qwen3-Next hybrid layers: true for the full-attention ones.
bool is_full_attention_layer(const ModelConfig& config, int64_t layer);

enum class ExpertFormat { kNvfp4, kNvfp4NoInputScale, kBf16 };

inline const char* const kExpertProjections[3] = {"gate_proj", "up_proj", "down_proj"};

// [out, in] of an expert projection (gate/up: [I, H], down: [H, I]).
std::pair<int64_t, int64_t> expert_projection_shape(const ModelConfig& config, int proj);

// The tensors of one expert (gate, up, down; for NVFP4 four tensors each, in the order weight,
// weight_scale, weight_scale_2, input_scale).
std::vector<TensorSpec> expert_tensor_specs(const ModelConfig& config, int64_t layer, int64_t expert,
                                            ExpertFormat format);
// The BF16 tensors of a layer other than the routed experts (norms, attention or linear
// attention, router, shared expert, dense MLP).
std::vector<TensorSpec> layer_dense_tensor_specs(const ModelConfig& config, int64_t layer);
// embed_tokens (head) and the final norm + lm_head (tail).
std::vector<TensorSpec> head_tensor_specs(const ModelConfig& config);
std::vector<TensorSpec> tail_tensor_specs(const ModelConfig& config);
// Everything, in file order: head, then per layer dense tensors and experts, then tail.
std::vector<TensorSpec> model_tensor_specs(const ModelConfig& config, ExpertFormat format);

// ModelOpt-style exclude list: the modules of the unquantized 2-D weights, with layer and expert
// indices summarised as `*` where the wildcard matches none of `quantized_modules` (else the
// exact module name is listed).
std::vector<std::string> summarize_excluded_modules(const std::vector<std::string>& unquantized_weight_names,
                                                    const std::vector<std::string>& quantized_modules = {});

}  // namespace fp4moe
