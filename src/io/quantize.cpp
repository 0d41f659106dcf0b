#include "io/quantize.h"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>

#include "common/error.h"
#include "common/parallel.h"
#include "common/progress.h"
#include "io/checkpoint_layout.h"
#include "io/hf_config.h"
#include "io/safetensors.h"

namespace fp4moe {

namespace {

constexpr int64_t kChunkElements = int64_t{1} << 24;  // 64 MB of floats per streaming chunk
constexpr uint64_t kCopyChunkBytes = uint64_t{1} << 26;

bool matches_any(const std::vector<std::string>& patterns, const std::string& name) {
  for (const std::string& p : patterns) {
    if (::fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  }
  return false;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_float_dtype(Dtype d) { return d == Dtype::kBF16 || d == Dtype::kF16 || d == Dtype::kF32; }

template <typename T>
std::span<const uint8_t> as_bytes(const T& value) {
  return {reinterpret_cast<const uint8_t*>(&value), sizeof(T)};
}

// Rows per streaming chunk for a [rows, cols] tensor.
int64_t chunk_rows(int64_t cols) { return std::max<int64_t>(1, kChunkElements / std::max<int64_t>(cols, 1)); }

// amax of rows [row0, row0 + rows) of a tensor seen as [total_rows, cols] (3-D stacked experts
// [E, R, C] as [E * R, C]), streamed in chunks; Error naming the tensor and element for NaN/Inf.
float rows_amax(const SafetensorsCheckpoint& in, const TensorView& view, int64_t row0, int64_t rows, int64_t cols) {
  const int64_t step = chunk_rows(cols);
  const int64_t esize = dtype_size(view.info->dtype);
  std::vector<float> buf;
  float amax = 0.0f;
  for (int64_t r = row0; r < row0 + rows; r += step) {
    const int64_t n = std::min(step, row0 + rows - r);
    buf.resize(static_cast<size_t>(n * cols));
    read_as_float(view, r * cols, n * cols, buf.data());
    in.release(view, static_cast<uint64_t>(r * cols * esize), static_cast<uint64_t>(n * cols * esize));
    for (size_t i = 0; i < buf.size(); ++i) {
      const float a = std::fabs(buf[i]);
      FP4MOE_CHECK(std::isfinite(a), view.file, ": tensor '", view.info->name, "' has a non-finite value ", buf[i],
                   " at row ", r + static_cast<int64_t>(i) / cols, ", column ", static_cast<int64_t>(i) % cols,
                   "; NVFP4 cannot encode it");
      amax = std::max(amax, a);
    }
  }
  return amax;
}

// Quantizes rows [row0, row0 + rows) with a known tensor scale and appends the packed codes and
// block scales to `<base>weight` / `<base>weight_scale`.
void quantize_rows(const SafetensorsCheckpoint& in, const TensorView& view, int64_t row0, int64_t rows, int64_t cols,
                   float scale, SafetensorsWriter& writer, const std::string& base,
                   const std::function<void(uint64_t)>& advance) {
  const int64_t step = chunk_rows(cols);
  const int64_t esize = dtype_size(view.info->dtype);
  std::vector<float> buf;
  for (int64_t r = row0; r < row0 + rows; r += step) {
    const int64_t n = std::min(step, row0 + rows - r);
    buf.resize(static_cast<size_t>(n * cols));
    read_as_float(view, r * cols, n * cols, buf.data());
    in.release(view, static_cast<uint64_t>(r * cols * esize), static_cast<uint64_t>(n * cols * esize));
    const Nvfp4Matrix q = quantize_nvfp4_parallel(buf, n, cols, scale);
    writer.write(base + "weight", q.packed);
    writer.write(base + "weight_scale", q.scales);
    advance(static_cast<uint64_t>(n * cols * esize));
  }
}

void add_nvfp4_specs(std::vector<TensorSpec>& specs, const std::string& base, int64_t rows, int64_t cols, bool w4a4) {
  specs.push_back({base + "weight", Dtype::kU8, {rows, cols / 2}});
  specs.push_back({base + "weight_scale", Dtype::kF8E4M3, {rows, cols / kNvfp4BlockSize}});
  specs.push_back({base + "weight_scale_2", Dtype::kF32, {}});
  if (w4a4) specs.push_back({base + "input_scale", Dtype::kF32, {}});
}

// Stacked experts as transformers v5 keeps them in memory (and may save them):
// `<p>.mlp.experts.gate_up_proj` [E, 2I, H] (rows [0, I) gate, [I, 2I) up) and
// `<p>.mlp.experts.down_proj` [E, H, I]. ModelOpt splits them per expert on export; so does fp4moe.
bool is_fused_gate_up(const std::string& name) { return ends_with(name, ".mlp.experts.gate_up_proj"); }
bool is_fused_down(const std::string& name) { return ends_with(name, ".mlp.experts.down_proj"); }
std::string fused_prefix(const std::string& name) { return name.substr(0, name.rfind('.') + 1); }  // "<p>.mlp.experts."

// weight_scale_2 for an amax. An all-zero tensor (a pruned expert) gets the scale of amax 1: its
// codes are all 0 and dequantize to exactly 0, and the scale stays a valid positive number.
float weight_scale_for_amax(float amax) { return nvfp4_tensor_scale_for_amax(amax == 0.0f ? 1.0f : amax); }

}  // namespace

std::vector<std::string> default_quantize_include() {
  return {"*.mlp.experts.*.gate_proj.weight", "*.mlp.experts.*.up_proj.weight", "*.mlp.experts.*.down_proj.weight",
          "*.mlp.experts.gate_up_proj", "*.mlp.experts.down_proj"};
}

std::vector<std::string> default_quantize_exclude() { return {"mtp.*"}; }

Nvfp4Matrix quantize_nvfp4_parallel(std::span<const float> x, int64_t rows, int64_t cols, float tensor_scale) {
  FP4MOE_CHECK(rows >= 0 && cols % kNvfp4BlockSize == 0 && static_cast<int64_t>(x.size()) == rows * cols,
               "quantize_nvfp4_parallel: bad shape [", rows, ", ", cols, "] for ", x.size(), " values");
  Nvfp4Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.tensor_scale = tensor_scale;
  m.packed.resize(static_cast<size_t>(rows * cols / 2));
  m.scales.resize(static_cast<size_t>(rows * cols / kNvfp4BlockSize));
  const std::span<uint8_t> packed(m.packed), scales(m.scales);
  parallel_for(
      rows,
      [&](int64_t begin, int64_t end) {
        const auto b = static_cast<size_t>(begin), n = static_cast<size_t>(end - begin), c = static_cast<size_t>(cols);
        quantize_nvfp4_into(x.subspan(b * c, n * c), end - begin, cols, tensor_scale,
                            packed.subspan(b * c / 2, n * c / 2), scales.subspan(b * c / 16, n * c / 16));
      },
      std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)));
  return m;
}

uint64_t parse_byte_size(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  FP4MOE_CHECK(i > 0 && i <= 18, "invalid size '", text,
               "': expected a number of bytes, e.g. 5000000000, 5GB or 500MiB");
  const uint64_t value = std::stoull(text.substr(0, i));
  std::string unit = text.substr(i);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  const std::map<std::string, uint64_t> units = {{"", 1},          {"B", 1},           {"KB", 1000},
                                                 {"MB", 1000000},  {"GB", 1000000000}, {"KIB", 1024},
                                                 {"MIB", 1 << 20}, {"GIB", 1 << 30}};
  auto it = units.find(unit);
  FP4MOE_CHECK(it != units.end(), "invalid size '", text, "': unknown unit '", text.substr(i),
               "' (B, KB, MB, GB, KiB, MiB, GiB)");
  FP4MOE_CHECK(value > 0 && value <= UINT64_MAX / it->second, "invalid size '", text, "'");
  return value * it->second;
}

QuantizeResult quantize_checkpoint(const std::filesystem::path& in_dir, const std::filesystem::path& out_dir,
                                   const QuantizeOptions& options) try {
  namespace fs = std::filesystem;
  FP4MOE_CHECK(options.quant_algo == "NVFP4" || options.quant_algo == "W4A16_NVFP4", "quant_algo '", options.quant_algo,
               "' is not supported (NVFP4 or W4A16_NVFP4)");
  FP4MOE_CHECK(std::isfinite(options.input_amax) && options.input_amax > 0, "--input-amax must be finite and > 0, got ",
               options.input_amax);
  FP4MOE_CHECK(fs::is_directory(in_dir), in_dir.string(), ": not a directory");
  std::error_code ec;
  FP4MOE_CHECK(!fs::exists(out_dir) || !fs::equivalent(in_dir, out_dir, ec), out_dir.string(),
               ": the output directory must differ from the input");
  FP4MOE_CHECK(!read_quant_config(in_dir).has_value(), in_dir.string(),
               ": the checkpoint is already quantized (it has a quantization config)");
  SafetensorsCheckpoint in(in_dir);
  const std::vector<std::string>& include = options.include.empty() ? default_quantize_include() : options.include;
  const std::vector<std::string>& exclude = options.exclude.empty() ? default_quantize_exclude() : options.exclude;
  const bool w4a4 = options.quant_algo == "NVFP4";
  std::optional<ModelConfig> config;  // needed only to check the layout of stacked experts
  if (fs::exists(in_dir / "config.json")) {
    try {
      config = read_hf_config(in_dir / "config.json");
    } catch (const Error&) {
      // An architecture fp4moe does not model can still have its per-expert linears quantized.
    }
  }

  // Plan.
  std::vector<TensorSpec> specs;
  std::map<std::string, bool> selected;
  std::vector<std::string> unquantized_linears, quantized_modules;
  QuantizeResult result;
  for (const std::string& name : in.names()) {
    const TensorInfo& t = *in.find(name);
    result.bytes_in += t.nbytes();
    const bool pick = matches_any(include, name) && !matches_any(exclude, name);
    selected[name] = pick;
    if (!pick) {
      specs.push_back({name, t.dtype, t.shape});
      if (t.shape.size() == 2 && is_float_dtype(t.dtype) && ends_with(name, ".weight"))
        unquantized_linears.push_back(name);
      continue;
    }
    const std::string where = in_dir.string() + ": tensor '" + name + "'";
    FP4MOE_CHECK(is_float_dtype(t.dtype), where, " is ", dtype_name(t.dtype),
                 "; only BF16, F16 and F32 can be quantized");
    if (is_fused_gate_up(name) || is_fused_down(name)) {
      FP4MOE_CHECK(config.has_value(), where,
                   ": stacked experts need the checkpoint's config.json to know their layout");
      const int64_t E = config->num_experts, H = config->hidden, I = config->moe_inter;
      const bool gate_up = is_fused_gate_up(name);
      const std::vector<int64_t> want = gate_up ? std::vector<int64_t>{E, 2 * I, H} : std::vector<int64_t>{E, H, I};
      FP4MOE_CHECK(t.shape == want, where, " has shape ", shape_string(t.shape), "; config.json implies ",
                   shape_string(want), gate_up ? " ([E, 2I, H], gate rows first)" : " ([E, H, I])");
      FP4MOE_CHECK(H % kNvfp4BlockSize == 0 && I % kNvfp4BlockSize == 0, where, ": hidden ", H, " and moe_inter ", I,
                   " must be multiples of 16");
      for (int64_t e = 0; e < E; ++e) {
        const std::string p = fused_prefix(name) + std::to_string(e) + ".";
        for (const char* proj :
             gate_up ? std::vector<const char*>{"gate_proj", "up_proj"} : std::vector<const char*>{"down_proj"}) {
          FP4MOE_CHECK(!in.contains(p + proj + ".weight"), where, ": the input also has per-expert ", p, proj,
                       ".weight");
          quantized_modules.push_back(p + proj);
          add_nvfp4_specs(specs, p + proj + ".", gate_up ? I : H, gate_up ? H : I, w4a4);
        }
      }
      continue;
    }
    FP4MOE_CHECK(ends_with(name, ".weight"), where, " matches --include but is not a .weight");
    FP4MOE_CHECK(t.shape.size() == 2, where, " has shape ", shape_string(t.shape),
                 "; only 2-D linear weights can be NVFP4");
    FP4MOE_CHECK(t.shape[1] % kNvfp4BlockSize == 0, where, ": in-features ", t.shape[1], " is not a multiple of 16");
    const std::string base = name.substr(0, name.size() - 6);
    quantized_modules.push_back(base.substr(0, base.size() - 1));
    for (const char* suffix : {"weight_scale", "weight_scale_2", "input_scale"}) {
      FP4MOE_CHECK(!in.contains(base + suffix), where, ": the input already has ", base + suffix);
    }
    add_nvfp4_specs(specs, base, t.shape[0], t.shape[1], w4a4);
  }

  const float rule_input_scale = nvfp4_tensor_scale_for_amax(options.input_amax);
  std::optional<SafetensorsCheckpoint> reference;
  if (!options.input_scales_from.empty()) {
    FP4MOE_CHECK(w4a4, "--input-scales-from needs quant_algo NVFP4 (W4A16_NVFP4 has no input_scale)");
    reference.emplace(options.input_scales_from);
    for (const std::string& m : quantized_modules) {  // before anything is written
      FP4MOE_CHECK(reference->contains(m + ".input_scale"), options.input_scales_from.string(),
                   ": the reference checkpoint has no '", m,
                   ".input_scale' (every quantized module needs a calibrated input_scale there)");
    }
  }
  // base: "<module>." of a quantized linear.
  auto input_scale_for = [&](const std::string& base) {
    if (!reference) return rule_input_scale;
    const std::string name = base + "input_scale";
    FP4MOE_CHECK(reference->contains(name), options.input_scales_from.string(), ": the reference checkpoint has no '",
                 name, "' (every quantized module needs a calibrated input_scale there)");
    const float v = read_f32_scalar(reference->tensor(name));
    FP4MOE_CHECK(std::isfinite(v) && v > 0.0f, options.input_scales_from.string(), ": '", name, "' = ", v,
                 ", must be finite and > 0");
    return v;
  };

  SafetensorsWriter writer(out_dir, specs, options.max_shard_bytes);
  std::optional<Progress> progress;
  if (options.progress) progress.emplace("quantize " + in_dir.filename().string(), result.bytes_in);
  auto advance = [&](uint64_t bytes) {
    if (progress) progress->advance(bytes);
  };
  std::map<std::string, float> shared_scale;  // gate/up pair base -> weight_scale_2
  for (const std::string& name : in.names()) {
    const TensorView view = in.tensor(name);
    if (!selected[name]) {
      for (uint64_t off = 0; off < view.info->nbytes(); off += kCopyChunkBytes) {
        const uint64_t n = std::min(kCopyChunkBytes, view.info->nbytes() - off);
        writer.write(name, view.bytes().subspan(off, n));
        in.release(view, off, n);
        advance(n);
      }
      in.release(view);
      ++result.copied;
      continue;
    }
    const std::function<void(uint64_t)> advance_fn = advance;
    if (is_fused_gate_up(name) || is_fused_down(name)) {
      const int64_t E = view.info->shape[0], R = view.info->shape[1], C = view.info->shape[2];
      const bool gate_up = is_fused_gate_up(name);
      for (int64_t e = 0; e < E; ++e) {
        const std::string p = fused_prefix(name) + std::to_string(e) + ".";
        if (gate_up) {  // gate rows [0, I), up rows [I, 2I) of expert e share weight_scale_2
          const int64_t I = R / 2;
          const float scale =
              weight_scale_for_amax(std::max(rows_amax(in, view, e * R, I, C), rows_amax(in, view, e * R + I, I, C)));
          quantize_rows(in, view, e * R, I, C, scale, writer, p + "gate_proj.", advance_fn);
          quantize_rows(in, view, e * R + I, I, C, scale, writer, p + "up_proj.", advance_fn);
          for (const char* proj : {"gate_proj.", "up_proj."}) {
            writer.write(p + proj + "weight_scale_2", as_bytes(scale));
            if (w4a4) writer.write(p + proj + "input_scale", as_bytes(input_scale_for(p + proj)));
          }
          result.quantized += 2;
        } else {
          const float scale = weight_scale_for_amax(rows_amax(in, view, e * R, R, C));
          quantize_rows(in, view, e * R, R, C, scale, writer, p + "down_proj.", advance_fn);
          writer.write(p + "down_proj.weight_scale_2", as_bytes(scale));
          if (w4a4) writer.write(p + "down_proj.input_scale", as_bytes(input_scale_for(p + "down_proj.")));
          result.quantized += 1;
        }
      }
      in.release(view);
      continue;
    }
    const std::string base = name.substr(0, name.size() - 6);
    float scale = 0.0f;
    // gate_proj and up_proj of one expert share weight_scale_2 when both are quantized.
    const bool is_gate = ends_with(base, "gate_proj."), is_up = ends_with(base, "up_proj.");
    const std::string pair_key = is_gate ? base.substr(0, base.size() - 10)
                                 : is_up ? base.substr(0, base.size() - 8)
                                         : "";
    const std::string partner = is_gate ? pair_key + "up_proj.weight" : is_up ? pair_key + "gate_proj.weight" : "";
    const bool paired = !partner.empty() && selected.count(partner) && selected[partner];
    const int64_t rows = view.info->shape[0], cols = view.info->shape[1];
    if (paired && shared_scale.count(pair_key)) {
      scale = shared_scale[pair_key];
    } else {
      float amax = rows_amax(in, view, 0, rows, cols);
      if (paired) {
        const TensorView other = in.tensor(partner);
        FP4MOE_CHECK(other.info->shape == view.info->shape, in_dir.string(), ": '", name, "' ",
                     shape_string(view.info->shape), " and '", partner, "' ", shape_string(other.info->shape),
                     " should have the same shape");
        amax = std::max(amax, rows_amax(in, other, 0, rows, cols));
        scale = weight_scale_for_amax(amax);
        shared_scale[pair_key] = scale;
      } else {
        scale = weight_scale_for_amax(amax);
      }
    }
    quantize_rows(in, view, 0, rows, cols, scale, writer, base, advance_fn);
    writer.write(base + "weight_scale_2", as_bytes(scale));
    if (w4a4) writer.write(base + "input_scale", as_bytes(input_scale_for(base)));
    in.release(view);
    ++result.quantized;
  }
  writer.finish();
  if (progress) progress->finish();
  result.bytes_out = writer.total_bytes();
  result.shards = writer.num_shards();

  QuantConfig quant;
  quant.quant_algo = options.quant_algo;
  quant.group_size = kNvfp4BlockSize;
  quant.producer_name = "fp4moe";
  quant.producer_version = "quantize";
  quant.exclude_modules = summarize_excluded_modules(unquantized_linears, quantized_modules);
  write_json_file(out_dir / "hf_quant_config.json", hf_quant_config_json(quant));
  if (fs::exists(in_dir / "config.json")) {
    nlohmann::ordered_json doc;  // ordered: the output keeps the input's key order
    std::ifstream file(in_dir / "config.json");
    try {
      doc = nlohmann::ordered_json::parse(file);
    } catch (const nlohmann::json::exception& e) {
      fail((in_dir / "config.json").string(), ": not valid JSON: ", e.what());
    }
    doc["quantization_config"] = quantization_config_json(quant);
    write_json_file(out_dir / "config.json", doc);
  }
  // Tokenizer, generation config and the like travel with the weights.
  for (const fs::directory_entry& e : fs::directory_iterator(in_dir)) {
    const std::string file = e.path().filename().string();
    if (!e.is_regular_file() || e.path().extension() == ".safetensors" || file == "config.json" ||
        file == "hf_quant_config.json" || file == "model.safetensors.index.json") {
      continue;
    }
    fs::copy_file(e.path(), out_dir / file, fs::copy_options::overwrite_existing);
  }
  return result;
} catch (const std::filesystem::filesystem_error& e) {
  fail(e.what());  // names the path and the OS error
}

}  // namespace fp4moe
