// fp4moe synth: a synthetic ModelOpt-style NVFP4 checkpoint for a preset (io/synth.h).
#include <cstdio>
#include <string>

#include "commands.h"
#include "common/error.h"
#include "io/hf_config.h"
#include "io/presets.h"
#include "io/quantize.h"
#include "io/synth.h"

namespace fp4moe::cli {

void register_synth(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "synth",
      "Write a synthetic checkpoint (config.json, hf_quant_config.json, sharded safetensors) with the tensor "
      "names, dtypes and shapes of a ModelOpt NVFP4 export of a preset model, and random weights");
  struct Args {
    std::string preset;
    std::string config;
    int64_t layers = 0;
    uint64_t seed = 0;
    std::string out;
    std::string max_shard = "5GB";
    bool bf16 = false;
  };
  auto args = std::make_shared<Args>();
  std::string presets;
  for (const std::string& name : preset_names()) presets += (presets.empty() ? "" : ", ") + name;
  CLI::Option* preset_option = sub->add_option("--preset", args->preset, "Model preset: " + presets);
  CLI::Option* config_option = sub->add_option("--config", args->config,
                                               "A Hugging Face config.json to mimic instead of a preset (qwen3_5_moe, "
                                               "qwen3_next, qwen3_moe, deepseek_v3)");
  preset_option->excludes(config_option);
  config_option->excludes(preset_option);
  // No CLI11 range check: its message prints the bound as a 300-digit double. with_layers names the problem.
  CLI::Option* layers_option =
      add_integer_option(sub, "--layers", args->layers, "Keep only the first N layers (default: all)");
  add_integer_option(sub, "--seed", args->seed, "Random seed; the same seed gives identical files (default 0)");
  sub->add_option("--out", args->out, "Output directory (created)")->required();
  sub->add_option("--max-shard-size", args->max_shard,
                  "Largest safetensors shard, e.g. 5GB, 500MB, 1000000 (default 5GB)");
  sub->add_flag("--bf16", args->bf16, "Write BF16 experts and no quantization config (an input for `fp4moe quantize`)");
  set_action(sub, [args, layers_option] {
    FP4MOE_CHECK(!args->preset.empty() || !args->config.empty(), "synth needs --preset NAME or --config FILE");
    ModelConfig config = args->config.empty() ? model_preset(args->preset) : read_hf_config(args->config);
    if (layers_option->count() > 0) config = with_layers(config, args->layers);
    SynthOptions options;
    options.seed = args->seed;
    options.max_shard_bytes = parse_byte_size(args->max_shard);
    options.quantized = !args->bf16;
    const SynthResult r = synth_checkpoint(config, args->out, options);
    std::printf("wrote %s: %s, %lld layers, %lld tensors, %.3f GB in %d shard%s\n", args->out.c_str(),
                config.name.c_str(), static_cast<long long>(config.num_layers), static_cast<long long>(r.tensors),
                static_cast<double>(r.bytes) / 1e9, r.shards, r.shards == 1 ? "" : "s");
    return 0;
  });
}

}  // namespace fp4moe::cli
