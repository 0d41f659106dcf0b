#include "io/hf_config.h"

#include <fnmatch.h>

#include <cmath>
#include <fstream>

#include "common/error.h"

namespace fp4moe {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// Typed access to the fields of one JSON object, with errors that name the file and the field.
class Fields {
 public:
  Fields(const json& j, std::string label) : j_(j), label_(std::move(label)) {
    FP4MOE_CHECK(j.is_object(), label_, ": expected a JSON object");
  }
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  const json& raw(const char* key) const { return j_[key]; }
  int64_t integer(const char* key) const {
    FP4MOE_CHECK(has(key), label_, ": missing field \"", key, "\"");
    const json& v = j_[key];
    FP4MOE_CHECK(v.is_number_integer(), label_, ": field \"", key, "\" must be an integer, got ", v.dump());
    return v.get<int64_t>();
  }
  int64_t integer(const char* key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }
  double number(const char* key) const {
    FP4MOE_CHECK(has(key), label_, ": missing field \"", key, "\"");
    const json& v = j_[key];
    FP4MOE_CHECK(v.is_number(), label_, ": field \"", key, "\" must be a number, got ", v.dump());
    return v.get<double>();
  }
  double number(const char* key, double fallback) const { return has(key) ? number(key) : fallback; }
  std::string string(const char* key) const {
    FP4MOE_CHECK(has(key), label_, ": missing field \"", key, "\"");
    const json& v = j_[key];
    FP4MOE_CHECK(v.is_string(), label_, ": field \"", key, "\" must be a string, got ", v.dump());
    return v.get<std::string>();
  }
  std::string string(const char* key, const std::string& fallback) const { return has(key) ? string(key) : fallback; }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    FP4MOE_CHECK(j_[key].is_boolean(), label_, ": field \"", key, "\" must be true or false, got ", j_[key].dump());
    return j_[key].get<bool>();
  }
  const std::string& label() const { return label_; }

 private:
  const json& j_;
  std::string label_;
};

// rope_theta / partial_rotary_factor live at the top of older configs and in `rope_parameters` in
// transformers v5 configs.
void read_rope(const Fields& f, ModelConfig& c, double default_theta) {
  c.rope_theta = f.number("rope_theta", default_theta);
  c.partial_rotary_factor = f.number("partial_rotary_factor", 1.0);
  if (f.has("rope_parameters")) {
    Fields rope(f.raw("rope_parameters"), f.label() + " rope_parameters");
    c.rope_theta = rope.number("rope_theta", c.rope_theta);
    c.partial_rotary_factor = rope.number("partial_rotary_factor", c.partial_rotary_factor);
  }
}

void read_qwen_hybrid(const Fields& f, ModelConfig& c) {  // qwen3_5_moe_text, qwen3_next
  c.num_layers = f.integer("num_hidden_layers");
  c.hidden = f.integer("hidden_size");
  c.vocab = f.integer("vocab_size");
  c.num_heads = f.integer("num_attention_heads");
  c.num_kv_heads = f.integer("num_key_value_heads");
  c.head_dim = f.integer("head_dim");
  FP4MOE_CHECK(f.has("full_attention_interval") || f.has("layer_types"), f.label(),
               ": needs full_attention_interval or layer_types (which layers are full attention)");
  if (f.has("full_attention_interval")) {
    c.full_attention_interval = f.integer("full_attention_interval");
    FP4MOE_CHECK(c.full_attention_interval >= 1, f.label(), ": full_attention_interval must be >= 1");
  }
  if (f.has("layer_types")) {  // must agree with the interval rule (full attention where (i+1) % n == 0)
    const json& types = f.raw("layer_types");
    FP4MOE_CHECK(types.is_array() && static_cast<int64_t>(types.size()) == c.num_layers, f.label(),
                 ": layer_types must list num_hidden_layers entries");
    if (c.full_attention_interval == 0) {  // derive the interval from the first full-attention layer
      for (size_t i = 0; i < types.size() && c.full_attention_interval == 0; ++i) {
        if (types[i] == "full_attention") c.full_attention_interval = static_cast<int64_t>(i) + 1;
      }
      FP4MOE_CHECK(c.full_attention_interval > 0, f.label(), ": layer_types has no full_attention layer");
    }
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const bool full = (i + 1) % c.full_attention_interval == 0;
      const json& t = types[static_cast<size_t>(i)];
      FP4MOE_CHECK(t.is_string() && t.get<std::string>() == (full ? "full_attention" : "linear_attention"), f.label(),
                   ": layer_types[", i, "] is ", t.dump(), ", which fp4moe does not support (it expects every ",
                   c.full_attention_interval, "th layer to be full_attention, the others linear_attention)");
    }
  }
  c.linear_num_key_heads = f.integer("linear_num_key_heads");
  c.linear_num_value_heads = f.integer("linear_num_value_heads");
  c.linear_key_head_dim = f.integer("linear_key_head_dim");
  c.linear_value_head_dim = f.integer("linear_value_head_dim");
  c.linear_conv_kernel_dim = f.integer("linear_conv_kernel_dim");
  c.num_experts = f.integer("num_experts");
  c.top_k = f.integer("num_experts_per_tok");
  c.moe_inter = f.integer("moe_intermediate_size");
  c.shared_expert_inter = f.integer("shared_expert_intermediate_size");
  c.routing = "softmax_topk_renorm";  // Qwen3.5 always renormalises; Qwen3-Next has norm_topk_prob
  if (!f.boolean("norm_topk_prob", true)) c.routing = "softmax_topk";
  c.attn_output_gate = f.boolean("attn_output_gate", true);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", c.tie_word_embeddings);
  read_rope(f, c, 1e7);
}

