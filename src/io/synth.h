// `fp4moe synth`: a complete synthetic checkpoint directory for a ModelConfig: config.json,
// hf_quant_config.json, sharded safetensors and the index, with the tensor names, dtypes and
// shapes of a ModelOpt NVFP4 export (io/checkpoint_layout.h) and random weights.
//
// Determinism: every tensor's values come from Rng(seed) forked by a hash of the tensor's name
// (and chunk index), so the same seed gives identical files byte for byte, and the tensor
// contents do not depend on the shard size. Streaming: tensors are generated and written one at a
// time (BF16 ones in chunks), so memory stays bounded by one expert / one chunk even for the 397B.
//
// Values: routed experts from format/synthetic.h (log-normal block magnitudes, so the E4M3 block
// scales span a realistic range; stddev 1/sqrt(fan_in)), quantized ModelOpt-exactly with gate and
// up sharing weight_scale_2 (max of the two amaxes); input_scale from an activation amax drawn
// per expert in [6, 10]. BF16 linears ~ N(0, 1/fan_in); norms around their identity value.
#pragma once
#include <cstdint>
#include <filesystem>

#include "io/presets.h"

namespace fp4moe {

struct SynthOptions {
  uint64_t seed = 0;
  uint64_t max_shard_bytes = 5'000'000'000;
  bool quantized = true;  // false: BF16 experts and no quantization config (input for `fp4moe quantize`)
  bool progress = true;
};

struct SynthResult {
  int64_t tensors = 0;
  uint64_t bytes = 0;  // tensor bytes
  int shards = 0;
};

SynthResult synth_checkpoint(const ModelConfig& config, const std::filesystem::path& out_dir,
                             const SynthOptions& options);

}  // namespace fp4moe
