// config.json / hf_quant_config.json parsing, the config writer, presets and the checkpoint layout
// (tensor shapes checked against the numbers in models-and-anchors.md A1).
#include <gtest/gtest.h>

#include "common/error.h"
#include "io/checkpoint_layout.h"
#include "io/hf_config.h"
#include "io/io_test_util.h"
#include "io/presets.h"

namespace fp4moe {
namespace {

using json = nlohmann::json;

void expect_same_model(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.architecture, b.architecture);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.full_attention_interval, b.full_attention_interval);
  EXPECT_EQ(a.linear_num_key_heads, b.linear_num_key_heads);
  EXPECT_EQ(a.linear_num_value_heads, b.linear_num_value_heads);
  EXPECT_EQ(a.linear_key_head_dim, b.linear_key_head_dim);
  EXPECT_EQ(a.linear_value_head_dim, b.linear_value_head_dim);
  EXPECT_EQ(a.linear_conv_kernel_dim, b.linear_conv_kernel_dim);
  EXPECT_EQ(a.num_experts, b.num_experts);
  EXPECT_EQ(a.top_k, b.top_k);
  EXPECT_EQ(a.moe_inter, b.moe_inter);
  EXPECT_EQ(a.shared_expert_inter, b.shared_expert_inter);
  EXPECT_EQ(a.routing, b.routing);
  EXPECT_EQ(a.n_group, b.n_group);
  EXPECT_EQ(a.topk_group, b.topk_group);
  EXPECT_EQ(a.routed_scaling_factor, b.routed_scaling_factor);
  EXPECT_EQ(a.first_dense_layers, b.first_dense_layers);
  EXPECT_EQ(a.dense_inter, b.dense_inter);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.partial_rotary_factor, b.partial_rotary_factor);
  EXPECT_EQ(a.attn_output_gate, b.attn_output_gate);
  EXPECT_EQ(a.q_lora_rank, b.q_lora_rank);
  EXPECT_EQ(a.kv_lora_rank, b.kv_lora_rank);
  EXPECT_EQ(a.qk_nope_head_dim, b.qk_nope_head_dim);
  EXPECT_EQ(a.qk_rope_head_dim, b.qk_rope_head_dim);
  EXPECT_EQ(a.v_head_dim, b.v_head_dim);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HfConfig, EveryPresetRoundTripsThroughConfigJson) {
  for (const std::string& name : preset_names()) {
    SCOPED_TRACE(name);
    const ModelConfig preset = model_preset(name);
    const json doc = json::parse(hf_config_json(preset).dump());
    const ModelConfig parsed = parse_hf_config(doc, "config.json");
    expect_same_model(parsed, preset);
  }
}