void read_qwen3_moe(const Fields& f, ModelConfig& c) {
  c.num_layers = f.integer("num_hidden_layers");
  c.hidden = f.integer("hidden_size");
  c.vocab = f.integer("vocab_size");
  c.num_heads = f.integer("num_attention_heads");
  c.num_kv_heads = f.integer("num_key_value_heads");
  c.head_dim = f.integer("head_dim", c.hidden / std::max<int64_t>(1, c.num_heads));
  c.num_experts = f.integer("num_experts");
  c.top_k = f.integer("num_experts_per_tok");
  c.moe_inter = f.integer("moe_intermediate_size");
  c.routing = f.boolean("norm_topk_prob", false) ? "softmax_topk_renorm" : "softmax_topk";
  FP4MOE_CHECK(f.integer("decoder_sparse_step", 1) == 1, f.label(), ": decoder_sparse_step != 1 is not supported");
  if (f.has("mlp_only_layers")) {
    FP4MOE_CHECK(f.raw("mlp_only_layers").is_array() && f.raw("mlp_only_layers").empty(), f.label(),
                 ": mlp_only_layers (dense layers in a Qwen3-MoE) is not supported");
  }
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  read_rope(f, c, 1e6);
}

void read_deepseek_v3(const Fields& f, ModelConfig& c) {
  c.num_layers = f.integer("num_hidden_layers");
  c.hidden = f.integer("hidden_size");
  c.vocab = f.integer("vocab_size");
  c.num_heads = f.integer("num_attention_heads");
  c.num_kv_heads = f.integer("num_key_value_heads", c.num_heads);
  c.num_experts = f.integer("n_routed_experts");
  c.top_k = f.integer("num_experts_per_tok");
  c.moe_inter = f.integer("moe_intermediate_size");
  c.shared_expert_inter = f.integer("n_shared_experts", 0) * c.moe_inter;
  c.first_dense_layers = f.integer("first_k_dense_replace", 0);
  c.dense_inter = f.integer("intermediate_size");
  FP4MOE_CHECK(f.integer("moe_layer_freq", 1) == 1, f.label(), ": moe_layer_freq != 1 is not supported");
  c.n_group = f.integer("n_group");
  c.topk_group = f.integer("topk_group");
  c.routed_scaling_factor = f.number("routed_scaling_factor");
  const std::string scoring = f.string("scoring_func", "sigmoid");
  const std::string method = f.string("topk_method", "noaux_tc");
  FP4MOE_CHECK(scoring == "sigmoid" && method == "noaux_tc", f.label(), ": scoring_func '", scoring,
               "' with topk_method '", method,
               "' is not supported (fp4moe implements DeepSeek-V3's sigmoid + noaux_tc routing)");
  FP4MOE_CHECK(f.boolean("norm_topk_prob", true), f.label(), ": norm_topk_prob false is not supported for deepseek_v3");
  c.routing = "sigmoid_grouped_topk";
  c.q_lora_rank = f.integer("q_lora_rank", 0);
  c.kv_lora_rank = f.integer("kv_lora_rank");
  c.qk_nope_head_dim = f.integer("qk_nope_head_dim");
  c.qk_rope_head_dim = f.integer("qk_rope_head_dim");
  c.v_head_dim = f.integer("v_head_dim");
  c.head_dim = f.integer("head_dim", c.v_head_dim);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  read_rope(f, c, 1e4);
}

