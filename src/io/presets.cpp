#include "io/presets.h"

#include <algorithm>

#include "common/error.h"

namespace fp4moe {
namespace {

ModelConfig qwen3_5(std::string name, int64_t layers, int64_t hidden, int64_t experts, int64_t top_k, int64_t inter,
                    int64_t heads, int64_t kv_heads, int64_t linear_value_heads) {
  ModelConfig c;
  c.name = std::move(name);
  c.architecture = "Qwen3_5MoeForConditionalGeneration";
  c.num_layers = layers;
  c.hidden = hidden;
  c.vocab = 248320;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = 256;
  c.full_attention_interval = 4;
  c.linear_num_key_heads = 16;
  c.linear_num_value_heads = linear_value_heads;
  c.linear_key_head_dim = 128;
  c.linear_value_head_dim = 128;
  c.num_experts = experts;
  c.top_k = top_k;
  c.moe_inter = inter;
  c.shared_expert_inter = inter;
  c.linear_conv_kernel_dim = 4;
  c.attn_output_gate = true;
  c.partial_rotary_factor = 0.25;
  return c;
}

ModelConfig qwen3_moe(std::string name, int64_t layers, int64_t hidden, int64_t experts, int64_t top_k, int64_t inter,
                      int64_t heads, int64_t kv_heads) {
  ModelConfig c;
  c.name = std::move(name);
  c.architecture = "Qwen3MoeForCausalLM";
  c.num_layers = layers;
  c.hidden = hidden;
  c.vocab = 151936;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = 128;
  c.num_experts = experts;
  c.top_k = top_k;
  c.moe_inter = inter;
  c.rope_theta = 1e6;
  return c;
}

std::vector<ModelConfig> all_presets() {
  std::vector<ModelConfig> presets;
  // Shapes: models-and-anchors.md A1/A2.
  presets.push_back(qwen3_5("qwen3.5-397b-a17b", 60, 4096, 512, 10, 1024, 32, 2, 64));
  presets.push_back(qwen3_5("qwen3.5-122b-a10b", 48, 3072, 256, 8, 1024, 32, 2, 64));
  presets.push_back(qwen3_5("qwen3.5-35b-a3b", 40, 2048, 256, 8, 512, 16, 2, 32));
  ModelConfig next = qwen3_5("qwen3-next-80b-a3b", 48, 2048, 512, 10, 512, 16, 2, 32);
  next.architecture = "Qwen3NextForCausalLM";
  next.vocab = 151936;
  presets.push_back(next);
  presets.push_back(qwen3_moe("qwen3-30b-a3b", 48, 2048, 128, 8, 768, 32, 4));
  presets.push_back(qwen3_moe("qwen3-235b-a22b", 94, 4096, 128, 8, 1536, 64, 4));
  ModelConfig deepseek;  // DeepSeek-V3 MoE shape, for the sigmoid grouped routing path
  deepseek.name = "deepseek-v3";
  deepseek.architecture = "DeepseekV3ForCausalLM";
  deepseek.num_layers = 61;
  deepseek.first_dense_layers = 3;
  deepseek.hidden = 7168;
  deepseek.vocab = 129280;
  deepseek.num_heads = 128;
  deepseek.num_kv_heads = 128;
  deepseek.head_dim = 128;
  deepseek.num_experts = 256;
  deepseek.top_k = 8;
  deepseek.moe_inter = 2048;
  deepseek.shared_expert_inter = 2048;
  deepseek.routing = "sigmoid_grouped_topk";
  deepseek.n_group = 8;
  deepseek.topk_group = 4;
  deepseek.routed_scaling_factor = 2.5;
  deepseek.rope_theta = 1e4;
  deepseek.dense_inter = 18432;
  deepseek.q_lora_rank = 1536;
  deepseek.kv_lora_rank = 512;
  deepseek.qk_nope_head_dim = 128;
  deepseek.qk_rope_head_dim = 64;
  deepseek.v_head_dim = 128;
  presets.push_back(deepseek);
  // tiny: Qwen3.5 structure at toy size, for tests and the README's quick start.
  ModelConfig tiny = qwen3_5("tiny", 4, 256, 16, 4, 128, 4, 2, 4);
  tiny.head_dim = 64;
  tiny.vocab = 1024;
  tiny.linear_num_key_heads = 2;
  tiny.linear_key_head_dim = 64;
  tiny.linear_value_head_dim = 64;
  tiny.shared_expert_inter = 128;
  presets.push_back(tiny);
  return presets;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const ModelConfig& c : all_presets()) names.push_back(c.name);
  return names;
}

ModelConfig model_preset(std::string_view name) {
  std::string valid;
  for (const ModelConfig& c : all_presets()) {
    if (c.name == name) return c;
    valid += (valid.empty() ? "" : ", ") + c.name;
  }
  fail("unknown model preset '", name, "'; valid presets: ", valid);
}

ModelConfig with_layers(ModelConfig config, int64_t layers) {
  FP4MOE_CHECK(layers >= 1 && layers <= config.num_layers, "--layers ", layers, ": ", config.name, " has ",
               config.num_layers, " layers, so N must be in [1, ", config.num_layers, "]");
  config.num_layers = layers;
  config.first_dense_layers = std::min(config.first_dense_layers, config.num_layers);
  return config;
}

}  // namespace fp4moe