TEST(HfConfig, Qwen35NestedTextConfig) {
  // The shape of Qwen/Qwen3.5-397B-A17B's config.json (values from models-and-anchors.md A1),
  // RoPE only in rope_parameters as transformers v5 writes it.
  const json doc = json::parse(R"({
    "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
    "tie_word_embeddings": false, "vision_config": {"depth": 27},
    "text_config": {"model_type": "qwen3_5_moe_text", "hidden_size": 4096, "num_hidden_layers": 60,
      "vocab_size": 248320, "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 256,
      "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 64,
      "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
      "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 1024,
      "shared_expert_intermediate_size": 1024, "rms_norm_eps": 1e-06, "attn_output_gate": true,
      "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                          "mrope_interleaved": true, "mrope_section": [11, 11, 10]}}})");
  const ModelConfig c = parse_hf_config(doc, "config.json");
  expect_same_model(c, model_preset("qwen3.5-397b-a17b"));
  EXPECT_EQ(c.name, "qwen3_5_moe");
  // The writer's mrope_section for head_dim 256 / factor 0.25 is the real one.
  const json written = json::parse(hf_config_json(c).dump());
  EXPECT_EQ(written["text_config"]["rope_parameters"]["mrope_section"], json::parse("[11, 11, 10]"));
  EXPECT_EQ(written["text_config"]["layer_types"][3], "full_attention");
  EXPECT_EQ(written["text_config"]["layer_types"][2], "linear_attention");
}

TEST(HfConfig, Qwen3MoeFlatAndRouting) {
  json doc = json::parse(R"({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "hidden_size": 2048, "num_hidden_layers": 48, "vocab_size": 151936, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
    "moe_intermediate_size": 768, "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "rope_theta": 1000000.0, "rms_norm_eps": 1e-06})");
  expect_same_model(parse_hf_config(doc, "config.json"), model_preset("qwen3-30b-a3b"));
  doc["norm_topk_prob"] = false;
  EXPECT_EQ(parse_hf_config(doc, "config.json").routing, "softmax_topk");
  doc["mlp_only_layers"] = json::parse("[0, 1]");
  EXPECT_NE(error_of([&] { parse_hf_config(doc, "c.json"); }).find("mlp_only_layers"), std::string::npos);
}

TEST(HfConfig, DeepSeekV3Routing) {
  json doc = json::parse(R"({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "hidden_size": 7168, "num_hidden_layers": 61, "vocab_size": 129280, "num_attention_heads": 128,
    "num_key_value_heads": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
    "moe_layer_freq": 1, "n_group": 8, "topk_group": 4, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
    "topk_method": "noaux_tc", "norm_topk_prob": true, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "rope_theta": 10000, "rms_norm_eps": 1e-06})");
  const ModelConfig c = parse_hf_config(doc, "config.json");
  expect_same_model(c, model_preset("deepseek-v3"));
  EXPECT_EQ(c.routing, "sigmoid_grouped_topk");
  doc["scoring_func"] = "softmax";
  const std::string e = error_of([&] { parse_hf_config(doc, "dir/config.json"); });
  EXPECT_NE(e.find("dir/config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("scoring_func 'softmax'"), std::string::npos) << e;
}

TEST(HfConfig, ClearErrors) {
  std::string e = error_of([] { parse_hf_config(json::parse(R"({"model_type": "llama"})"), "x/config.json"); });
  EXPECT_NE(e.find("x/config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("model_type 'llama' is not supported"), std::string::npos) << e;
  json doc = json::parse(hf_config_json(model_preset("qwen3-30b-a3b")).dump());
  doc.erase("moe_intermediate_size");
  e = error_of([&] { parse_hf_config(doc, "c.json"); });
  EXPECT_NE(e.find("missing field \"moe_intermediate_size\""), std::string::npos) << e;
  doc = json::parse(hf_config_json(model_preset("qwen3-30b-a3b")).dump());
  doc["hidden_size"] = "big";
  e = error_of([&] { parse_hf_config(doc, "c.json"); });
  EXPECT_NE(e.find("\"hidden_size\" must be an integer"), std::string::npos) << e;
  doc = json::parse(hf_config_json(model_preset("tiny")).dump());
  doc["text_config"].erase("full_attention_interval");  // derived from layer_types
  EXPECT_EQ(parse_hf_config(doc, "c.json").full_attention_interval, 4);
  doc["text_config"].erase("layer_types");
  e = error_of([&] { parse_hf_config(doc, "c.json"); });
  EXPECT_NE(e.find("needs full_attention_interval or layer_types"), std::string::npos) << e;
  doc = json::parse(hf_config_json(model_preset("tiny")).dump());
  doc["text_config"]["layer_types"][0] = "full_attention";  // breaks the every-4th rule
  e = error_of([&] { parse_hf_config(doc, "c.json"); });
  EXPECT_NE(e.find("layer_types[0]"), std::string::npos) << e;
}

// Sizes outside fp4moe's bounds are refused with the field and the file named, before anything is sized
// from them (a claimed 2^31 experts once had inspect build its expected tensor list until memory ran out).
TEST(HfConfig, AbsurdSizesAreClearErrors) {
  const json qwen3 = json::parse(hf_config_json(model_preset("qwen3-30b-a3b")).dump());
  const json hybrid = json::parse(hf_config_json(model_preset("tiny")).dump());
  const json deepseek = json::parse(hf_config_json(model_preset("deepseek-v3")).dump());
  struct Case {
    const json* base;
    const char* field;
    json value;
    const char* expected;
  };
  const Case cases[] = {
      {&qwen3, "num_experts", int64_t{1} << 31, "num experts is 2147483648, outside [1, 4096]"},
      {&qwen3, "num_hidden_layers", int64_t{1} << 40, "num_hidden_layers is 1099511627776, outside [1, 1024]"},
      {&qwen3, "hidden_size", int64_t{1} << 40, "hidden_size is 1099511627776, outside [1, 65536]"},
      {&qwen3, "vocab_size", int64_t{1} << 62, "vocab_size is 4611686018427387904, outside [1, 4194304]"},
      {&qwen3, "num_key_value_heads", 0, "num_key_value_heads is 0, outside [1, 1024]"},
      {&qwen3, "num_key_value_heads", 3, "num_attention_heads 32 is not a multiple of num_key_value_heads 3"},
      {&qwen3, "num_attention_heads", -4, "num_attention_heads is -4, outside [1, 1024]"},
      {&qwen3, "num_experts_per_tok", 129, "num_experts_per_tok is 129, outside [1, 128]"},
      {&qwen3, "rms_norm_eps", -1.0, "rms_norm_eps must be a finite number > 0, got -1"},
      {&hybrid, "linear_conv_kernel_dim", 0, "linear_conv_kernel_dim is 0, outside [1, 1024]"},
      {&hybrid, "linear_num_key_heads", 0, "linear_num_key_heads is 0, outside [1, 1024]"},
      {&hybrid, "linear_num_value_heads", 3, "linear_num_value_heads 3 is not a multiple of linear_num_key_heads 2"},
      {&hybrid, "head_dim", 0, "head_dim is 0, outside [1, 65536]"},
      {&deepseek, "n_group", 7, "n_group 7 does not divide the 256 experts"},
      {&deepseek, "topk_group", 9, "topk_group is 9, outside [1, 8]"},
      {&deepseek, "kv_lora_rank", 0, "kv_lora_rank is 0, outside [1, 65536]"},
      {&deepseek, "first_k_dense_replace", 61, "first_k_dense_replace is 61, outside [0, 60]"},
      {&deepseek, "routed_scaling_factor", 0.0, "routed_scaling_factor must be a finite number > 0, got 0"},
  };
  for (const Case& c : cases) {
    json doc = *c.base;
    json& fields = doc.contains("text_config") ? doc["text_config"] : doc;
    ASSERT_TRUE(fields.contains(c.field)) << c.field;
    fields[c.field] = c.value;
    const std::string e = error_of([&] { parse_hf_config(doc, "dir/config.json"); });
    EXPECT_NE(e.find("dir/config.json"), std::string::npos) << c.field << ": " << e;
    EXPECT_NE(e.find(c.expected), std::string::npos) << c.field << ": " << e;
  }
  // Each size within its bound, but too many expert instances together.
  json doc = qwen3;
  doc["num_hidden_layers"] = 1024;
  doc["num_experts"] = 4096;
  const std::string e = error_of([&] { parse_hf_config(doc, "c.json"); });
  EXPECT_NE(e.find("1024 MoE layers of 4096 experts are 4194304 expert instances, more than fp4moe's 262144"),
            std::string::npos)
      << e;
}

TEST(QuantConfig, HfQuantConfigJson) {
  const json doc = json::parse(R"({"producer": {"name": "modelopt", "version": "0.37.0"},
    "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
                     "exclude_modules": ["lm_head", "model.layers.*.mlp.gate", "model.visual*"]}})");
  const QuantConfig q = parse_hf_quant_config(doc, "hf_quant_config.json");
  EXPECT_EQ(q.quant_algo, "NVFP4");
  EXPECT_TRUE(q.has_input_scale());
  EXPECT_EQ(q.kv_cache_quant_algo, "FP8");
  EXPECT_EQ(q.producer_version, "0.37.0");
  ASSERT_EQ(q.exclude_modules.size(), 3u);
  EXPECT_TRUE(module_excluded(q, "lm_head"));
  EXPECT_TRUE(module_excluded(q, "model.layers.7.mlp.gate"));
  EXPECT_TRUE(module_excluded(q, "model.visual.blocks.0.attn.qkv"));
  EXPECT_FALSE(module_excluded(q, "model.layers.7.mlp.experts.3.gate_proj"));
  // Writer and parser agree.
  const QuantConfig back = parse_hf_quant_config(json::parse(hf_quant_config_json(q).dump()), "x");
  EXPECT_EQ(back.exclude_modules, q.exclude_modules);
  EXPECT_EQ(back.kv_cache_quant_algo, "FP8");
}

TEST(QuantConfig, ConfigJsonQuantizationConfig) {
  // The modelopt quantization_config of config.json (nvfp4-format.md section 5.3).
  const json qc = json::parse(R"({"config_groups": {"group_0": {
      "input_activations": {"dynamic": false, "num_bits": 4, "type": "float", "group_size": 16},
      "weights": {"dynamic": false, "num_bits": 4, "type": "float", "group_size": 16}, "targets": ["Linear"]}},
    "ignore": ["lm_head", "model.language_model.layers.*.linear_attn*", "mtp*"], "quant_algo": "NVFP4",
    "kv_cache_scheme": {"dynamic": false, "num_bits": 8, "type": "float"},
    "producer": {"name": "modelopt", "version": "0.39.0"}, "quant_method": "modelopt"})");
  const QuantConfig q = parse_quantization_config(qc, "config.json");
  EXPECT_EQ(q.quant_algo, "NVFP4");
  EXPECT_EQ(q.group_size, 16);
  EXPECT_EQ(q.kv_cache_quant_algo, "FP8");
  EXPECT_TRUE(module_excluded(q, "model.language_model.layers.0.linear_attn.in_proj_qkv"));
  EXPECT_TRUE(module_excluded(q, "mtp.layers.0.mlp.experts.1.up_proj"));
  const QuantConfig back = parse_quantization_config(json::parse(quantization_config_json(q).dump()), "x");
  EXPECT_EQ(back.exclude_modules, q.exclude_modules);
  EXPECT_EQ(back.kv_cache_quant_algo, "FP8");
}