// Bounds on a config's sizes: far above every supported model (models-and-anchors.md: at most 94 layers,
// hidden 7168, 512 experts, vocab 248320, 60 x 512 expert instances), low enough that the expected tensor
// list and every tensor's element count stay small. A config.json outside them is refused before anything is
// sized from it: a claimed 2^31 experts had `inspect` build its expected tensor list until memory ran out,
// and zero heads gave a checkpoint of empty tensors. kMaxModelExperts and kMaxModelWidth (io/presets.h) are
// the MoE problem's own bounds; here kMaxModelWidth bounds head and rank sizes too.
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxDenseWidth = int64_t{1} << 18;  // dense MLP and shared-expert intermediate sizes
constexpr int64_t kMaxVocab = int64_t{1} << 22;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxExpertInstances = int64_t{1} << 18;  // MoE layers x experts (Qwen3.5-397B: 30720)
static_assert(kMaxLayers * kMaxModelExperts > kMaxExpertInstances, "the product needs its own bound");

void check_model_config(const ModelConfig& c, std::string_view label) {
  struct Range {
    const char* name;
    int64_t value, min, max;
  };
  std::vector<Range> ranges = {{"num_hidden_layers", c.num_layers, 1, kMaxLayers},
                               {"hidden_size", c.hidden, 1, kMaxModelWidth},
                               {"vocab_size", c.vocab, 1, kMaxVocab},
                               {"num_attention_heads", c.num_heads, 1, kMaxHeads},
                               {"num_key_value_heads", c.num_kv_heads, 1, kMaxHeads},
                               {"head_dim", c.head_dim, 1, kMaxModelWidth},
                               {"num experts", c.num_experts, 1, kMaxModelExperts},
                               {"num_experts_per_tok", c.top_k, 1, c.num_experts},
                               {"moe_intermediate_size", c.moe_inter, 1, kMaxModelWidth},
                               {"shared expert intermediate size", c.shared_expert_inter, 0, kMaxDenseWidth},
                               {"first_k_dense_replace", c.first_dense_layers, 0, c.num_layers - 1}};
  if (c.full_attention_interval > 0) {  // Gated DeltaNet layers (qwen3_5_moe, qwen3_next)
    ranges.insert(ranges.end(), {{"linear_num_key_heads", c.linear_num_key_heads, 1, kMaxHeads},
                                 {"linear_num_value_heads", c.linear_num_value_heads, 1, kMaxHeads},
                                 {"linear_key_head_dim", c.linear_key_head_dim, 1, kMaxModelWidth},
                                 {"linear_value_head_dim", c.linear_value_head_dim, 1, kMaxModelWidth},
                                 {"linear_conv_kernel_dim", c.linear_conv_kernel_dim, 1, kMaxHeads}});
  }
  if (c.name == "deepseek_v3") {
    ranges.insert(ranges.end(), {{"intermediate_size", c.dense_inter, 1, kMaxDenseWidth},
                                 {"n_group", c.n_group, 1, c.num_experts},
                                 {"topk_group", c.topk_group, 1, c.n_group},
                                 {"q_lora_rank", c.q_lora_rank, 0, kMaxModelWidth},
                                 {"kv_lora_rank", c.kv_lora_rank, 1, kMaxModelWidth},
                                 {"qk_nope_head_dim", c.qk_nope_head_dim, 0, kMaxModelWidth},
                                 {"qk_rope_head_dim", c.qk_rope_head_dim, 1, kMaxModelWidth},
                                 {"v_head_dim", c.v_head_dim, 1, kMaxModelWidth}});
  }
  for (const Range& r : ranges) {
    FP4MOE_CHECK(r.value >= r.min && r.value <= r.max, label, ": ", r.name, " is ", r.value, ", outside [", r.min,
                 ", ", r.max, "]");
  }
  FP4MOE_CHECK(c.num_heads % c.num_kv_heads == 0, label, ": num_attention_heads ", c.num_heads,
               " is not a multiple of num_key_value_heads ", c.num_kv_heads);
  if (c.full_attention_interval > 0) {
    FP4MOE_CHECK(c.linear_num_value_heads % c.linear_num_key_heads == 0, label, ": linear_num_value_heads ",
                 c.linear_num_value_heads, " is not a multiple of linear_num_key_heads ", c.linear_num_key_heads);
  }
  if (c.name == "deepseek_v3") {
    FP4MOE_CHECK(c.num_experts % c.n_group == 0, label, ": n_group ", c.n_group, " does not divide the ",
                 c.num_experts, " experts");
  }
  const int64_t moe_layers = c.num_layers - c.first_dense_layers;
  FP4MOE_CHECK(moe_layers * c.num_experts <= kMaxExpertInstances, label, ": ", moe_layers, " MoE layers of ",
               c.num_experts, " experts are ", moe_layers * c.num_experts, " expert instances, more than fp4moe's ",
               kMaxExpertInstances);
  const std::pair<const char*, double> positive[] = {{"rms_norm_eps", c.rms_norm_eps},
                                                     {"rope_theta", c.rope_theta},
                                                     {"routed_scaling_factor", c.routed_scaling_factor},
                                                     {"partial_rotary_factor", c.partial_rotary_factor}};
  for (const auto& [name, value] : positive)
    FP4MOE_CHECK(std::isfinite(value) && value > 0.0, label, ": ", name, " must be a finite number > 0, got ", value);
  FP4MOE_CHECK(c.partial_rotary_factor <= 1.0, label, ": partial_rotary_factor ", c.partial_rotary_factor,
               " is more than 1");
}

