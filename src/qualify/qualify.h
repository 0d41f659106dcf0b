// run_qualification: the parent side of `fp4moe qualify` (architecture.md, "Qualification and
// dispatch"). For each backend it starts a worker child process (qualify/worker.h) with a time
// limit, then judges every probe output itself against cpu.reference on the same quantized values:
// a crash (signal, CUDA fault), a hang (time limit), NaN/Inf, unwritten elements or an error over
// the budget rejects the backend, with the reason and the measured metrics. Passing backends are
// timed per token bucket; the fastest qualified one is chosen per bucket.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/device_info.h"
#include "kernels/moe_problem.h"
#include "qualify/probes.h"
#include "qualify/verdict.h"
#include "qualify/worker.h"

namespace fp4moe {

struct QualifyRequest {
  MoeProblem problem;
  WeightSource weights;                 // synthetic (seed) or a checkpoint layer
  int64_t max_tokens = 4096;            // serving maximum: the largest probe
  std::vector<int64_t> timing_tokens;   // token buckets to time (each <= max_tokens)
  int timing_replays = 20;
  std::vector<std::string> backend_ids; // in preferred order
  // Token counts at which a backend switches kernel variant (collect_variant_tokens): each gets a
  // random-input probe on top of default_probes, so every variant that can serve is run.
  std::vector<int64_t> variant_tokens;
  std::vector<std::string> worker_command;  // argv prefix of the worker; "--job FILE" is appended
  double timeout_seconds = 600.0;       // per backend
  VerdictKey key;                       // device, driver, build, problem (filled by the caller)
  std::function<void(const std::string&)> log = [](const std::string&) {};
};

Verdict run_qualification(const QualifyRequest& request);

// The per-backend time limit (--timeout) is a finite number of seconds in [1, a week]; throws Error naming
// it otherwise. Why: NaN disabled the limit (a hung kernel hung qualification), 0 or less timed out every
// backend at once and cached that verdict.
inline constexpr double kMaxQualifyTimeoutSeconds = 7 * 24 * 3600.0;
void check_qualify_timeout(double seconds);

// The union of MoeBackend::variant_token_counts of the backends `ids` (made by `factory`) for this
// problem, serving maximum and device: sorted, without duplicates, each in [1, max_tokens].
std::vector<int64_t> collect_variant_tokens(const std::vector<std::string>& ids, const BackendFactory& factory,
                                            const MoeProblem& problem, int64_t max_tokens, const DeviceInfo& device);

// Tokens buckets from 1 to max_tokens: powers of two, plus max_tokens itself.
std::vector<int64_t> default_timing_tokens(int64_t max_tokens);

}  // namespace fp4moe
