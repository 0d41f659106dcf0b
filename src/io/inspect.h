// `fp4moe inspect`: what a checkpoint directory holds (architecture, shapes, what is quantized and
// how, size on disk) and everything inconsistent in it: expert tensors missing or beyond the
// configured count, shapes that disagree with config.json, wrong scale dtypes or shapes, NaN or
// negative block-scale codes, non-finite or non-positive weight_scale_2 / input_scale, quantized
// modules listed as excluded, unindexed tensors.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace fp4moe {

struct InspectOptions {
  bool scan_scales = true;  // read every weight_scale byte (NaN / negative codes); reads 1/9 of the NVFP4 bytes
  bool progress = true;
};

struct InspectReport {
  std::vector<std::string> summary;   // human-readable description, one line each
  std::vector<std::string> problems;  // inconsistencies: inspect exits non-zero when any
  std::vector<std::string> warnings;  // worth knowing, not wrong
};

// Throws Error when the directory cannot be opened at all (corrupt safetensors, bad index, bad
// JSON); everything else is reported in the returned problems.
InspectReport inspect_checkpoint(const std::filesystem::path& dir, const InspectOptions& options = {});

}  // namespace fp4moe
