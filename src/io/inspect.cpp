#include "io/inspect.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "common/error.h"
#include "common/progress.h"
#include "io/checkpoint_layout.h"
#include "io/hf_config.h"
#include "io/safetensors.h"

namespace fp4moe {

namespace {

constexpr size_t kMaxListed = 8;  // per kind of problem; the rest is counted

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string gb(uint64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (b >= 1e9)
    std::snprintf(buf, sizeof(buf), "%.2f GB", b / 1e9);
  else if (b >= 1e6)
    std::snprintf(buf, sizeof(buf), "%.2f MB", b / 1e6);
  else
    std::snprintf(buf, sizeof(buf), "%.1f kB", b / 1e3);
  return buf;
}

// Collects messages of one kind, listing the first few and counting the rest.
class Bucket {
 public:
  explicit Bucket(std::vector<std::string>& sink) : sink_(sink) {}
  void add(const std::string& message) {
    if (count_++ < kMaxListed) sink_.push_back(message);
  }
  void close(const std::string& what) {
    if (count_ > kMaxListed) sink_.push_back("... and " + std::to_string(count_ - kMaxListed) + " more " + what);
    count_ = 0;
  }

 private:
  std::vector<std::string>& sink_;
  size_t count_ = 0;
};

// Reads "<digits>." at pos (at most 9 digits) and moves pos past it; nullopt when absent.
std::optional<int64_t> parse_index(const std::string& name, size_t& pos) {
  size_t end = pos;
  while (end < name.size() && end - pos < 10 && name[end] >= '0' && name[end] <= '9') ++end;
  if (end == pos || end - pos > 9 || end >= name.size() || name[end] != '.') return std::nullopt;
  const int64_t value = std::stoll(name.substr(pos, end - pos));
  pos = end + 1;
  return value;
}

std::string describe(const TensorInfo& t) { return std::string(dtype_name(t.dtype)) + " " + shape_string(t.shape); }

// Value of an F32 one-element tensor, or nullopt (with a problem) when it is not one.
std::optional<float> scalar(const SafetensorsCheckpoint& ckpt, const std::string& name, Bucket& problems) {
  const TensorInfo* t = ckpt.find(name);
  if (t->dtype != Dtype::kF32 || t->numel() != 1 || t->shape.size() > 1) {
    problems.add(name + ": is " + describe(*t) + ", expected an F32 scalar");
    return std::nullopt;
  }
  return read_f32_scalar(ckpt.tensor(name));
}

}  // namespace

InspectReport inspect_checkpoint(const std::filesystem::path& dir, const InspectOptions& options) try {
  namespace fs = std::filesystem;
  InspectReport report;
  SafetensorsCheckpoint ckpt(dir);  // throws for anything unreadable
  std::vector<std::string>& out = report.summary;

  uint64_t tensor_bytes = 0;
  std::map<std::string, uint64_t> bytes_by_dtype;
  for (const std::string& name : ckpt.names()) {
    const TensorInfo* t = ckpt.find(name);
    tensor_bytes += t->nbytes();
    bytes_by_dtype[std::string(dtype_name(t->dtype))] += t->nbytes();
  }
  out.push_back("checkpoint: " + ckpt.dir().string() + " (" + std::to_string(ckpt.files().size()) +
                " safetensors file" + (ckpt.files().size() == 1 ? "" : "s") + (ckpt.has_index() ? " + index" : "") +
                ", " + gb(ckpt.total_file_bytes()) + " on disk, " + std::to_string(ckpt.names().size()) + " tensors)");
  std::string dtypes = "bytes by dtype:";
  for (const auto& [dtype, bytes] : bytes_by_dtype) dtypes += " " + dtype + " " + gb(bytes) + ";";
  out.push_back(dtypes);
  Bucket unindexed(report.warnings);
  for (const std::string& u : ckpt.unindexed()) unindexed.add("tensor not listed in the index (ignored): " + u);
  unindexed.close("unindexed tensors");

  // Configs.
  std::optional<ModelConfig> config;
  if (fs::exists(ckpt.dir() / "config.json")) {
    try {
      config = read_hf_config(ckpt.dir() / "config.json");
    } catch (const Error& e) {
      report.problems.push_back(e.what());
    }
  } else {
    report.warnings.push_back("no config.json: shapes are not checked against a model configuration");
  }
  std::optional<QuantConfig> quant;
  try {
    quant = read_quant_config(ckpt.dir());
  } catch (const Error& e) {
    report.problems.push_back(e.what());
  }
  if (config) {
    const ModelConfig& c = *config;
    out.push_back("architecture: " + c.architecture + " (model_type " + c.name + "), " + std::to_string(c.num_layers) +
                  " layers, hidden " + std::to_string(c.hidden) + ", vocab " + std::to_string(c.vocab));
    std::string attn = "attention: " + std::to_string(c.num_heads) + " heads, " + std::to_string(c.num_kv_heads) +
                       " KV heads, head_dim " + std::to_string(c.head_dim);
    if (c.full_attention_interval > 0) {
      attn += "; Gated DeltaNet in 3 of every " + std::to_string(c.full_attention_interval) + " layers (" +
              std::to_string(c.linear_num_key_heads) + " key / " + std::to_string(c.linear_num_value_heads) +
              " value heads)";
    }
    if (c.kv_lora_rank > 0) attn += "; MLA kv_lora_rank " + std::to_string(c.kv_lora_rank);
    out.push_back(attn);
    out.push_back("MoE: " + std::to_string(c.num_experts) + " experts, top-" + std::to_string(c.top_k) +
                  ", moe_inter " + std::to_string(c.moe_inter) + ", shared expert " +
                  std::to_string(c.shared_expert_inter) + ", routing " + c.routing +
                  (c.first_dense_layers ? ", first " + std::to_string(c.first_dense_layers) + " layers dense" : ""));
  }
  if (quant) {
    out.push_back("quantization: " + quant->quant_algo + ", group_size " + std::to_string(quant->group_size) +
                  ", KV cache " + (quant->kv_cache_quant_algo.empty() ? "not quantized" : quant->kv_cache_quant_algo) +
                  ", producer " + quant->producer_name + " " + quant->producer_version + ", " +
                  std::to_string(quant->exclude_modules.size()) + " exclude entries (from " + quant->source + ")");
  } else {
    out.push_back("quantization: none (no hf_quant_config.json or quantization_config)");
  }

  // NVFP4 linears: every `<base>.weight_scale` defines one.
  Bucket problems(report.problems);
  std::vector<std::string> bases;
  uint64_t scale_bytes = 0, nvfp4_bytes = 0;
  for (const std::string& name : ckpt.names()) {
    if (ends_with(name, ".weight_scale")) {
      bases.push_back(name.substr(0, name.size() - 13));
      scale_bytes += ckpt.find(name)->nbytes();
    }
  }
  std::set<std::string> base_set(bases.begin(), bases.end());
  for (const std::string& name : ckpt.names()) {
    for (const char* suffix : {".weight_scale_2", ".input_scale"}) {
      if (ends_with(name, suffix) && !base_set.count(name.substr(0, name.size() - std::strlen(suffix)))) {
        problems.add(name + ": has no matching .weight_scale");
      }
    }
  }
  std::optional<Progress> progress;
  if (options.scan_scales && options.progress && scale_bytes > 0) progress.emplace("scan block scales", scale_bytes);
  Bucket scale_warnings(report.warnings);
  std::map<std::string, float> scale2_of;
  for (const std::string& base : bases) {
    const std::string weight = base + ".weight", scale = base + ".weight_scale";
    const TensorInfo* ws = ckpt.find(scale);
    const TensorInfo* w = ckpt.find(weight);
    if (w == nullptr) {
      problems.add(scale + ": quantized module without " + weight);
      continue;
    }
    nvfp4_bytes += w->nbytes() + ws->nbytes();
    if (w->dtype != Dtype::kU8 || w->shape.size() != 2)
      problems.add(weight + ": is " + describe(*w) + ", expected U8 [out, in/2]");
    if (ws->dtype != Dtype::kF8E4M3 || ws->shape.size() != 2) {
      problems.add(scale + ": is " + describe(*ws) + ", expected F8_E4M3 [out, in/16]");
    } else if (w->shape.size() == 2 && (ws->shape[0] != w->shape[0] || ws->shape[1] * 16 != w->shape[1] * 2)) {
      problems.add(scale + ": shape " + shape_string(ws->shape) + " does not match " + weight + " " +
                   shape_string(w->shape) + " (expected [" + std::to_string(w->shape[0]) + ", " +
                   std::to_string(w->shape[1] * 2 / 16) + "])");
    }
    if (!ckpt.contains(base + ".weight_scale_2")) {
      problems.add(base + ": missing weight_scale_2");
    } else if (std::optional<float> v = scalar(ckpt, base + ".weight_scale_2", problems)) {
      if (!(std::isfinite(*v) && *v > 0.0f))
        problems.add(base + ".weight_scale_2 = " + std::to_string(*v) + ", must be finite and > 0");
      scale2_of[base] = *v;
    }
    const bool has_input = ckpt.contains(base + ".input_scale");
    if (quant && quant->has_input_scale() && !has_input)
      problems.add(base + ": missing input_scale (quant_algo NVFP4 is W4A4)");
    if (has_input) {
      if (std::optional<float> v = scalar(ckpt, base + ".input_scale", problems)) {
        if (!(std::isfinite(*v) && *v > 0.0f))
          problems.add(base + ".input_scale = " + std::to_string(*v) + ", must be finite and > 0");
      }
    }
    if (quant && module_excluded(*quant, base)) {
      problems.add(base + ": is quantized but matches exclude_modules in " + quant->source);
    }
    if (options.scan_scales && ws->dtype == Dtype::kF8E4M3) {
      const TensorView view = ckpt.tensor(scale);
      int64_t nan_codes = 0, negative = 0;
      for (uint8_t code : view.bytes()) {
        nan_codes += (code & 0x7F) == 0x7F;
        negative += (code & 0x80) != 0 && (code & 0x7F) != 0x7F;
      }
      if (nan_codes) problems.add(scale + ": " + std::to_string(nan_codes) + " NaN block-scale codes (0x7F/0xFF)");
      if (negative) problems.add(scale + ": " + std::to_string(negative) + " negative block-scale codes");
      ckpt.release(view);
      if (progress) progress->advance(ws->nbytes());
    }
  }
  if (progress) progress->finish();
  problems.close("NVFP4 problems");
  for (const auto& [base, value] : scale2_of) {  // gate/up should share weight_scale_2 (ModelOpt exports do)
    if (!ends_with(base, ".gate_proj")) continue;
    auto up = scale2_of.find(base.substr(0, base.size() - 9) + "up_proj");
    if (up != scale2_of.end() && up->second != value) {
      scale_warnings.add(base + ": gate and up weight_scale_2 differ (" + std::to_string(value) + " vs " +
                         std::to_string(up->second) + "); ModelOpt exports share them");
    }
  }
  scale_warnings.close("gate/up scale mismatches");
  if (!bases.empty() && ckpt.contains(bases.front() + ".weight")) {
    out.push_back("NVFP4 linears: " + std::to_string(bases.size()) + ", " + gb(nvfp4_bytes) + " (" +
                  std::to_string(tensor_bytes ? 100 * nvfp4_bytes / tensor_bytes : 0) +
                  "% of the tensor bytes); e.g. " + bases.front() + ": weight " +
                  describe(*ckpt.find(bases.front() + ".weight")) + ", weight_scale " +
                  describe(*ckpt.find(bases.front() + ".weight_scale")));
  }
  if (!bases.empty() && !quant)
    report.problems.push_back("NVFP4 tensors present but no hf_quant_config.json or quantization_config");
  if (bases.empty() && quant)
    report.problems.push_back("quantization config present but no NVFP4 tensors (no *.weight_scale)");

  if (config) {
    const ModelConfig& c = *config;
    const bool nvfp4 = quant.has_value();
    Bucket missing(report.problems), mismatch(report.problems), dense_missing(report.warnings);
    for (int64_t layer = 0; layer < c.num_layers; ++layer) {
      for (const TensorSpec& s : layer_dense_tensor_specs(c, layer)) {
        const TensorInfo* t = ckpt.find(s.name);
        if (t == nullptr)
          dense_missing.add("expected tensor not found: " + s.name + " " + shape_string(s.shape));
        else if (t->shape != s.shape)
          mismatch.add(s.name + ": shape " + shape_string(t->shape) + ", config implies " + shape_string(s.shape));
      }
      if (!is_moe_layer(c, layer)) continue;
      const std::string stacked = layer_prefix(c, layer) + "mlp.experts.";
      if (!nvfp4 && ckpt.contains(stacked + "gate_up_proj")) {  // BF16 experts stacked as transformers v5 keeps them
        const std::pair<std::string, std::vector<int64_t>> want[] = {
            {stacked + "gate_up_proj", {c.num_experts, 2 * c.moe_inter, c.hidden}},
            {stacked + "down_proj", {c.num_experts, c.hidden, c.moe_inter}}};
        for (const auto& [name, shape] : want) {
          const TensorInfo* t = ckpt.find(name);
          if (t == nullptr)
            missing.add("missing stacked expert tensor " + name);
          else if (t->shape != shape)
            mismatch.add(name + ": shape " + shape_string(t->shape) + ", config implies " + shape_string(shape));
        }
        continue;
      }
      for (int64_t e = 0; e < c.num_experts; ++e) {
        const ExpertFormat format = !nvfp4                     ? ExpertFormat::kBf16
                                    : quant->has_input_scale() ? ExpertFormat::kNvfp4
                                                               : ExpertFormat::kNvfp4NoInputScale;
        for (const TensorSpec& s : expert_tensor_specs(c, layer, e, format)) {
          const TensorInfo* t = ckpt.find(s.name);
          if (t == nullptr) {
            missing.add("missing expert tensor " + s.name);
          } else if (t->shape != s.shape && !(s.shape.empty() && t->numel() == 1)) {
            mismatch.add(s.name + ": shape " + shape_string(t->shape) + ", config implies " + shape_string(s.shape));
          } else if (nvfp4 && t->dtype != s.dtype) {
            mismatch.add(s.name + ": dtype " + std::string(dtype_name(t->dtype)) + ", expected " +
                         std::string(dtype_name(s.dtype)));
          }
        }
      }
    }
    missing.close("missing expert tensors");
    mismatch.close("shape/dtype mismatches");
    dense_missing.close("expected tensors not found");
    // Tensors of layers or experts the config does not have.
    const std::string layers = text_model_prefix(c) + "layers.";
    Bucket extra(report.problems);
    for (const std::string& name : ckpt.names()) {
      if (name.compare(0, layers.size(), layers) != 0) continue;
      size_t pos = layers.size();
      const std::optional<int64_t> layer = parse_index(name, pos);
      if (!layer) continue;
      if (*layer >= c.num_layers) {
        extra.add(name + ": layer beyond num_hidden_layers " + std::to_string(c.num_layers));
        continue;
      }
      const std::string experts = "mlp.experts.";
      if (name.compare(pos, experts.size(), experts) != 0) continue;
      pos += experts.size();
      const std::optional<int64_t> expert = parse_index(name, pos);
      if (expert && *expert >= c.num_experts) {
        extra.add(name + ": expert beyond the " + std::to_string(c.num_experts) + " experts");
      }
    }
    extra.close("tensors beyond the configuration");
  }
  return report;
} catch (const std::filesystem::filesystem_error& e) {
  fail(e.what());  // names the path and the OS error
}

}  // namespace fp4moe