std::string kv_algo_from_json(const json& v, std::string_view label) {
  if (v.is_null()) return "";
  FP4MOE_CHECK(v.is_string(), label, ": kv_cache_quant_algo must be a string or null, got ", v.dump());
  const std::string algo = v.get<std::string>();
  FP4MOE_CHECK(algo == "FP8" || algo == "NVFP4", label, ": kv_cache_quant_algo '", algo,
               "' is not supported (FP8, NVFP4 or null)");
  return algo;
}

void check_quant_algo(const QuantConfig& q, std::string_view label) {
  FP4MOE_CHECK(q.quant_algo == "NVFP4" || q.quant_algo == "W4A16_NVFP4", label, ": quant_algo '", q.quant_algo,
               "' is not supported (fp4moe reads NVFP4 and W4A16_NVFP4 checkpoints)");
  FP4MOE_CHECK(q.group_size == 16, label, ": group_size ", q.group_size, " is not supported (NVFP4 uses 16)");
}

std::vector<std::string> string_list(const json& v, std::string_view label, const char* key) {
  std::vector<std::string> out;
  if (v.is_null()) return out;
  FP4MOE_CHECK(v.is_array(), label, ": ", key, " must be a list of strings");
  for (const json& s : v) {
    FP4MOE_CHECK(s.is_string(), label, ": ", key, " entries must be strings, got ", s.dump());
    out.push_back(s.get<std::string>());
  }
  return out;
}

}  // namespace

ModelConfig parse_hf_config(const json& config, std::string_view label) {
  Fields top(config, std::string(label));
  ModelConfig c;
  const std::string model_type = top.string("model_type");
  c.name = model_type;
  if (top.has("architectures")) {
    const json& a = top.raw("architectures");
    FP4MOE_CHECK(a.is_array() && !a.empty() && a[0].is_string(), label, ": architectures must be a list of strings");
    c.architecture = a[0].get<std::string>();
  }
  if (model_type == "qwen3_5_moe") {
    FP4MOE_CHECK(top.has("text_config"), label, ": model_type qwen3_5_moe needs a \"text_config\" object");
    Fields text(top.raw("text_config"), std::string(label) + " text_config");
    const std::string text_type = text.string("model_type", "qwen3_5_moe_text");
    FP4MOE_CHECK(text_type == "qwen3_5_moe_text", label, ": text_config.model_type is '", text_type,
                 "', expected qwen3_5_moe_text");
    c.tie_word_embeddings = top.boolean("tie_word_embeddings", false);
    read_qwen_hybrid(text, c);
    if (c.architecture.empty()) c.architecture = "Qwen3_5MoeForConditionalGeneration";
  } else if (model_type == "qwen3_5_moe_text" || model_type == "qwen3_next") {
    read_qwen_hybrid(top, c);
    if (c.architecture.empty())
      c.architecture = model_type == "qwen3_next" ? "Qwen3NextForCausalLM" : "Qwen3_5MoeForCausalLM";
  } else if (model_type == "qwen3_moe") {
    read_qwen3_moe(top, c);
    if (c.architecture.empty()) c.architecture = "Qwen3MoeForCausalLM";
  } else if (model_type == "deepseek_v3") {
    read_deepseek_v3(top, c);
    if (c.architecture.empty()) c.architecture = "DeepseekV3ForCausalLM";
  } else {
    fail(label, ": model_type '", model_type,
         "' is not supported (qwen3_5_moe, qwen3_5_moe_text, qwen3_next, qwen3_moe, deepseek_v3)");
  }
  check_model_config(c, label);
  return c;
}

