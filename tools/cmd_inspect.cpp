// fp4moe inspect: describe a checkpoint and list everything inconsistent in it (io/inspect.h).
// Exit status: 0 consistent, 2 inconsistencies found, 1 unreadable (corrupt files, bad JSON).
#include <cstdio>
#include <string>

#include "commands.h"
#include "io/inspect.h"

namespace fp4moe::cli {

void register_inspect(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "inspect",
      "Describe a checkpoint (architecture, shapes, quantization, size) and report inconsistencies; exits 2 "
      "when there are any, 1 when the checkpoint cannot be read");
  auto dir = std::make_shared<std::string>();
  auto no_scan = std::make_shared<bool>(false);
  sub->add_option("dir", *dir, "Checkpoint directory (or a single .safetensors file)")->required();
  sub->add_flag("--no-scan", *no_scan, "Do not read every block-scale byte (faster on large checkpoints)");
  set_action(sub, [dir, no_scan] {
    InspectOptions options;
    options.scan_scales = !*no_scan;
    const InspectReport report = inspect_checkpoint(*dir, options);
    for (const std::string& line : report.summary) std::printf("%s\n", line.c_str());
    for (const std::string& line : report.warnings) std::printf("warning: %s\n", line.c_str());
    for (const std::string& line : report.problems) std::printf("problem: %s\n", line.c_str());
    if (report.problems.empty()) {
      std::printf("OK: no inconsistencies found\n");
      return 0;
    }
    std::printf("INCONSISTENT: %zu problem%s\n", report.problems.size(), report.problems.size() == 1 ? "" : "s");
    return 2;
  });
}

}  // namespace fp4moe::cli