TEST(QuantConfig, UnsupportedIsAClearError) {
  json doc = json::parse(R"({"quantization": {"quant_algo": "FP8", "group_size": 16, "kv_cache_quant_algo": null,
                                              "exclude_modules": []}})");
  std::string e = error_of([&] { parse_hf_quant_config(doc, "m/hf_quant_config.json"); });
  EXPECT_NE(e.find("m/hf_quant_config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("quant_algo 'FP8' is not supported"), std::string::npos) << e;
  doc["quantization"]["quant_algo"] = "MIXED_PRECISION";
  EXPECT_NE(error_of([&] { parse_hf_quant_config(doc, "q.json"); }).find("'MIXED_PRECISION'"), std::string::npos);
  doc["quantization"]["quant_algo"] = "W4A16_NVFP4";
  EXPECT_FALSE(parse_hf_quant_config(doc, "q.json").has_input_scale());
  doc["quantization"]["group_size"] = 32;
  EXPECT_NE(error_of([&] { parse_hf_quant_config(doc, "q.json"); }).find("group_size 32"), std::string::npos);
  doc["quantization"]["group_size"] = 16;
  doc["quantization"]["kv_cache_quant_algo"] = "INT8";
  EXPECT_NE(error_of([&] { parse_hf_quant_config(doc, "q.json"); }).find("kv_cache_quant_algo 'INT8'"),
            std::string::npos);
  const json ct = json::parse(R"({"quant_method": "compressed-tensors", "quant_algo": "NVFP4"})");
  EXPECT_NE(error_of([&] { parse_quantization_config(ct, "config.json"); }).find("compressed-tensors"),
            std::string::npos);
}

TEST(QuantConfig, ReadFromDirectory) {
  test::ScratchDir dir;
  EXPECT_FALSE(read_quant_config(dir.path()).has_value());
  QuantConfig q;
  q.quant_algo = "NVFP4";
  q.exclude_modules = {"lm_head"};
  nlohmann::ordered_json config = hf_config_json(model_preset("tiny"));
  config["quantization_config"] = quantization_config_json(q);
  write_json_file(dir / "config.json", config);
  ASSERT_TRUE(read_quant_config(dir.path()).has_value());  // from config.json alone
  EXPECT_EQ(read_quant_config(dir.path())->source, (dir / "config.json").string());
  write_json_file(dir / "hf_quant_config.json", hf_quant_config_json(q));
  EXPECT_EQ(read_quant_config(dir.path())->source, (dir / "hf_quant_config.json").string());
  q.quant_algo = "W4A16_NVFP4";
  write_json_file(dir / "hf_quant_config.json", hf_quant_config_json(q));
  EXPECT_NE(error_of([&] { read_quant_config(dir.path()); }).find("disagree"), std::string::npos);
  // An older/odd quantization_config shape in config.json does not matter next to hf_quant_config.json.
  write_json_file(dir / "hf_quant_config.json", hf_quant_config_json(q));
  config["quantization_config"] = {{"quant_method", "modelopt"}, {"quantization", {{"quant_algo", "NVFP4"}}}};
  write_json_file(dir / "config.json", config);
  EXPECT_EQ(read_quant_config(dir.path())->quant_algo, "W4A16_NVFP4");
  std::filesystem::remove(dir / "hf_quant_config.json");
  EXPECT_NE(error_of([&] { read_quant_config(dir.path()); }).find("missing field \"quant_algo\""), std::string::npos);
  test::write_text(dir / "hf_quant_config.json", "{not json");
  EXPECT_NE(error_of([&] { read_quant_config(dir.path()); }).find("not valid JSON"), std::string::npos);
}

TEST(Presets, WithLayersAndUnknownName) {
  EXPECT_EQ(with_layers(model_preset("qwen3.5-397b-a17b"), 2).num_layers, 2);
  EXPECT_EQ(with_layers(model_preset("tiny"), 4).num_layers, 4);
  // More layers than the model has is an error naming both counts, not a silent clamp.
  const std::string too_many = error_of([] { with_layers(model_preset("tiny"), 100); });
  EXPECT_NE(too_many.find("--layers 100: tiny has 4 layers"), std::string::npos) << too_many;
  EXPECT_EQ(with_layers(model_preset("deepseek-v3"), 2).first_dense_layers, 2);
  EXPECT_THROW(model_preset("gpt-5"), Error);
  EXPECT_THROW(with_layers(model_preset("tiny"), 0), Error);
}

std::map<std::string, std::vector<int64_t>> shapes(const std::vector<TensorSpec>& specs) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const TensorSpec& s : specs) out[s.name] = s.shape;
  return out;
}

