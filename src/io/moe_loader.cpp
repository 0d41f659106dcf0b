#include "io/moe_loader.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "common/error.h"
#include "io/checkpoint_layout.h"

namespace fp4moe {

namespace {

TensorView expect_tensor(const SafetensorsCheckpoint& ckpt, const std::string& name, Dtype dtype,
                         const std::vector<int64_t>& shape) {
  const TensorInfo* t = ckpt.find(name);
  FP4MOE_CHECK(t != nullptr, ckpt.dir().string(), ": missing tensor '", name, "' (expected ", dtype_name(dtype), " ",
               shape_string(shape), ")");
  FP4MOE_CHECK(t->dtype == dtype, ckpt.dir().string(), ": tensor '", name, "' is ", dtype_name(t->dtype), ", expected ",
               dtype_name(dtype));
  FP4MOE_CHECK(t->shape == shape, ckpt.dir().string(), ": tensor '", name, "' has shape ", shape_string(t->shape),
               ", expected ", shape_string(shape));
  return ckpt.tensor(name);
}

// F32 scalars: ModelOpt writes shape []; some exporters write [1]. Both are accepted.
float expect_scalar(const SafetensorsCheckpoint& ckpt, const std::string& name) {
  const TensorInfo* t = ckpt.find(name);
  FP4MOE_CHECK(t != nullptr, ckpt.dir().string(), ": missing tensor '", name, "' (expected an F32 scalar)");
  return read_f32_scalar(ckpt.tensor(name));
}

}  // namespace

MoeWeights load_moe_layer(const SafetensorsCheckpoint& ckpt, const ModelConfig& config, const QuantConfig& quant,
                          int64_t layer) {
  FP4MOE_CHECK(layer >= 0 && layer < config.num_layers, ckpt.dir().string(), ": layer ", layer, " out of range [0, ",
               config.num_layers, ")");
  FP4MOE_CHECK(is_moe_layer(config, layer), ckpt.dir().string(), ": layer ", layer, " is a dense layer, not MoE");
  const int64_t E = config.num_experts, H = config.hidden, I = config.moe_inter;
  MoeWeights w;
  w.allocate(E, H, I);
  const size_t gate_packed = static_cast<size_t>(I * H / 2), gate_scales = static_cast<size_t>(I * H / 16);
  const size_t down_packed = static_cast<size_t>(H * I / 2), down_scales = static_cast<size_t>(H * I / 16);
  for (int64_t e = 0; e < E; ++e) {
    const std::string p = expert_prefix(config, layer, e);
    float input[3] = {0.0f, 0.0f, 0.0f};  // 0: absent (W4A16_NVFP4 checkpoints); W4A4 refuses it
    for (int proj = 0; proj < 3; ++proj) {
      const auto [rows, cols] = expert_projection_shape(config, proj);
      const std::string base = p + kExpertProjections[proj] + ".";
      const TensorView packed = expect_tensor(ckpt, base + "weight", Dtype::kU8, {rows, cols / 2});
      const TensorView scales = expect_tensor(ckpt, base + "weight_scale", Dtype::kF8E4M3, {rows, cols / 16});
      const float scale2 = expect_scalar(ckpt, base + "weight_scale_2");
      if (quant.has_input_scale()) input[proj] = expect_scalar(ckpt, base + "input_scale");
      uint8_t* packed_dst = nullptr;
      uint8_t* scales_dst = nullptr;
      const auto ue = static_cast<size_t>(e);
      if (proj == 0) {  // w13 rows [0, I) of expert e
        packed_dst = w.w13_packed.data() + ue * 2 * gate_packed;
        scales_dst = w.w13_scales.data() + ue * 2 * gate_scales;
        w.gate_scale2[ue] = scale2;
      } else if (proj == 1) {  // w13 rows [I, 2I)
        packed_dst = w.w13_packed.data() + ue * 2 * gate_packed + gate_packed;
        scales_dst = w.w13_scales.data() + ue * 2 * gate_scales + gate_scales;
        w.up_scale2[ue] = scale2;
      } else {
        packed_dst = w.w2_packed.data() + ue * down_packed;
        scales_dst = w.w2_scales.data() + ue * down_scales;
        w.down_scale2[ue] = scale2;
      }
      std::memcpy(packed_dst, packed.data, packed.info->nbytes());
      std::memcpy(scales_dst, scales.data, scales.info->nbytes());
    }
    w.w13_input_scale[static_cast<size_t>(e)] = std::max(input[0], input[1]);
    w.w2_input_scale[static_cast<size_t>(e)] = input[2];
  }
  try {
    w.validate();
  } catch (const Error& err) {
    fail(ckpt.dir().string(), ": layer ", layer, ": ", err.what());
  }
  return w;
}

std::vector<int64_t> Nvfp4Checkpoint::moe_layers() const {
  std::vector<int64_t> layers;
  for (int64_t l = 0; l < config.num_layers; ++l) {
    if (is_moe_layer(config, l)) layers.push_back(l);
  }
  return layers;
}

Nvfp4Checkpoint open_nvfp4_checkpoint(const std::filesystem::path& dir) {
  FP4MOE_CHECK(std::filesystem::is_regular_file(dir / "config.json"), dir.string(),
               ": no config.json (fp4moe needs the model configuration of the checkpoint)");
  ModelConfig config = read_hf_config(dir / "config.json");
  std::optional<QuantConfig> quant = read_quant_config(dir);
  FP4MOE_CHECK(quant.has_value(), dir.string(),
               ": not an NVFP4 checkpoint (no hf_quant_config.json and no quantization_config in config.json); "
               "`fp4moe quantize` makes one from a BF16 checkpoint");
  return Nvfp4Checkpoint{SafetensorsCheckpoint(dir), std::move(config), std::move(*quant)};
}

}  // namespace fp4moe
