// Subcommands of the fp4moe CLI. Each lives in its own cmd_<name>.cpp and registers itself on the
// app; main.cpp lists them in the order `fp4moe --help` shows them.
#pragma once
#include <CLI/CLI.hpp>
#include <charconv>
#include <functional>
#include <limits>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

namespace fp4moe::cli {

// A registered subcommand stores its action here; main runs the one that was parsed. The action
// returns the process exit code.
using Action = std::function<int()>;
void set_action(CLI::App* subcommand, Action action);

// Every integer option is added through add_integer_option, which puts its text through exact_integer for the
// option's own type first (->transform: it rewrites the text). Why: CLI11 2.1 (Debian's) saturates an integer
// outside its option's type without a word (--seed -1 and --seed 2^64 both became 2^64 - 1, --max-tokens 10^20
// became 2^63 - 1, and the range error then quoted that number), and it reads a leading 0 as octal (--seed 010
// was seed 8). Only decimal digits, an optional '-' for signed types.
template <typename Integer>
CLI::Validator exact_integer() {
  static_assert(std::is_integral_v<Integer>, "exact_integer is for integer options");
  const std::string bits = std::to_string(std::numeric_limits<Integer>::digits);
  const std::string range =
      std::is_signed_v<Integer> ? "[-2^" + bits + ", 2^" + bits + " - 1]" : "[0, 2^" + bits + " - 1]";
  return CLI::Validator(
      [range](std::string& text) -> std::string {
        Integer value{};
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (error != std::errc() || stop != end) return "'" + text + "' is not a decimal integer in " + range;
        text = std::to_string(value);  // no leading zeros left for CLI11 to read as octal
        return {};
      },
      "");
}

template <typename Integer>
CLI::Option* add_integer_option(CLI::App* app, const std::string& name, Integer& value, const std::string& help) {
  return app->add_option(name, value, help)->transform(exact_integer<Integer>());
}
template <typename Integer>
CLI::Option* add_integer_option(CLI::App* app, const std::string& name, std::vector<Integer>& values,
                                const std::string& help) {
  return app->add_option(name, values, help)->transform(exact_integer<Integer>());
}

void register_info(CLI::App& app);
void register_synth(CLI::App& app);
void register_quantize(CLI::App& app);
void register_inspect(CLI::App& app);
void register_qualify(CLI::App& app);
void register_bench(CLI::App& app);  // CUDA builds: bench moe / ceilings; CPU-only: says why not

}  // namespace fp4moe::cli
