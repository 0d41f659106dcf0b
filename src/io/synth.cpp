#include "io/synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "common/error.h"
#include "common/parallel.h"
#include "common/progress.h"
#include "common/rng.h"
#include "format/bf16.h"
#include "format/synthetic.h"
#include "io/checkpoint_layout.h"
#include "io/hf_config.h"
#include "io/quantize.h"
#include "io/safetensors.h"

namespace fp4moe {

namespace {

constexpr int64_t kBf16ChunkElements = int64_t{1} << 20;  // one random stream per chunk
constexpr int64_t kBf16ChunksPerWrite = 32;               // 64 MB of BF16 per write

// FNV-1a: a stable hash of the tensor name, so each tensor's stream depends on its name only.
uint64_t name_hash(std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  return h;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// How the values of a BF16 / F32 tensor are drawn: value = offset + scale * N(0, 1), or
// log(uniform(1, 16)) for A_log (the DeltaNet decay rates, negative exponents after -exp).
struct Distribution {
  double offset = 0.0;
  double scale = 0.02;
  bool log_uniform = false;
};

Distribution distribution_for(const ModelConfig& c, const TensorSpec& spec) {
  const std::string& n = spec.name;
  Distribution d;
  if (ends_with(n, "A_log")) {
    d.log_uniform = true;
  } else if (ends_with(n, "norm.weight")) {
    // Qwen3.5 / Qwen3-Next RMSNorms compute x * (1 + w) (zero-centred weights), except the gated
    // norm inside the DeltaNet, which multiplies by w; the others multiply by w.
    const bool zero_centred = c.full_attention_interval > 0 && n.find("linear_attn.norm") == std::string::npos;
    d.offset = zero_centred ? 0.0 : 1.0;
    d.scale = 0.02;
  } else if (ends_with(n, "e_score_correction_bias") || ends_with(n, "dt_bias")) {
    d.scale = 0.01;
  } else if (n.find("embed_tokens") != std::string::npos) {
    d.scale = 0.02;
  } else if (spec.shape.size() >= 2) {
    // Linear [out, in] (conv1d [C, 1, K]): stddev 1/sqrt(fan_in) keeps activations O(1).
    int64_t fan_in = 1;
    for (size_t i = 1; i < spec.shape.size(); ++i) fan_in *= spec.shape[i];
    d.scale = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(fan_in, 1)));
  }
  return d;
}

void fill_chunk(const Distribution& d, Rng rng, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = d.log_uniform ? static_cast<float>(std::log(rng.uniform(1.0, 16.0)))
                           : static_cast<float>(d.offset + d.scale * rng.normal_fast());
  }
}

// Streams a BF16 or F32 tensor in chunks; chunk c draws from Rng(seed).fork(hash(name) + c).
void write_dense(SafetensorsWriter& writer, const ModelConfig& c, const TensorSpec& spec, uint64_t seed,
                 const std::function<void(uint64_t)>& advance) {
  const Distribution d = distribution_for(c, spec);
  int64_t numel = 1;
  for (int64_t s : spec.shape) numel *= s;
  const uint64_t base = name_hash(spec.name);
  const int64_t per_write = kBf16ChunkElements * kBf16ChunksPerWrite;
  std::vector<float> values;
  std::vector<uint8_t> bytes;
  for (int64_t start = 0; start < numel; start += per_write) {
    const int64_t n = std::min(per_write, numel - start);
    values.resize(static_cast<size_t>(n));
    const int64_t chunks = (n + kBf16ChunkElements - 1) / kBf16ChunkElements;
    parallel_for(chunks, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        const int64_t first = k * kBf16ChunkElements;
        const uint64_t chunk_index = static_cast<uint64_t>((start + first) / kBf16ChunkElements);
        fill_chunk(d, Rng(seed).fork(base + chunk_index), values.data() + first,
                   std::min(kBf16ChunkElements, n - first));
      }
    });
    if (spec.dtype == Dtype::kBF16) {
      bytes.resize(static_cast<size_t>(n) * 2);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = float_to_bf16(values[static_cast<size_t>(i)]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
    } else {
      FP4MOE_CHECK(spec.dtype == Dtype::kF32, "synth: no generator for ", spec.name, " (", dtype_name(spec.dtype), ")");
      bytes.resize(static_cast<size_t>(n) * 4);
      std::memcpy(bytes.data(), values.data(), bytes.size());
    }
    writer.write(spec.name, bytes);
    advance(bytes.size());
  }
}

template <typename T>
std::span<const uint8_t> as_bytes(const T& value) {
  return {reinterpret_cast<const uint8_t*>(&value), sizeof(T)};
}