json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  FP4MOE_CHECK(in.good(), path.string(), ": cannot open");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail(path.string(), ": not valid JSON: ", e.what());
  }
}

void write_json_file(const std::filesystem::path& path, const ojson& doc) {
  std::ofstream out(path);
  out << doc.dump(2) << "\n";
  out.close();
  FP4MOE_CHECK(out.good(), path.string(), ": write failed");
}

ModelConfig read_hf_config(const std::filesystem::path& config_json) {
  return parse_hf_config(read_json_file(config_json), config_json.string());
}

ojson hf_config_json(const ModelConfig& c) {
  ojson j;
  auto rope = [&](ojson& into) {
    into["rope_theta"] = c.rope_theta;
    into["partial_rotary_factor"] = c.partial_rotary_factor;
  };
  if (c.architecture == "Qwen3_5MoeForConditionalGeneration" || c.architecture == "Qwen3NextForCausalLM") {
    ojson t;
    const bool wrapper = c.architecture == "Qwen3_5MoeForConditionalGeneration";
    t["model_type"] = wrapper ? "qwen3_5_moe_text" : "qwen3_next";
    t["hidden_size"] = c.hidden;
    t["num_hidden_layers"] = c.num_layers;
    t["vocab_size"] = c.vocab;
    t["num_attention_heads"] = c.num_heads;
    t["num_key_value_heads"] = c.num_kv_heads;
    t["head_dim"] = c.head_dim;
    t["full_attention_interval"] = c.full_attention_interval;
    ojson types = ojson::array();
    for (int64_t i = 0; i < c.num_layers; ++i) {
      types.push_back((i + 1) % c.full_attention_interval == 0 ? "full_attention" : "linear_attention");
    }
    t["layer_types"] = types;
    t["linear_num_key_heads"] = c.linear_num_key_heads;
    t["linear_num_value_heads"] = c.linear_num_value_heads;
    t["linear_key_head_dim"] = c.linear_key_head_dim;
    t["linear_value_head_dim"] = c.linear_value_head_dim;
    t["linear_conv_kernel_dim"] = c.linear_conv_kernel_dim;
    t["num_experts"] = c.num_experts;
    t["num_experts_per_tok"] = c.top_k;
    t["moe_intermediate_size"] = c.moe_inter;
    t["shared_expert_intermediate_size"] = c.shared_expert_inter;
    if (!wrapper) {
      t["norm_topk_prob"] = c.routing == "softmax_topk_renorm";
      t["decoder_sparse_step"] = 1;
      t["mlp_only_layers"] = ojson::array();
      t["intermediate_size"] = c.shared_expert_inter;
    }
    t["attn_output_gate"] = c.attn_output_gate;
    t["hidden_act"] = "silu";
    t["rms_norm_eps"] = c.rms_norm_eps;
    rope(t);
    // transformers v5 reads RoPE from rope_parameters; the multimodal RoPE sections split the
    // rotary half-dimension 11:11:10 as the Qwen3.5 configs do.
    ojson params = {
        {"rope_type", "default"}, {"rope_theta", c.rope_theta}, {"partial_rotary_factor", c.partial_rotary_factor}};
    if (wrapper) {
      const int64_t half = static_cast<int64_t>(std::llround(c.head_dim * c.partial_rotary_factor)) / 2;
      const int64_t s = static_cast<int64_t>(std::llround(half * 11.0 / 32.0));
      params["mrope_interleaved"] = true;
      params["mrope_section"] = {s, s, half - 2 * s};
    }
    t["rope_parameters"] = params;
    t["max_position_embeddings"] = 262144;
    t["tie_word_embeddings"] = c.tie_word_embeddings;
    t["dtype"] = "bfloat16";
    if (!wrapper) {
      j = t;
      j["architectures"] = {c.architecture};
      return j;
    }
    j["architectures"] = {c.architecture};
    j["model_type"] = "qwen3_5_moe";
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    j["text_config"] = t;
    return j;
  }
  j["architectures"] = {c.architecture};
  j["hidden_size"] = c.hidden;
  j["num_hidden_layers"] = c.num_layers;
  j["vocab_size"] = c.vocab;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["num_experts_per_tok"] = c.top_k;
  j["moe_intermediate_size"] = c.moe_inter;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = "bfloat16";
  if (c.architecture == "Qwen3MoeForCausalLM") {
    j["model_type"] = "qwen3_moe";
    j["head_dim"] = c.head_dim;
    j["num_experts"] = c.num_experts;
    j["norm_topk_prob"] = c.routing == "softmax_topk_renorm";
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = ojson::array();
    j["intermediate_size"] = c.moe_inter * c.top_k;
    return j;
  }
  if (c.architecture == "DeepseekV3ForCausalLM") {
    FP4MOE_CHECK(c.moe_inter > 0 && c.shared_expert_inter % c.moe_inter == 0, c.name,
                 ": DeepSeek-V3 shared experts must be a multiple of moe_intermediate_size");
    j["model_type"] = "deepseek_v3";
    j["n_routed_experts"] = c.num_experts;
    j["n_shared_experts"] = c.shared_expert_inter / c.moe_inter;
    j["first_k_dense_replace"] = c.first_dense_layers;
    j["intermediate_size"] = c.dense_inter;
    j["moe_layer_freq"] = 1;
    j["n_group"] = c.n_group;
    j["topk_group"] = c.topk_group;
    j["routed_scaling_factor"] = c.routed_scaling_factor;
    j["scoring_func"] = "sigmoid";
    j["topk_method"] = "noaux_tc";
    j["norm_topk_prob"] = true;
    j["q_lora_rank"] = c.q_lora_rank;
    j["kv_lora_rank"] = c.kv_lora_rank;
    j["qk_nope_head_dim"] = c.qk_nope_head_dim;
    j["qk_rope_head_dim"] = c.qk_rope_head_dim;
    j["v_head_dim"] = c.v_head_dim;
    return j;
  }
  fail(c.name, ": no config.json writer for architecture '", c.architecture, "'");
}

