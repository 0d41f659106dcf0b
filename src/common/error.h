// Errors: fp4moe reports bad input and failed invariants by throwing fp4moe::Error with a message
// that names the input and the problem. FP4MOE_CHECK is the only assertion macro (style.md).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace fp4moe {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
}  // namespace detail

// Throws fp4moe::Error with the concatenated message parts.
template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(detail::concat(parts...));
}

}  // namespace fp4moe

// FP4MOE_CHECK(cond, "message parts", value, ...): throw fp4moe::Error when cond is false.
#define FP4MOE_CHECK(cond, ...)                                     \
  do {                                                              \
    if (!(cond)) ::fp4moe::fail(__VA_ARGS__);                       \
  } while (0)