// One routed expert: gate, up, down drawn with format/synthetic.h and quantized ModelOpt-style.
void write_expert(SafetensorsWriter& writer, const ModelConfig& c, int64_t layer, int64_t expert, uint64_t seed,
                  bool quantized, const std::function<void(uint64_t)>& advance) {
  const std::string p = expert_prefix(c, layer, expert);
  std::vector<float> w[3];
  for (int proj = 0; proj < 3; ++proj) {
    const auto [rows, cols] = expert_projection_shape(c, proj);
    SyntheticWeightOptions options;
    options.stddev = 1.0 / std::sqrt(static_cast<double>(cols));
    const std::string name = p + kExpertProjections[proj] + ".weight";
    w[proj] = synthetic_weight_matrix(rows, cols, Rng(seed).fork(name_hash(name)).next_u64(), options);
  }
  if (!quantized) {
    for (int proj = 0; proj < 3; ++proj) {
      std::vector<uint8_t> bytes(w[proj].size() * 2);
      for (size_t i = 0; i < w[proj].size(); ++i) {
        const uint16_t h = float_to_bf16(w[proj][i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
      writer.write(p + kExpertProjections[proj] + ".weight", bytes);
      advance(bytes.size());
    }
    return;
  }
  // gate and up share weight_scale_2 = max(amax_gate, amax_up) / 2688 (ModelOpt sync_moe_gate_up_amax).
  const float gate_up_amax = std::max(nvfp4_tensor_amax(w[0], c.hidden), nvfp4_tensor_amax(w[1], c.hidden));
  const float scales[3] = {nvfp4_tensor_scale_for_amax(gate_up_amax), nvfp4_tensor_scale_for_amax(gate_up_amax),
                           nvfp4_tensor_scale_for_amax(nvfp4_tensor_amax(w[2], c.moe_inter))};
  // Calibrated activation amaxes differ per expert; gate and up see the same input.
  Rng rng = Rng(seed).fork(name_hash(p + "input_scale"));
  const float input_scales[2] = {nvfp4_tensor_scale_for_amax(static_cast<float>(rng.uniform(6.0, 10.0))),
                                 nvfp4_tensor_scale_for_amax(static_cast<float>(rng.uniform(6.0, 10.0)))};
  for (int proj = 0; proj < 3; ++proj) {
    const auto [rows, cols] = expert_projection_shape(c, proj);
    const Nvfp4Matrix q = quantize_nvfp4_parallel(w[proj], rows, cols, scales[proj]);
    const std::string base = p + kExpertProjections[proj] + ".";
    writer.write(base + "weight", q.packed);
    writer.write(base + "weight_scale", q.scales);
    writer.write(base + "weight_scale_2", as_bytes(scales[proj]));
    writer.write(base + "input_scale", as_bytes(input_scales[proj == 2 ? 1 : 0]));
    advance(q.packed.size() + q.scales.size() + 8);
  }
}

}  // namespace

SynthResult synth_checkpoint(const ModelConfig& config, const std::filesystem::path& out_dir,
                             const SynthOptions& options) try {
  const ExpertFormat format = options.quantized ? ExpertFormat::kNvfp4 : ExpertFormat::kBf16;
  const std::vector<TensorSpec> specs = model_tensor_specs(config, format);
  SafetensorsWriter writer(out_dir, specs, options.max_shard_bytes);
  std::optional<Progress> progress;
  if (options.progress) progress.emplace("synth " + config.name, writer.total_bytes());
  auto advance = [&](uint64_t bytes) {
    if (progress) progress->advance(bytes);
  };
  for (const TensorSpec& s : head_tensor_specs(config)) write_dense(writer, config, s, options.seed, advance);
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    for (const TensorSpec& s : layer_dense_tensor_specs(config, layer))
      write_dense(writer, config, s, options.seed, advance);
    if (!is_moe_layer(config, layer)) continue;
    for (int64_t e = 0; e < config.num_experts; ++e) {
      write_expert(writer, config, layer, e, options.seed, options.quantized, advance);
    }
  }
  for (const TensorSpec& s : tail_tensor_specs(config)) write_dense(writer, config, s, options.seed, advance);
  writer.finish();
  if (progress) progress->finish();

  nlohmann::ordered_json hf = hf_config_json(config);
  std::vector<std::string> unquantized;
  for (const TensorSpec& s : specs) {
    const bool expert = s.name.find(".mlp.experts.") != std::string::npos;
    if (s.shape.size() == 2 && s.dtype == Dtype::kBF16 && ends_with(s.name, ".weight") && !expert) {
      unquantized.push_back(s.name);
    }
  }
  if (options.quantized) {
    QuantConfig quant;
    quant.quant_algo = "NVFP4";
    quant.group_size = 16;
    quant.producer_name = "fp4moe";
    quant.producer_version = "synth";
    quant.exclude_modules = summarize_excluded_modules(unquantized);
    hf["quantization_config"] = quantization_config_json(quant);
    write_json_file(out_dir / "hf_quant_config.json", hf_quant_config_json(quant));
  } else {
    std::error_code ec;
    std::filesystem::remove(out_dir / "hf_quant_config.json", ec);
  }
  write_json_file(out_dir / "config.json", hf);
  return SynthResult{static_cast<int64_t>(specs.size()), writer.total_bytes(), writer.num_shards()};
} catch (const std::filesystem::filesystem_error& e) {
  fail(e.what());  // names the path and the OS error
}

}  // namespace fp4moe
