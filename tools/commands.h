// Subcommands of the fp4moe CLI. Each lives in its own cmd_<name>.cpp and registers itself on the
// app; main.cpp lists them in the order `fp4moe --help` shows them.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace fp4moe::cli {

// A registered subcommand stores its action here; main runs the one that was parsed. The action
// returns the process exit code.
using Action = std::function<int()>;
void set_action(CLI::App* subcommand, Action action);

void register_info(CLI::App& app);
void register_synth(CLI::App& app);
void register_quantize(CLI::App& app);
void register_inspect(CLI::App& app);
void register_qualify(CLI::App& app);
void register_bench(CLI::App& app);  // CUDA builds: bench moe / ceilings; CPU-only: says why not

}  // namespace fp4moe::cli
