#include "io/checkpoint_layout.h"

#include <fnmatch.h>

#include <set>

#include "common/error.h"

namespace fp4moe {

namespace {

TensorSpec bf16(std::string name, std::vector<int64_t> shape) {
  return {std::move(name), Dtype::kBF16, std::move(shape)};
}

bool is_qwen_hybrid(const ModelConfig& c) { return c.full_attention_interval > 0; }
bool is_qwen3_5(const ModelConfig& c) { return c.architecture == "Qwen3_5MoeForConditionalGeneration"; }
bool is_mla(const ModelConfig& c) { return c.kv_lora_rank > 0; }

void add_mlp(std::vector<TensorSpec>& out, const std::string& p, int64_t hidden, int64_t inter) {
  out.push_back(bf16(p + "gate_proj.weight", {inter, hidden}));
  out.push_back(bf16(p + "up_proj.weight", {inter, hidden}));
  out.push_back(bf16(p + "down_proj.weight", {hidden, inter}));
}

// "a.layers.12.mlp.experts.3.up_proj" -> "a.layers.*.mlp.experts.*.up_proj". (Hand-written:
// std::regex trips GCC 12's -Wmaybe-uninitialized under -O2 with sanitizers.)
std::string wildcard_indices(const std::string& module) {
  std::string out;
  size_t i = 0;
  while (i < module.size()) {
    bool replaced = false;
    for (const std::string key : {".layers.", ".experts."}) {
      if (module.compare(i, key.size(), key) != 0) continue;
      size_t end = i + key.size();
      while (end < module.size() && module[end] >= '0' && module[end] <= '9') ++end;
      if (end > i + key.size() && end < module.size() && module[end] == '.') {
        out += key + "*";
        i = end;
        replaced = true;
      }
      break;
    }
    if (!replaced) out.push_back(module[i++]);
  }
  return out;
}

}  // namespace

std::string text_model_prefix(const ModelConfig& config) {
  return is_qwen3_5(config) ? "model.language_model." : "model.";
}

std::string layer_prefix(const ModelConfig& config, int64_t layer) {
  return text_model_prefix(config) + "layers." + std::to_string(layer) + ".";
}

std::string expert_prefix(const ModelConfig& config, int64_t layer, int64_t expert) {
  return layer_prefix(config, layer) + "mlp.experts." + std::to_string(expert) + ".";
}

bool is_moe_layer(const ModelConfig& config, int64_t layer) { return layer >= config.first_dense_layers; }

bool is_full_attention_layer(const ModelConfig& config, int64_t layer) {
  return !is_qwen_hybrid(config) || (layer + 1) % config.full_attention_interval == 0;
}

std::pair<int64_t, int64_t> expert_projection_shape(const ModelConfig& config, int proj) {
  return proj == 2 ? std::pair{config.hidden, config.moe_inter} : std::pair{config.moe_inter, config.hidden};
}

std::vector<TensorSpec> expert_tensor_specs(const ModelConfig& config, int64_t layer, int64_t expert,
                                            ExpertFormat format) {
  std::vector<TensorSpec> out;
  const std::string p = expert_prefix(config, layer, expert);
  for (int proj = 0; proj < 3; ++proj) {
    const auto [rows, cols] = expert_projection_shape(config, proj);
    const std::string base = p + kExpertProjections[proj] + ".";
    if (format == ExpertFormat::kBf16) {
      out.push_back(bf16(base + "weight", {rows, cols}));
      continue;
    }
    FP4MOE_CHECK(cols % 16 == 0, config.name, ": expert ", kExpertProjections[proj], " input size ", cols,
                 " is not a multiple of 16, cannot be NVFP4");
    out.push_back({base + "weight", Dtype::kU8, {rows, cols / 2}});
    out.push_back({base + "weight_scale", Dtype::kF8E4M3, {rows, cols / 16}});
    out.push_back({base + "weight_scale_2", Dtype::kF32, {}});
    if (format == ExpertFormat::kNvfp4) out.push_back({base + "input_scale", Dtype::kF32, {}});
  }
  return out;
}

std::vector<TensorSpec> layer_dense_tensor_specs(const ModelConfig& c, int64_t layer) {
  std::vector<TensorSpec> out;
  const std::string p = layer_prefix(c, layer);
  const int64_t H = c.hidden;
  out.push_back(bf16(p + "input_layernorm.weight", {H}));
  out.push_back(bf16(p + "post_attention_layernorm.weight", {H}));
  if (is_mla(c)) {  // DeepSeek-V3 multi-head latent attention
    const std::string a = p + "self_attn.";
    const int64_t qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
    if (c.q_lora_rank > 0) {
      out.push_back(bf16(a + "q_a_proj.weight", {c.q_lora_rank, H}));
      out.push_back(bf16(a + "q_a_layernorm.weight", {c.q_lora_rank}));
      out.push_back(bf16(a + "q_b_proj.weight", {c.num_heads * qk, c.q_lora_rank}));
    } else {
      out.push_back(bf16(a + "q_proj.weight", {c.num_heads * qk, H}));
    }
    out.push_back(bf16(a + "kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_head_dim, H}));
    out.push_back(bf16(a + "kv_a_layernorm.weight", {c.kv_lora_rank}));
    out.push_back(bf16(a + "kv_b_proj.weight", {c.num_heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}));
    out.push_back(bf16(a + "o_proj.weight", {H, c.num_heads * c.v_head_dim}));
  } else if (is_full_attention_layer(c, layer)) {
    const std::string a = p + "self_attn.";
    out.push_back(bf16(a + "q_proj.weight", {c.num_heads * c.head_dim * (c.attn_output_gate ? 2 : 1), H}));
    out.push_back(bf16(a + "k_proj.weight", {c.num_kv_heads * c.head_dim, H}));
    out.push_back(bf16(a + "v_proj.weight", {c.num_kv_heads * c.head_dim, H}));
    out.push_back(bf16(a + "o_proj.weight", {H, c.num_heads * c.head_dim}));
    out.push_back(bf16(a + "q_norm.weight", {c.head_dim}));
    out.push_back(bf16(a + "k_norm.weight", {c.head_dim}));
  } else {  // Gated DeltaNet
    const std::string a = p + "linear_attn.";
    const int64_t key = c.linear_num_key_heads * c.linear_key_head_dim;
    const int64_t value = c.linear_num_value_heads * c.linear_value_head_dim;
    const int64_t conv_dim = 2 * key + value;
    if (is_qwen3_5(c)) {  // Qwen3.5 splits the projections
      out.push_back(bf16(a + "in_proj_qkv.weight", {conv_dim, H}));
      out.push_back(bf16(a + "in_proj_z.weight", {value, H}));
      out.push_back(bf16(a + "in_proj_b.weight", {c.linear_num_value_heads, H}));
      out.push_back(bf16(a + "in_proj_a.weight", {c.linear_num_value_heads, H}));
    } else {  // Qwen3-Next fuses them
      out.push_back(bf16(a + "in_proj_qkvz.weight", {2 * key + 2 * value, H}));
      out.push_back(bf16(a + "in_proj_ba.weight", {2 * c.linear_num_value_heads, H}));
    }
    out.push_back(bf16(a + "conv1d.weight", {conv_dim, 1, c.linear_conv_kernel_dim}));
    out.push_back(bf16(a + "dt_bias", {c.linear_num_value_heads}));
    out.push_back(bf16(a + "A_log", {c.linear_num_value_heads}));
    out.push_back(bf16(a + "norm.weight", {c.linear_value_head_dim}));
    out.push_back(bf16(a + "out_proj.weight", {H, value}));
  }
  if (!is_moe_layer(c, layer)) {
    add_mlp(out, p + "mlp.", H, c.dense_inter);
    return out;
  }
  out.push_back(bf16(p + "mlp.gate.weight", {c.num_experts, H}));
  if (c.routing == "sigmoid_grouped_topk") {
    out.push_back({p + "mlp.gate.e_score_correction_bias", Dtype::kF32, {c.num_experts}});
  }
  if (c.shared_expert_inter > 0) {
    if (is_qwen_hybrid(c)) {
      add_mlp(out, p + "mlp.shared_expert.", H, c.shared_expert_inter);
      out.push_back(bf16(p + "mlp.shared_expert_gate.weight", {1, H}));
    } else {
      add_mlp(out, p + "mlp.shared_experts.", H, c.shared_expert_inter);
    }
  }
  return out;
}

std::vector<TensorSpec> head_tensor_specs(const ModelConfig& c) {
  return {bf16(text_model_prefix(c) + "embed_tokens.weight", {c.vocab, c.hidden})};
}

std::vector<TensorSpec> tail_tensor_specs(const ModelConfig& c) {
  std::vector<TensorSpec> out{bf16(text_model_prefix(c) + "norm.weight", {c.hidden})};
  if (!c.tie_word_embeddings) out.push_back(bf16("lm_head.weight", {c.vocab, c.hidden}));
  return out;
}

std::vector<TensorSpec> model_tensor_specs(const ModelConfig& c, ExpertFormat format) {
  std::vector<TensorSpec> out = head_tensor_specs(c);
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    for (TensorSpec& s : layer_dense_tensor_specs(c, layer)) out.push_back(std::move(s));
    if (!is_moe_layer(c, layer)) continue;
    for (int64_t e = 0; e < c.num_experts; ++e) {
      for (TensorSpec& s : expert_tensor_specs(c, layer, e, format)) out.push_back(std::move(s));
    }
  }
  for (TensorSpec& s : tail_tensor_specs(c)) out.push_back(std::move(s));
  return out;
}

std::vector<std::string> summarize_excluded_modules(const std::vector<std::string>& names,
                                                    const std::vector<std::string>& quantized_modules) {
  std::set<std::string> modules, exact;
  std::vector<std::pair<std::string, std::string>> pattern_of;  // (wildcard, module)
  for (const std::string& name : names) {
    std::string module = name;
    const std::string suffix = ".weight";
    if (module.size() > suffix.size() && module.compare(module.size() - suffix.size(), suffix.size(), suffix) == 0) {
      module.resize(module.size() - suffix.size());
    }
    const std::string pattern = wildcard_indices(module);
    modules.insert(pattern);
    pattern_of.emplace_back(pattern, module);
  }
  // A wildcard that would also cover a quantized module falls back to the exact names.
  std::set<std::string> colliding;
  for (const std::string& pattern : modules) {
    for (const std::string& q : quantized_modules) {
      if (::fnmatch(pattern.c_str(), q.c_str(), 0) == 0) {
        colliding.insert(pattern);
        break;
      }
    }
  }
  for (const auto& [pattern, module] : pattern_of) {
    if (colliding.count(pattern)) exact.insert(module);
  }
  for (const std::string& pattern : colliding) modules.erase(pattern);
  modules.insert(exact.begin(), exact.end());
  return {modules.begin(), modules.end()};
}

}  // namespace fp4moe
