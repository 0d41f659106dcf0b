// `fp4moe quantize`: a BF16 / FP16 / FP32 safetensors checkpoint becomes a ModelOpt-style NVFP4
// checkpoint (nvfp4-format.md section 5), streamed tensor by tensor (row chunks for large ones),
// so memory stays bounded whatever the checkpoint size.
//
// What is quantized: by default what the Qwen3.5 NVFP4 exports quantize, the routed experts
// (`*.mlp.experts.*.{gate,up,down}_proj.weight`), except the MTP head (`mtp.*`, BF16 in the
// exports). Everything else is copied byte for byte.
// Scales (ModelOpt-exact, format/nvfp4.h): weight_scale_2 = amax / 2688 per tensor; gate_proj and
// up_proj of one expert share weight_scale_2 = max(amax_gate, amax_up) / 2688, as ModelOpt's
// sync_moe_gate_up_amax exports them. input_scale (W4A4 only) needs calibrated activation amaxes,
// which a weights-only tool cannot measure, so it comes from one of two documented sources:
//  - the rule input_scale = input_amax / 2688 with an assumed activation amax (--input-amax,
//    default kDefaultInputAmax), the same for every quantized linear;
//  - --input-scales-from REF: the calibrated input_scale of the same module in a reference ModelOpt
//    checkpoint of the same model (e.g. the vendor's NVFP4 export); every quantized module must
//    have one there.
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "format/nvfp4.h"

namespace fp4moe {

// The assumed activation amax behind the static input_scale. 16 keeps hidden states after the
// post-attention RMSNorm (typically |x| < 10 with rare outliers) inside the NVFP4 range with a
// little headroom; blocks beyond it saturate (nvfp4-format.md section 3.3, item 4).
inline constexpr float kDefaultInputAmax = 16.0f;
inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000;  // Hugging Face's "5GB"

struct QuantizeOptions {
  std::vector<std::string> include;  // fnmatch patterns on tensor names; empty: default_quantize_include()
  std::vector<std::string> exclude;  // empty: default_quantize_exclude()
  std::string quant_algo = "NVFP4";  // or "W4A16_NVFP4" (no input_scale tensors)
  float input_amax = kDefaultInputAmax;
  std::filesystem::path input_scales_from;  // empty: the input_amax rule
  uint64_t max_shard_bytes = kDefaultMaxShardBytes;
  bool progress = true;
};

struct QuantizeResult {
  int64_t quantized = 0;  // linears turned into NVFP4
  int64_t copied = 0;     // tensors copied unchanged
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  int shards = 0;
};

std::vector<std::string> default_quantize_include();
std::vector<std::string> default_quantize_exclude();

// Quantizes in_dir into out_dir (created; must not be in_dir). Throws Error naming the tensor for
// a selected tensor that cannot be NVFP4 (not a 2-D float tensor, in-features % 16 != 0,
// NaN/Inf), or when the input is already quantized.
QuantizeResult quantize_checkpoint(const std::filesystem::path& in_dir, const std::filesystem::path& out_dir,
                                   const QuantizeOptions& options);

// NVFP4 quantization of x [rows, cols] with a known tensor scale, threaded over row chunks
// (rows are independent once the tensor scale is fixed, so the result equals quantize_nvfp4).
Nvfp4Matrix quantize_nvfp4_parallel(std::span<const float> x, int64_t rows, int64_t cols, float tensor_scale);

// Parses a byte count: "5000000", "5GB", "500MB", "64KiB", "2GiB".
uint64_t parse_byte_size(const std::string& text);

}  // namespace fp4moe