TEST(CheckpointLayout, Qwen35_397bShapesMatchTheModelCard) {
  // models-and-anchors.md A1: per-layer tensor shapes of the 397B and its NVFP4 expert layout.
  const ModelConfig c = model_preset("qwen3.5-397b-a17b");
  const std::string p = "model.language_model.layers.";
  auto gdn = shapes(layer_dense_tensor_specs(c, 0));
  EXPECT_EQ(gdn[p + "0.linear_attn.in_proj_qkv.weight"], (std::vector<int64_t>{12288, 4096}));
  EXPECT_EQ(gdn[p + "0.linear_attn.in_proj_z.weight"], (std::vector<int64_t>{8192, 4096}));
  EXPECT_EQ(gdn[p + "0.linear_attn.in_proj_a.weight"], (std::vector<int64_t>{64, 4096}));
  EXPECT_EQ(gdn[p + "0.linear_attn.in_proj_b.weight"], (std::vector<int64_t>{64, 4096}));
  EXPECT_EQ(gdn[p + "0.linear_attn.out_proj.weight"], (std::vector<int64_t>{4096, 8192}));
  EXPECT_EQ(gdn[p + "0.linear_attn.conv1d.weight"], (std::vector<int64_t>{12288, 1, 4}));
  EXPECT_EQ(gdn[p + "0.mlp.gate.weight"], (std::vector<int64_t>{512, 4096}));
  EXPECT_EQ(gdn[p + "0.mlp.shared_expert_gate.weight"], (std::vector<int64_t>{1, 4096}));
  EXPECT_EQ(gdn[p + "0.mlp.shared_expert.down_proj.weight"], (std::vector<int64_t>{4096, 1024}));
  EXPECT_EQ(gdn.count(p + "0.self_attn.q_proj.weight"), 0u);
  auto full = shapes(layer_dense_tensor_specs(c, 3));  // layers 3, 7, ... are full attention
  EXPECT_EQ(full[p + "3.self_attn.q_proj.weight"], (std::vector<int64_t>{16384, 4096}));
  EXPECT_EQ(full[p + "3.self_attn.k_proj.weight"], (std::vector<int64_t>{512, 4096}));
  EXPECT_EQ(full[p + "3.self_attn.v_proj.weight"], (std::vector<int64_t>{512, 4096}));
  EXPECT_EQ(full[p + "3.self_attn.o_proj.weight"], (std::vector<int64_t>{4096, 8192}));
  auto expert = shapes(expert_tensor_specs(c, 5, 511, ExpertFormat::kNvfp4));
  const std::string e = p + "5.mlp.experts.511.";
  EXPECT_EQ(expert[e + "gate_proj.weight"], (std::vector<int64_t>{1024, 2048}));
  EXPECT_EQ(expert[e + "gate_proj.weight_scale"], (std::vector<int64_t>{1024, 256}));
  EXPECT_EQ(expert[e + "down_proj.weight"], (std::vector<int64_t>{4096, 512}));
  EXPECT_EQ(expert[e + "down_proj.weight_scale"], (std::vector<int64_t>{4096, 64}));
  EXPECT_EQ(expert[e + "up_proj.weight_scale_2"], std::vector<int64_t>{});
  EXPECT_EQ(expert[e + "up_proj.input_scale"], std::vector<int64_t>{});
  EXPECT_EQ(expert_tensor_specs(c, 0, 0, ExpertFormat::kNvfp4NoInputScale).size(), 9u);
  // Size check from A1: about 237 GB for the whole NVFP4 checkpoint (386.5 B routed parameters at
  // 0.5625 B/param + ~10 B BF16 parameters); the MTP head and vision tower are not written here.
  uint64_t bytes = 0;
  for (const TensorSpec& s : model_tensor_specs(c, ExpertFormat::kNvfp4)) bytes += s.nbytes();
  EXPECT_GT(bytes, 225e9);
  EXPECT_LT(bytes, 240e9);
}

