// Model configurations and the built-in presets (models-and-anchors.md, A1 and A2): the exact shapes
// of the supported MoE models, so that qualification, benchmarks and `fp4moe synth` run without a
// checkpoint. A ModelConfig also comes from a checkpoint's config.json (io/hf_config.h).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fp4moe {

// The most experts and the widest hidden or intermediate size fp4moe handles: a config.json past them is
// refused when read (io/hf_config.cpp), a MoE problem past them when built (kernels/moe_problem.cpp).
inline constexpr int64_t kMaxModelExperts = 4096;
inline constexpr int64_t kMaxModelWidth = int64_t{1} << 16;

struct ModelConfig {
  std::string name;          // preset name or the checkpoint's model_type
  std::string architecture;  // HF architectures[0], e.g. "Qwen3_5MoeForConditionalGeneration"
  int64_t num_layers = 0;
  int64_t hidden = 0;
  int64_t vocab = 0;
  // Attention (full-attention layers).
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  // Gated DeltaNet (linear-attention layers); 0 when the model has none.
  int64_t full_attention_interval = 0;  // every Nth layer is full attention (Qwen3.5: 4)
  int64_t linear_num_key_heads = 0;
  int64_t linear_num_value_heads = 0;
  int64_t linear_key_head_dim = 0;
  int64_t linear_value_head_dim = 0;
  // MoE block.
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t moe_inter = 0;
  int64_t shared_expert_inter = 0;  // 0: no shared expert
  std::string routing = "softmax_topk_renorm";  // kernels/moe_problem.h names
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
  int64_t first_dense_layers = 0;  // DeepSeek-V3: the first layers use a dense MLP
  double rms_norm_eps = 1e-6;
  double rope_theta = 1e7;
  // Fields the checkpoint layout needs (io/checkpoint_layout.h); 0 / false when not applicable.
  int64_t linear_conv_kernel_dim = 0;  // Gated DeltaNet causal conv width (Qwen3.5: 4)
  bool attn_output_gate = false;       // q_proj emits [q; gate] (Qwen3.5, Qwen3-Next)
  double partial_rotary_factor = 1.0;  // fraction of head_dim that gets RoPE (Qwen3.5: 0.25)
  int64_t dense_inter = 0;             // intermediate size of the dense MLP layers (DeepSeek-V3: 18432)
  // Multi-head latent attention (DeepSeek-V3); 0 when the model uses plain attention.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool tie_word_embeddings = false;
};

// Names of the built-in presets, in display order.
std::vector<std::string> preset_names();
// The preset's config; throws Error listing the valid names when unknown.
ModelConfig model_preset(std::string_view name);
// A copy with its first `layers` layers (the --layers option); throws Error unless 1 <= layers <= num_layers.
ModelConfig with_layers(ModelConfig config, int64_t layers);

}  // namespace fp4moe
