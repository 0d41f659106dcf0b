// Hugging Face `config.json` <-> ModelConfig, and the ModelOpt quantization settings
// (`hf_quant_config.json` and config.json's `quantization_config`, nvfp4-format.md section 5.3).
//
// Supported model_types: qwen3_5_moe (the multimodal wrapper; the text model is read from its
// nested `text_config`, model_type qwen3_5_moe_text), qwen3_5_moe_text, qwen3_next, qwen3_moe and
// deepseek_v3. Anything else is an Error naming the file and the value, as is a missing or
// mistyped field, or a size outside fp4moe's bounds (zero heads, 2^31 experts: hf_config.cpp).
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/presets.h"

namespace fp4moe {

// Parses a config.json document; label names the file in messages.
ModelConfig parse_hf_config(const nlohmann::json& config, std::string_view label);
// Reads and parses a config.json file.
ModelConfig read_hf_config(const std::filesystem::path& config_json);
// The config.json transformers expects for this model (what `fp4moe synth` writes); parses back to
// the same ModelConfig (except `name`, which becomes the model_type).
nlohmann::ordered_json hf_config_json(const ModelConfig& config);

// The quantization of a ModelOpt checkpoint.
struct QuantConfig {
  std::string quant_algo;  // "NVFP4" (W4A4) or "W4A16_NVFP4"
  int64_t group_size = 16;
  std::string kv_cache_quant_algo;           // "" when the KV cache is not quantized, else "FP8" / "NVFP4"
  std::vector<std::string> exclude_modules;  // module names or fnmatch wildcards left unquantized
  std::string producer_name = "modelopt";
  std::string producer_version;
  std::string source;  // the file it was read from
  // W4A4 checkpoints carry a static input_scale per quantized linear; W4A16 ones do not.
  bool has_input_scale() const { return quant_algo == "NVFP4"; }
};

// Parses hf_quant_config.json ({"producer", "quantization": {...}}).
QuantConfig parse_hf_quant_config(const nlohmann::json& doc, std::string_view label);
// Parses config.json's "quantization_config" object (quant_method "modelopt").
QuantConfig parse_quantization_config(const nlohmann::json& quantization_config, std::string_view label);
// The checkpoint's quantization: hf_quant_config.json if present, else config.json's
// quantization_config; nullopt when neither exists (an unquantized checkpoint). When both exist
// they must agree on quant_algo and group_size.
std::optional<QuantConfig> read_quant_config(const std::filesystem::path& dir);

nlohmann::ordered_json hf_quant_config_json(const QuantConfig& quant);
nlohmann::ordered_json quantization_config_json(const QuantConfig& quant);

// True when `module` (a tensor name without its .weight/... suffix) matches an exclude entry:
// exact name, fnmatch wildcard, or `entry*` covering `entry` and `entry.*` (the vLLM rules).
bool module_excluded(const QuantConfig& quant, std::string_view module);

// Writes a JSON document (2-space indent, trailing newline); Error naming the file on failure.
void write_json_file(const std::filesystem::path& path, const nlohmann::ordered_json& doc);
// Reads a JSON file; Error naming the file on failure.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace fp4moe
