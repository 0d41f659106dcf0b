// Synthetic checkpoints, the MoE layer loader, the quantizer and inspect, end to end on the tiny
// preset: determinism, round trips against format/nvfp4.h, and inspect's inconsistency checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <set>

#include "common/error.h"
#include "format/bf16.h"
#include "format/fp_codes.h"
#include "format/nvfp4.h"
#include "io/checkpoint_layout.h"
#include "io/hf_config.h"
#include "io/inspect.h"
#include "io/io_test_util.h"
#include "io/moe_loader.h"
#include "io/quantize.h"
#include "io/synth.h"

namespace fp4moe {
namespace {

using test::ScratchDir;

SynthOptions quiet_synth(uint64_t seed, uint64_t shard = 1'000'000, bool quantized = true) {
  SynthOptions o;
  o.seed = seed;
  o.max_shard_bytes = shard;
  o.quantized = quantized;
  o.progress = false;
  return o;
}

std::map<std::string, std::vector<uint8_t>> all_tensor_bytes(const std::filesystem::path& dir) {
  SafetensorsCheckpoint ckpt(dir);
  std::map<std::string, std::vector<uint8_t>> out;
  for (const std::string& n : ckpt.names()) {
    const TensorView v = ckpt.tensor(n);
    out[n].assign(v.data, v.data + v.info->nbytes());
  }
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains_line(const std::vector<std::string>& lines, const std::string& part) {
  for (const std::string& l : lines) {
    if (l.find(part) != std::string::npos) return true;
  }
  return false;
}

TEST(Synth, DeterministicAndIndependentOfShardSize) {
  ScratchDir dir;
  const ModelConfig tiny = model_preset("tiny");
  const SynthResult r = synth_checkpoint(tiny, dir / "a", quiet_synth(7));
  synth_checkpoint(tiny, dir / "b", quiet_synth(7));
  synth_checkpoint(tiny, dir / "c", quiet_synth(7, 1ull << 40));  // one shard
  synth_checkpoint(tiny, dir / "d", quiet_synth(8));
  EXPECT_GT(r.shards, 1);
  EXPECT_EQ(r.tensors, static_cast<int64_t>(model_tensor_specs(tiny, ExpertFormat::kNvfp4).size()));
  for (const auto& entry : std::filesystem::directory_iterator(dir / "a")) {
    const std::string file = entry.path().filename().string();
    EXPECT_EQ(test::read_file(entry.path()), test::read_file(dir / "b" / file)) << file << " differs between runs";
  }
  const auto a = all_tensor_bytes(dir / "a"), c = all_tensor_bytes(dir / "c"), d = all_tensor_bytes(dir / "d");
  EXPECT_EQ(a, c);  // same tensors whatever the sharding
  ASSERT_EQ(a.size(), d.size());
  int differ = 0;
  for (const auto& [name, bytes] : a) differ += bytes != d.at(name);
  EXPECT_GT(differ, static_cast<int>(a.size()) * 9 / 10);  // another seed changes (nearly) everything
}

TEST(Synth, ConfigsAndLayout) {
  ScratchDir dir;
  const ModelConfig tiny = with_layers(model_preset("tiny"), 2);
  synth_checkpoint(tiny, dir.path(), quiet_synth(1));
  const ModelConfig parsed = read_hf_config(dir / "config.json");
  EXPECT_EQ(parsed.num_layers, 2);
  EXPECT_EQ(parsed.num_experts, tiny.num_experts);
  const std::optional<QuantConfig> quant = read_quant_config(dir.path());
  ASSERT_TRUE(quant.has_value());
  EXPECT_EQ(quant->quant_algo, "NVFP4");
  EXPECT_EQ(quant->source, (dir / "hf_quant_config.json").string());
  EXPECT_TRUE(module_excluded(*quant, "lm_head"));
  EXPECT_TRUE(module_excluded(*quant, "model.language_model.layers.1.mlp.gate"));
  EXPECT_FALSE(module_excluded(*quant, "model.language_model.layers.1.mlp.experts.3.down_proj"));
  SafetensorsCheckpoint ckpt(dir.path());
  const TensorInfo* w = ckpt.find("model.language_model.layers.1.mlp.experts.15.down_proj.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, Dtype::kU8);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(ckpt.find("model.language_model.layers.1.mlp.experts.15.down_proj.weight_scale")->dtype, Dtype::kF8E4M3);
  EXPECT_EQ(ckpt.find("model.language_model.layers.1.mlp.shared_expert.up_proj.weight")->dtype, Dtype::kBF16);
  EXPECT_EQ(ckpt.find("model.language_model.layers.1.mlp.experts.16.down_proj.weight"), nullptr);
  const InspectReport report = inspect_checkpoint(dir.path(), {true, false});
  EXPECT_TRUE(report.problems.empty()) << report.problems.front();
  EXPECT_TRUE(contains_line(report.summary, "NVFP4 linears: 96"));
}

TEST(Synth, LoaderBuildsConsistentMoeWeights) {
  ScratchDir dir;
  const ModelConfig tiny = model_preset("tiny");
  synth_checkpoint(tiny, dir.path(), quiet_synth(3));
  SafetensorsCheckpoint ckpt(dir.path());
  const QuantConfig quant = *read_quant_config(dir.path());
  std::set<uint8_t> scale_codes;
  for (int64_t layer = 0; layer < tiny.num_layers; ++layer) {
    const MoeWeights w = load_moe_layer(ckpt, tiny, quant, layer);
    EXPECT_EQ(w.num_experts, tiny.num_experts);
    for (int64_t e = 0; e < w.num_experts; ++e) {
      const auto ue = static_cast<size_t>(e);
      EXPECT_EQ(w.gate_scale2[ue], w.up_scale2[ue]);  // ModelOpt convention, kept by synth
      const std::string p = expert_prefix(tiny, layer, e);
      EXPECT_EQ(w.w13_input_scale[ue], std::max(read_f32_scalar(ckpt.tensor(p + "gate_proj.input_scale")),
                                                read_f32_scalar(ckpt.tensor(p + "up_proj.input_scale"))));
      EXPECT_EQ(w.down_scale2[ue], read_f32_scalar(ckpt.tensor(p + "down_proj.weight_scale_2")));
      // w13 = [gate; up]: up's first packed row sits right after gate's rows.
      const TensorView up = ckpt.tensor(p + "up_proj.weight");
      EXPECT_EQ(std::memcmp(w.up(e).packed, up.data, up.info->nbytes()), 0);
      const TensorView down_scales = ckpt.tensor(p + "down_proj.weight_scale");
      EXPECT_EQ(std::memcmp(w.down(e).scales, down_scales.data, down_scales.info->nbytes()), 0);
    }
    scale_codes.insert(w.w13_scales.begin(), w.w13_scales.end());
  }
  // Block scales span a realistic range (log-normal block magnitudes), not one value.
  EXPECT_GT(scale_codes.size(), 20u);
  EXPECT_THROW(load_moe_layer(ckpt, tiny, quant, tiny.num_layers), Error);
  // The same through the --model entry point.
  const Nvfp4Checkpoint opened = open_nvfp4_checkpoint(dir.path());
  EXPECT_EQ(opened.moe_layers(), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(opened.quant.quant_algo, "NVFP4");
  const MoeWeights w2 = opened.load_moe_layer(2);
  EXPECT_EQ(w2.w2_packed, load_moe_layer(ckpt, tiny, quant, 2).w2_packed);
  std::filesystem::remove(dir / "hf_quant_config.json");
  nlohmann::json config = read_json_file(dir / "config.json");
  config.erase("quantization_config");
  write_json_file(dir / "config.json", nlohmann::ordered_json::parse(config.dump()));
  EXPECT_NE(error_of([&] { open_nvfp4_checkpoint(dir.path()); }).find("not an NVFP4 checkpoint"), std::string::npos);
}

// Each architecture's layout (Qwen3-MoE flat, Qwen3-Next fused DeltaNet projections, DeepSeek-V3
// with MLA, dense first layers, shared experts and the F32 correction bias) at toy size: synth,
// config round trip, inspect and the loader agree, in NVFP4 and BF16.
TEST(Synth, EveryArchitectureAtToySize) {
  for (const char* preset : {"qwen3-30b-a3b", "qwen3-next-80b-a3b", "deepseek-v3"}) {
    SCOPED_TRACE(preset);
    ModelConfig c = with_layers(model_preset(preset), 3);
    c.hidden = 64;
    c.vocab = 96;
    c.num_heads = 2;
    c.num_kv_heads = c.kv_lora_rank > 0 ? 2 : 1;
    c.num_experts = 4;
    c.top_k = 2;
    c.moe_inter = 32;
    if (c.shared_expert_inter) c.shared_expert_inter = 32;
    if (c.full_attention_interval) {
      c.head_dim = 16;
      c.linear_num_key_heads = 1;
      c.linear_num_value_heads = 2;
      c.linear_key_head_dim = c.linear_value_head_dim = 16;
    }
    if (c.kv_lora_rank > 0) {
      c.first_dense_layers = 1;
      c.dense_inter = 48;
      c.n_group = 2;
      c.topk_group = 1;
      c.q_lora_rank = 24;
      c.kv_lora_rank = 16;
      c.qk_nope_head_dim = c.v_head_dim = 8;
      c.qk_rope_head_dim = 4;
      c.head_dim = 8;
    }
    ScratchDir dir;
    synth_checkpoint(c, dir / "q", quiet_synth(9, 1 << 16));
    synth_checkpoint(c, dir / "bf16", quiet_synth(9, 1 << 16, false));
    const ModelConfig parsed = read_hf_config(dir / "q" / "config.json");
    EXPECT_EQ(parsed.architecture, c.architecture);
    EXPECT_EQ(parsed.num_layers, 3);
    EXPECT_EQ(parsed.first_dense_layers, c.first_dense_layers);
    EXPECT_EQ(parsed.kv_lora_rank, c.kv_lora_rank);
    for (const char* sub : {"q", "bf16"}) {
      const InspectReport report = inspect_checkpoint(dir / sub, {true, false});
      EXPECT_TRUE(report.problems.empty()) << sub << ": " << report.problems.front();
      EXPECT_TRUE(report.warnings.empty()) << sub << ": " << report.warnings.front();
    }
    SafetensorsCheckpoint ckpt(dir / "q");
    const QuantConfig quant = *read_quant_config(dir / "q");
    EXPECT_EQ(load_moe_layer(ckpt, parsed, quant, 2).num_experts, 4);
    if (c.first_dense_layers > 0) {
      EXPECT_THROW(load_moe_layer(ckpt, parsed, quant, 0), Error);
      EXPECT_EQ(ckpt.find("model.layers.2.mlp.gate.e_score_correction_bias")->dtype, Dtype::kF32);
      EXPECT_TRUE(ckpt.contains("model.layers.0.mlp.down_proj.weight"));
      EXPECT_TRUE(ckpt.contains("model.layers.1.self_attn.kv_a_proj_with_mqa.weight"));
    }
    // The BF16 variant quantizes to the same tensor set as the synthetic NVFP4 one.
    QuantizeOptions options;
    options.progress = false;
    quantize_checkpoint(dir / "bf16", dir / "bf16q", options);
    EXPECT_EQ(SafetensorsCheckpoint(dir / "bf16q").names(), ckpt.names());
  }
}

TEST(Quantize, MatchesFormatQuantizationOfTheOriginal) {
  ScratchDir dir;
  const ModelConfig tiny = with_layers(model_preset("tiny"), 2);
  synth_checkpoint(tiny, dir / "bf16", quiet_synth(5, 1'000'000, /*quantized=*/false));
  EXPECT_FALSE(read_quant_config(dir / "bf16").has_value());
  QuantizeOptions options;
  options.progress = false;
  options.max_shard_bytes = 500'000;
  const QuantizeResult r = quantize_checkpoint(dir / "bf16", dir / "q", options);
  EXPECT_EQ(r.quantized, tiny.num_layers * tiny.num_experts * 3);
  EXPECT_GT(r.shards, 1);
  const InspectReport report = inspect_checkpoint(dir / "q", {true, false});
  EXPECT_TRUE(report.problems.empty()) << report.problems.front();

  SafetensorsCheckpoint in(dir / "bf16"), out(dir / "q");
  const QuantConfig quant = *read_quant_config(dir / "q");
  EXPECT_EQ(quant.quant_algo, "NVFP4");
  const float input_scale = kDefaultInputAmax / 2688.0f;
  const int64_t H = tiny.hidden, I = tiny.moe_inter;
  auto original = [&](const std::string& name, int64_t rows, int64_t cols) {
    std::vector<float> v(static_cast<size_t>(rows * cols));
    read_as_float(in.tensor(name), 0, rows * cols, v.data());
    return v;
  };
  auto amax = [](const std::vector<float>& v) {
    float m = 0.0f;
    for (float x : v) m = std::max(m, std::fabs(x));
    return m;
  };
  for (int64_t layer = 0; layer < tiny.num_layers; ++layer) {
    const MoeWeights w = load_moe_layer(out, tiny, quant, layer);
    for (int64_t e = 0; e < tiny.num_experts; ++e) {
      const std::string p = expert_prefix(tiny, layer, e);
      const std::vector<float> gate = original(p + "gate_proj.weight", I, H);
      const std::vector<float> up = original(p + "up_proj.weight", I, H);
      const std::vector<float> down = original(p + "down_proj.weight", H, I);
      // Expected: format/nvfp4.h with gate and up sharing the scale of max(amax_gate, amax_up).
      const float shared = nvfp4_tensor_scale_for_amax(std::max(amax(gate), amax(up)));
      const Nvfp4Matrix want_gate = quantize_nvfp4(gate, I, H, shared);
      const Nvfp4Matrix want_up = quantize_nvfp4(up, I, H, shared);
      const Nvfp4Matrix want_down = quantize_nvfp4(down, H, I);
      const auto ue = static_cast<size_t>(e);
      EXPECT_EQ(w.gate_scale2[ue], shared);
      EXPECT_EQ(w.up_scale2[ue], shared);
      EXPECT_EQ(w.down_scale2[ue], want_down.tensor_scale);
      EXPECT_EQ(w.w13_input_scale[ue], input_scale);
      EXPECT_EQ(w.w2_input_scale[ue], input_scale);
      const std::pair<Nvfp4View, const Nvfp4Matrix*> pairs[] = {
          {w.gate(e), &want_gate}, {w.up(e), &want_up}, {w.down(e), &want_down}};
      for (const auto& [got, want] : pairs) {
        std::vector<float> a(static_cast<size_t>(want->rows * want->cols)), b(a.size());
        dequantize_nvfp4(got, a);
        dequantize_nvfp4(want->view(), b);
        ASSERT_EQ(a, b) << p;
        ASSERT_EQ(std::memcmp(got.scales, want->scales.data(), want->scales.size()), 0) << p;
      }
    }
  }
  // Everything else is copied byte for byte.
  for (const std::string& name : in.names()) {
    if (name.find(".mlp.experts.") != std::string::npos) continue;
    const TensorView a = in.tensor(name), b = out.tensor(name);
    ASSERT_EQ(a.info->nbytes(), b.info->nbytes()) << name;
    EXPECT_EQ(std::memcmp(a.data, b.data, a.info->nbytes()), 0) << name;
  }
  // config.json gained the quantization_config; the model config is unchanged.
  EXPECT_EQ(read_hf_config(dir / "q" / "config.json").hidden, H);
  EXPECT_TRUE(module_excluded(quant, "model.language_model.layers.1.self_attn.q_proj") ||
              module_excluded(quant, "model.language_model.layers.0.linear_attn.out_proj"));
}

TEST(Quantize, W4A16AndSelectionOptions) {
  ScratchDir dir;
  const ModelConfig tiny = with_layers(model_preset("tiny"), 1);
  synth_checkpoint(tiny, dir / "bf16", quiet_synth(2, 1ull << 30, false));
  QuantizeOptions options;
  options.progress = false;
  options.quant_algo = "W4A16_NVFP4";
  options.exclude = {"*.experts.1[0-5].*"};  // experts 10..15 stay BF16
  const QuantizeResult r = quantize_checkpoint(dir / "bf16", dir / "q", options);
  EXPECT_EQ(r.quantized, 10 * 3);
  SafetensorsCheckpoint out(dir / "q");
  EXPECT_FALSE(out.contains(expert_prefix(tiny, 0, 0) + "gate_proj.input_scale"));
  EXPECT_TRUE(out.contains(expert_prefix(tiny, 0, 0) + "gate_proj.weight_scale_2"));
  EXPECT_EQ(out.find(expert_prefix(tiny, 0, 12) + "gate_proj.weight")->dtype, Dtype::kBF16);
  // inspect sees BF16 experts where the config promises NVFP4 ones.
  const InspectReport report = inspect_checkpoint(dir / "q", {true, false});
  EXPECT_TRUE(
      contains_line(report.problems, "experts.12.gate_proj.weight: shape [128, 256], config implies [128, 128]"))
      << (report.problems.empty() ? "" : report.problems.front());
  // Errors: a selected tensor that cannot be NVFP4; an already-quantized input; same in/out dir.
  options = {};
  options.progress = false;
  options.include = {"*input_layernorm.weight"};
  std::string e = error_of([&] { quantize_checkpoint(dir / "bf16", dir / "bad", options); });
  EXPECT_NE(e.find("input_layernorm.weight' has shape [256]"), std::string::npos) << e;
  options.include = {};
  e = error_of([&] { quantize_checkpoint(dir / "q", dir / "again", options); });
  EXPECT_NE(e.find("already quantized"), std::string::npos) << e;
  e = error_of([&] { quantize_checkpoint(dir / "bf16", dir / "bf16", options); });
  EXPECT_NE(e.find("must differ"), std::string::npos) << e;
  // A W4A16 checkpoint has no input_scale: it loads with absent (0) activation scales, which the
  // W4A4 paths refuse instead of silently using a made-up scale.
  QuantizeOptions all;
  all.progress = false;
  all.quant_algo = "W4A16_NVFP4";
  quantize_checkpoint(dir / "bf16", dir / "q2", all);
  SafetensorsCheckpoint q2(dir / "q2");
  const MoeWeights w = load_moe_layer(q2, tiny, *read_quant_config(dir / "q2"), 0);
  EXPECT_EQ(w.w13_input_scale[0], 0.0f);
  EXPECT_FALSE(w.has_input_scales());
}

// transformers v5 keeps experts stacked ([E, 2I, H] gate_up_proj, [E, H, I] down_proj); a BF16
// checkpoint saved that way quantizes to exactly the same per-expert tensors as the unstacked one.
TEST(Quantize, StackedExpertsSplitLikeModelOpt) {
  ScratchDir dir;
  const ModelConfig tiny = with_layers(model_preset("tiny"), 2);
  synth_checkpoint(tiny, dir / "bf16", quiet_synth(6, 1ull << 30, false));
  const int64_t E = tiny.num_experts, H = tiny.hidden, I = tiny.moe_inter;
  {
    SafetensorsCheckpoint in(dir / "bf16");
    std::vector<TensorSpec> specs;
    for (const std::string& n : in.names()) {
      if (n.find(".mlp.experts.") == std::string::npos) specs.push_back({n, in.find(n)->dtype, in.find(n)->shape});
    }
    for (int64_t layer = 0; layer < tiny.num_layers; ++layer) {
      specs.push_back({layer_prefix(tiny, layer) + "mlp.experts.gate_up_proj", Dtype::kBF16, {E, 2 * I, H}});
      specs.push_back({layer_prefix(tiny, layer) + "mlp.experts.down_proj", Dtype::kBF16, {E, H, I}});
    }
    SafetensorsWriter writer(dir / "stacked", specs, 1ull << 30);
    for (const std::string& n : in.names()) {
      if (n.find(".mlp.experts.") == std::string::npos) writer.write(n, in.tensor(n).bytes());
    }
    for (int64_t layer = 0; layer < tiny.num_layers; ++layer) {
      for (int64_t e = 0; e < E; ++e) {  // appended in order: expert e's gate rows, then its up rows
        writer.write(layer_prefix(tiny, layer) + "mlp.experts.gate_up_proj",
                     in.tensor(expert_prefix(tiny, layer, e) + "gate_proj.weight").bytes());
        writer.write(layer_prefix(tiny, layer) + "mlp.experts.gate_up_proj",
                     in.tensor(expert_prefix(tiny, layer, e) + "up_proj.weight").bytes());
        writer.write(layer_prefix(tiny, layer) + "mlp.experts.down_proj",
                     in.tensor(expert_prefix(tiny, layer, e) + "down_proj.weight").bytes());
      }
    }
    writer.finish();
    std::filesystem::copy_file(dir / "bf16" / "config.json", dir / "stacked" / "config.json");
  }
  EXPECT_TRUE(inspect_checkpoint(dir / "stacked", {true, false}).problems.empty());
  QuantizeOptions options;
  options.progress = false;
  const QuantizeResult a = quantize_checkpoint(dir / "bf16", dir / "qa", options);
  const QuantizeResult b = quantize_checkpoint(dir / "stacked", dir / "qb", options);
  EXPECT_EQ(a.quantized, b.quantized);
  EXPECT_EQ(all_tensor_bytes(dir / "qa"), all_tensor_bytes(dir / "qb"));
  EXPECT_TRUE(inspect_checkpoint(dir / "qb", {true, false}).problems.empty());
  // Without config.json the stacked layout cannot be checked: a clear error, not a guess.
  std::filesystem::remove(dir / "stacked" / "config.json");
  const std::string e = error_of([&] { quantize_checkpoint(dir / "stacked", dir / "qc", options); });
  EXPECT_NE(e.find("stacked experts need the checkpoint's config.json"), std::string::npos) << e;
}

// --input-scales-from: each module's input_scale comes from a reference NVFP4 checkpoint.
TEST(Quantize, InputScalesFromReference) {
  ScratchDir dir;
  const ModelConfig tiny = with_layers(model_preset("tiny"), 1);
  synth_checkpoint(tiny, dir / "bf16", quiet_synth(8, 1ull << 30, false));
  synth_checkpoint(tiny, dir / "ref", quiet_synth(9));  // per-expert input scales drawn in [6, 10] / 2688
  QuantizeOptions options;
  options.progress = false;
  options.input_scales_from = dir / "ref";
  quantize_checkpoint(dir / "bf16", dir / "q", options);
  SafetensorsCheckpoint q(dir / "q"), ref(dir / "ref");
  std::set<float> distinct;
  for (int64_t e = 0; e < tiny.num_experts; ++e) {
    for (const char* proj : kExpertProjections) {
      const std::string name = expert_prefix(tiny, 0, e) + proj + ".input_scale";
      EXPECT_EQ(read_f32_scalar(q.tensor(name)), read_f32_scalar(ref.tensor(name))) << name;
      distinct.insert(read_f32_scalar(q.tensor(name)));
    }
  }
  EXPECT_GT(distinct.size(), 10u);  // really per module, not one rule value
  // A module the reference lacks is an error naming it.
  options.include = {"*.mlp.experts.*.gate_proj.weight", "*.mlp.shared_expert.up_proj.weight"};
  const std::string e = error_of([&] { quantize_checkpoint(dir / "bf16", dir / "q2", options); });
  EXPECT_NE(e.find("has no 'model.language_model.layers.0.mlp.shared_expert.up_proj.input_scale'"), std::string::npos)
      << e;
  EXPECT_FALSE(std::filesystem::exists(dir / "q2"));  // checked before anything is written
}

TEST(Quantize, ParseByteSize) {
  EXPECT_EQ(parse_byte_size("123"), 123u);
  EXPECT_EQ(parse_byte_size("5GB"), 5'000'000'000u);
  EXPECT_EQ(parse_byte_size("2MiB"), 2u << 20);
  EXPECT_EQ(parse_byte_size("10kb"), 10'000u);
  EXPECT_THROW(parse_byte_size("GB"), Error);
  EXPECT_THROW(parse_byte_size("5 XB"), Error);
  EXPECT_THROW(parse_byte_size("0"), Error);
}

// Rewrites a checkpoint into one shard, letting `edit` change or drop tensors (bytes included).
struct Edit {
  TensorSpec spec;
  std::vector<uint8_t> bytes;
  bool drop = false;
};

void rewrite(const std::filesystem::path& src, const std::filesystem::path& dst,
             const std::function<void(Edit&)>& edit) {
  std::vector<Edit> edits;
  {
    SafetensorsCheckpoint in(src);
    for (const std::string& n : in.names()) {
      const TensorView v = in.tensor(n);
      Edit e{{n, v.info->dtype, v.info->shape}, {v.data, v.data + v.info->nbytes()}, false};
      edit(e);
      if (!e.drop) edits.push_back(std::move(e));
    }
  }
  std::vector<TensorSpec> specs;
  for (const Edit& e : edits) specs.push_back(e.spec);
  SafetensorsWriter writer(dst, specs, 1ull << 40);
  for (const Edit& e : edits) writer.write(e.spec.name, e.bytes);
  writer.finish();
  for (const char* f : {"config.json", "hf_quant_config.json"}) {
    if (std::filesystem::exists(src / f)) std::filesystem::copy_file(src / f, dst / f);
  }
}

TEST(Inspect, FindsInconsistencies) {
  ScratchDir dir;
  const ModelConfig tiny = with_layers(model_preset("tiny"), 1);
  synth_checkpoint(tiny, dir / "good", quiet_synth(4));
  const std::string e3 = expert_prefix(tiny, 0, 3), e5 = expert_prefix(tiny, 0, 5), e6 = expert_prefix(tiny, 0, 6);
  struct Case {
    const char* what;
    std::function<void(Edit&)> edit;
    std::string expected;
  };
  const float nan = std::nanf(""), negative = -1.0f;
  const std::vector<Case> cases = {
      {"missing expert tensor", [&](Edit& e) { e.drop = e.spec.name == e3 + "up_proj.weight"; },
       "missing expert tensor " + e3 + "up_proj.weight"},
      {"wrong scale dtype",
       [&](Edit& e) {
         if (e.spec.name == e5 + "down_proj.weight_scale") e.spec.dtype = Dtype::kU8;
       },
       e5 + "down_proj.weight_scale: is U8 [256, 8], expected F8_E4M3"},
      {"NaN scale codes",
       [&](Edit& e) {
         if (e.spec.name == e6 + "gate_proj.weight_scale") e.bytes[3] = 0x7F, e.bytes[9] = 0xFF;
       },
       e6 + "gate_proj.weight_scale: 2 NaN block-scale codes"},
      {"NaN weight_scale_2",
       [&](Edit& e) {
         if (e.spec.name == e6 + "up_proj.weight_scale_2") std::memcpy(e.bytes.data(), &nan, 4);
       },
       e6 + "up_proj.weight_scale_2 = nan, must be finite and > 0"},
      {"negative input_scale",
       [&](Edit& e) {
         if (e.spec.name == e6 + "down_proj.input_scale") std::memcpy(e.bytes.data(), &negative, 4);
       },
       e6 + "down_proj.input_scale = -1.000000"},
      {"scale_2 not a scalar",
       [&](Edit& e) {
         if (e.spec.name == e3 + "gate_proj.weight_scale_2") e.spec.dtype = Dtype::kF16, e.spec.shape = {2};
       },
       e3 + "gate_proj.weight_scale_2: is F16 [2], expected an F32 scalar"},
      {"shape mismatch with config",
       [&](Edit& e) {
         if (e.spec.name == "model.language_model.layers.0.mlp.gate.weight") e.spec.shape = {8, 512};
       },
       "mlp.gate.weight: shape [8, 512], config implies [16, 256]"},
      {"expert beyond the config",
       [&](Edit& e) {
         if (e.spec.name == e3 + "up_proj.input_scale")
           e.spec.name = expert_prefix(tiny, 0, 16) + "up_proj.input_scale";
       },
       "expert beyond the 16 experts"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::filesystem::path out = dir / (std::string("bad_") + std::to_string(&c - cases.data()));
    rewrite(dir / "good", out, c.edit);
    const InspectReport report = inspect_checkpoint(out, {true, false});
    EXPECT_TRUE(contains_line(report.problems, c.expected))
        << "expected '" << c.expected << "', got "
        << (report.problems.empty() ? "no problems" : report.problems.front());
  }
  // The unmodified copy is clean, so the problems above come from the edits.
  rewrite(dir / "good", dir / "copy", [](Edit&) {});
  EXPECT_TRUE(inspect_checkpoint(dir / "copy", {true, false}).problems.empty());
  // Quantized tensors without a quantization config.
  std::filesystem::remove(dir / "copy" / "hf_quant_config.json");
  nlohmann::json config = read_json_file(dir / "copy" / "config.json");
  config.erase("quantization_config");
  write_json_file(dir / "copy" / "config.json", nlohmann::ordered_json::parse(config.dump()));
  EXPECT_TRUE(contains_line(inspect_checkpoint(dir / "copy", {true, false}).problems, "no hf_quant_config.json"));
}

}  // namespace
}  // namespace fp4moe