TEST(CheckpointLayout, PrefixesAndDenseLayers) {
  EXPECT_EQ(expert_prefix(model_preset("qwen3-30b-a3b"), 2, 3), "model.layers.2.mlp.experts.3.");
  EXPECT_EQ(expert_prefix(model_preset("tiny"), 0, 1), "model.language_model.layers.0.mlp.experts.1.");
  const ModelConfig ds = with_layers(model_preset("deepseek-v3"), 4);
  EXPECT_FALSE(is_moe_layer(ds, 2));
  EXPECT_TRUE(is_moe_layer(ds, 3));
  auto dense = shapes(layer_dense_tensor_specs(ds, 0));
  EXPECT_EQ(dense["model.layers.0.mlp.gate_proj.weight"], (std::vector<int64_t>{18432, 7168}));
  EXPECT_EQ(dense["model.layers.0.self_attn.kv_b_proj.weight"], (std::vector<int64_t>{128 * 256, 512}));
  auto moe = shapes(layer_dense_tensor_specs(ds, 3));
  EXPECT_EQ(moe["model.layers.3.mlp.gate.e_score_correction_bias"], (std::vector<int64_t>{256}));
  EXPECT_EQ(moe["model.layers.3.mlp.shared_experts.up_proj.weight"], (std::vector<int64_t>{2048, 7168}));
  EXPECT_EQ(
      summarize_excluded_modules({"model.layers.3.self_attn.q_proj.weight", "model.layers.12.self_attn.q_proj.weight",
                                  "lm_head.weight", "mtp.layers.0.mlp.experts.7.up_proj.weight"}),
      (std::vector<std::string>{"lm_head", "model.layers.*.self_attn.q_proj", "mtp.layers.*.mlp.experts.*.up_proj"}));
  // A wildcard that would cover a quantized module is replaced by the exact names.
  EXPECT_EQ(
      summarize_excluded_modules({"model.layers.0.mlp.experts.12.up_proj.weight",
                                  "model.layers.1.mlp.experts.13.up_proj.weight", "model.layers.0.mlp.gate.weight"},
                                 {"model.layers.0.mlp.experts.1.up_proj"}),
      (std::vector<std::string>{"model.layers.*.mlp.gate", "model.layers.0.mlp.experts.12.up_proj",
                                "model.layers.1.mlp.experts.13.up_proj"}));
}

}  // namespace
}  // namespace fp4moe
