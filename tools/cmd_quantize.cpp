// fp4moe quantize: BF16/FP16/FP32 checkpoint -> ModelOpt-style NVFP4 checkpoint (io/quantize.h).
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "io/quantize.h"

namespace fp4moe::cli {

void register_quantize(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "quantize",
      "Quantize a BF16/FP16/FP32 safetensors checkpoint to a ModelOpt-style NVFP4 checkpoint (by default "
      "the routed experts, as the Qwen3.5 NVFP4 exports do)");
  struct Args {
    std::string in, out, max_shard = "5GB", algo = "NVFP4", input_scales_from;
    std::vector<std::string> include, exclude;
    float input_amax = kDefaultInputAmax;
  };
  auto args = std::make_shared<Args>();
  sub->add_option("--in", args->in, "Input checkpoint directory")->required();
  sub->add_option("--out", args->out, "Output directory (created)")->required();
  sub->add_option("--include", args->include,
                  "Quantize tensors matching this fnmatch pattern (repeatable; default: "
                  "*.mlp.experts.*.{gate,up,down}_proj.weight)");
  sub->add_option("--exclude", args->exclude,
                  "Never quantize tensors matching this pattern (repeatable; default: mtp.*)");
  sub->add_option("--quant-algo", args->algo, "NVFP4 (W4A4, with input_scale) or W4A16_NVFP4")
      ->check(CLI::IsMember({"NVFP4", "W4A16_NVFP4"}));
  sub->add_option("--input-amax", args->input_amax,
                  "Assumed activation amax behind every input_scale (input_scale = amax / 2688; no calibration), "
                  "default 16");
  sub->add_option("--input-scales-from", args->input_scales_from,
                  "Take each module's input_scale from this reference ModelOpt NVFP4 checkpoint of the same model "
                  "(its calibration) instead of the --input-amax rule");
  sub->add_option("--max-shard-size", args->max_shard, "Largest safetensors shard (default 5GB)");
  set_action(sub, [args] {
    QuantizeOptions options;
    options.include = args->include;
    options.exclude = args->exclude;
    options.quant_algo = args->algo;
    options.input_amax = args->input_amax;
    options.input_scales_from = args->input_scales_from;
    options.max_shard_bytes = parse_byte_size(args->max_shard);
    const QuantizeResult r = quantize_checkpoint(args->in, args->out, options);
    std::printf("wrote %s: %lld linears quantized to %s, %lld tensors copied, %.3f GB -> %.3f GB in %d shard%s\n",
                args->out.c_str(), static_cast<long long>(r.quantized), args->algo.c_str(),
                static_cast<long long>(r.copied), static_cast<double>(r.bytes_in) / 1e9,
                static_cast<double>(r.bytes_out) / 1e9, r.shards, r.shards == 1 ? "" : "s");
    if (r.quantized == 0) {
      std::fprintf(stderr, "fp4moe: warning: no tensor matched the include patterns; the output is a plain copy\n");
    }
    return 0;
  });
}

}  // namespace fp4moe::cli