QuantConfig parse_hf_quant_config(const json& doc, std::string_view label) {
  Fields top(doc, std::string(label));
  QuantConfig q;
  q.source = std::string(label);
  if (top.has("producer")) {
    Fields producer(top.raw("producer"), std::string(label) + " producer");
    q.producer_name = producer.string("name", "");
    q.producer_version = producer.string("version", "");
  }
  FP4MOE_CHECK(top.has("quantization"), label, ": missing the \"quantization\" object");
  Fields f(top.raw("quantization"), std::string(label) + " quantization");
  q.quant_algo = f.string("quant_algo");
  check_quant_algo(q, label);  // before group_size, so the algo error wins
  q.group_size = f.integer("group_size");
  check_quant_algo(q, label);
  q.kv_cache_quant_algo =
      kv_algo_from_json(f.has("kv_cache_quant_algo") ? f.raw("kv_cache_quant_algo") : json(), label);
  q.exclude_modules =
      string_list(f.has("exclude_modules") ? f.raw("exclude_modules") : json(), label, "exclude_modules");
  return q;
}

QuantConfig parse_quantization_config(const json& qc, std::string_view label) {
  Fields f(qc, std::string(label) + " quantization_config");
  QuantConfig q;
  q.source = std::string(label);
  const std::string method = f.string("quant_method");
  FP4MOE_CHECK(method == "modelopt", label, ": quantization_config.quant_method '", method,
               "' is not supported (fp4moe reads ModelOpt NVFP4 checkpoints; compressed-tensors stores reciprocal "
               "scales and is not read)");
  q.quant_algo = f.string("quant_algo");
  q.group_size = 16;
  check_quant_algo(q, label);
  if (f.has("group_size")) {
    q.group_size = f.integer("group_size");
  } else if (f.has("config_groups")) {
    for (const auto& [name, group] : f.raw("config_groups").items()) {
      if (group.contains("weights") && group["weights"].contains("group_size")) {
        FP4MOE_CHECK(group["weights"]["group_size"].is_number_integer(), label, ": config_groups.", name,
                     ".weights.group_size must be an integer");
        q.group_size = group["weights"]["group_size"].get<int64_t>();
      }
    }
  }
  check_quant_algo(q, label);
  if (f.has("kv_cache_quant_algo")) {
    q.kv_cache_quant_algo = kv_algo_from_json(f.raw("kv_cache_quant_algo"), label);
  } else if (f.has("kv_cache_scheme")) {
    Fields kv(f.raw("kv_cache_scheme"), std::string(label) + " kv_cache_scheme");
    const int64_t bits = kv.integer("num_bits");
    const std::string type = kv.string("type", "float");
    FP4MOE_CHECK(type == "float" && (bits == 8 || bits == 4), label, ": kv_cache_scheme ",
                 f.raw("kv_cache_scheme").dump(), " is not supported (8- or 4-bit float)");
    q.kv_cache_quant_algo = bits == 8 ? "FP8" : "NVFP4";
  }
  if (f.has("ignore"))
    q.exclude_modules = string_list(f.raw("ignore"), label, "ignore");
  else if (f.has("exclude_modules"))
    q.exclude_modules = string_list(f.raw("exclude_modules"), label, "exclude_modules");
  if (f.has("producer")) {
    Fields producer(f.raw("producer"), std::string(label) + " producer");
    q.producer_name = producer.string("name", "");
    q.producer_version = producer.string("version", "");
  }
  return q;
}

