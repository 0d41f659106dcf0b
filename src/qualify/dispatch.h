// MoeDispatch: the backend that runs a given token count, for the model runtime
// (architecture.md, "Qualification and dispatch"):
//   - an explicit user choice (--moe-backend ID) is honoured, with a warning when the verdict does
//     not show it qualified (or there is no verdict);
//   - otherwise the verdict's choice per token bucket;
//   - with no verdict (or nothing qualified), the safe default, the pipeline backend, and one clear
//     log line saying so.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "qualify/verdict.h"

namespace fp4moe {

inline constexpr std::string_view kDefaultMoeBackend = "cuda.sm80.pipeline.v1";

class MoeDispatch {
 public:
  enum class Source { kExplicit, kVerdict, kDefault };
  using Logger = std::function<void(const std::string&)>;

  // Logs (once, here) every warning or notice the choice deserves.
  static MoeDispatch create(const std::optional<Verdict>& verdict, const std::string& explicit_backend,
                            const Logger& log);

  std::string backend_for(int64_t tokens) const;
  Source source() const { return source_; }

 private:
  Source source_ = Source::kDefault;
  std::string single_backend_;       // kExplicit / kDefault
  std::optional<Verdict> verdict_;   // kVerdict
};

}  // namespace fp4moe
