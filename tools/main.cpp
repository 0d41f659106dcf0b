// fp4moe: the command-line tool. One binary, subcommands (architecture.md, "Command line").
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <map>

#include "commands.h"
#include "common/error.h"
#include "fp4moe_build_info.h"

namespace fp4moe::cli {
namespace {
std::map<const CLI::App*, Action>& actions() {
  static std::map<const CLI::App*, Action> registry;
  return registry;
}
}  // namespace

void set_action(CLI::App* subcommand, Action action) { actions()[subcommand] = std::move(action); }

}  // namespace fp4moe::cli

int main(int argc, char** argv) {
  using namespace fp4moe;
  CLI::App app{"fp4moe: NVFP4 Mixture-of-Experts kernels that qualify themselves on your GPU"};
  app.set_version_flag("--version", std::string("fp4moe ") + build_info::kVersion);
  app.require_subcommand(1);
  cli::register_info(app);
  cli::register_synth(app);
  cli::register_quantize(app);
  cli::register_inspect(app);
  cli::register_qualify(app);
  cli::register_bench(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (const CLI::App* sub : app.get_subcommands()) {
      auto it = cli::actions().find(sub);
      if (it != cli::actions().end()) return it->second();
    }
    std::fprintf(stderr, "fp4moe: internal error: the subcommand has no action\n");
    return 70;
  } catch (const fp4moe::Error& e) {
    std::fprintf(stderr, "fp4moe: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp4moe: unexpected error: %s\n", e.what());
    return 70;
  }
}