std::optional<QuantConfig> read_quant_config(const std::filesystem::path& dir) {
  const std::filesystem::path hf_quant = dir / "hf_quant_config.json";
  const std::filesystem::path config = dir / "config.json";
  const bool has_hf_quant = std::filesystem::exists(hf_quant);
  std::optional<QuantConfig> from_config;
  if (std::filesystem::exists(config)) {
    const json j = read_json_file(config);
    if (j.is_object() && j.contains("quantization_config") && !j["quantization_config"].is_null()) {
      try {
        from_config = parse_quantization_config(j["quantization_config"], config.string());
      } catch (const Error&) {
        // hf_quant_config.json is authoritative when present (as in vLLM); config.json's copy has
        // had several shapes across ModelOpt versions.
        if (!has_hf_quant) throw;
      }
    }
  }
  if (!has_hf_quant) return from_config;
  QuantConfig q = parse_hf_quant_config(read_json_file(hf_quant), hf_quant.string());
  if (from_config) {
    FP4MOE_CHECK(from_config->quant_algo == q.quant_algo && from_config->group_size == q.group_size, hf_quant.string(),
                 ": quant_algo ", q.quant_algo, " / group_size ", q.group_size, " disagree with ", config.string(),
                 " (", from_config->quant_algo, " / ", from_config->group_size, ")");
  }
  return q;
}

ojson hf_quant_config_json(const QuantConfig& q) {
  ojson j;
  j["producer"] = {{"name", q.producer_name}, {"version", q.producer_version}};
  ojson quant;
  quant["quant_algo"] = q.quant_algo;
  quant["kv_cache_quant_algo"] = q.kv_cache_quant_algo.empty() ? ojson() : ojson(q.kv_cache_quant_algo);
  quant["group_size"] = q.group_size;
  quant["exclude_modules"] = q.exclude_modules;
  j["quantization"] = quant;
  return j;
}

ojson quantization_config_json(const QuantConfig& q) {
  ojson j;
  ojson weights = {{"dynamic", false}, {"num_bits", 4}, {"type", "float"}, {"group_size", q.group_size}};
  ojson group;
  if (q.has_input_scale()) group["input_activations"] = weights;
  group["weights"] = weights;
  group["targets"] = {"Linear"};
  j["config_groups"] = {{"group_0", group}};
  j["ignore"] = q.exclude_modules;
  j["quant_algo"] = q.quant_algo;
  if (q.kv_cache_quant_algo.empty()) {
    j["kv_cache_scheme"] = nullptr;
  } else {
    j["kv_cache_scheme"] = {
        {"dynamic", false}, {"num_bits", q.kv_cache_quant_algo == "FP8" ? 8 : 4}, {"type", "float"}};
  }
  j["producer"] = {{"name", q.producer_name}, {"version", q.producer_version}};
  j["quant_method"] = "modelopt";
  return j;
}

bool module_excluded(const QuantConfig& quant, std::string_view module) {
  const std::string m(module);
  for (const std::string& entry : quant.exclude_modules) {
    if (entry == m || ::fnmatch(entry.c_str(), m.c_str(), 0) == 0) return true;
  }
  return false;
}

}  // namespace fp4moe
