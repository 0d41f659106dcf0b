#include "qualify/dispatch.h"

#include "common/error.h"

namespace fp4moe {

MoeDispatch MoeDispatch::create(const std::optional<Verdict>& verdict, const std::string& explicit_backend,
                                const Logger& log) {
  MoeDispatch d;
  if (!explicit_backend.empty()) {
    d.source_ = Source::kExplicit;
    d.single_backend_ = explicit_backend;
    const BackendVerdict* found = nullptr;
    if (verdict) {
      for (const BackendVerdict& b : verdict->backends) {
        if (b.id == explicit_backend) found = &b;
      }
    }
    if (!verdict) {
      log(detail::concat("warning: --moe-backend ", explicit_backend,
                         " is used as asked, but it is UNQUALIFIED: there is no qualification verdict for this GPU, "
                         "build and model (run `fp4moe qualify`)"));
    } else if (!found) {
      log(detail::concat("warning: --moe-backend ", explicit_backend,
                         " is used as asked, but it is UNQUALIFIED: the verdict does not list it"));
    } else if (!found->qualified) {
      log(detail::concat("warning: --moe-backend ", explicit_backend,
                         " is used as asked, but qualification REJECTED it: ",
                         found->supported ? found->failure : found->support_reason));
    }
    return d;
  }
  if (verdict && !verdict->chosen.empty()) {
    d.source_ = Source::kVerdict;
    d.verdict_ = verdict;
    return d;
  }
  d.source_ = Source::kDefault;
  d.single_backend_ = std::string(kDefaultMoeBackend);
  log(detail::concat("notice: ", verdict ? "the qualification verdict chose no backend" : "no qualification verdict",
                     " for this GPU, build and model; using the safe default MoE backend ", kDefaultMoeBackend,
                     " (run `fp4moe qualify` to qualify and time every backend)"));
  return d;
}

std::string MoeDispatch::backend_for(int64_t tokens) const {
  FP4MOE_CHECK(tokens >= 0, "MoE dispatch: token count must be >= 0, got ", tokens);
  if (source_ == Source::kVerdict) return verdict_->backend_for(tokens);
  return single_backend_;
}

}  // namespace fp4moe
