#include "qualify/qualify.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/child_process.h"
#include "common/error.h"
#include "kernels/cpu/moe_reference.h"
#include "qualify/compare.h"
#include "qualify/job.h"
#include "qualify/probes.h"
#include "qualify/tolerances.h"

namespace fp4moe {
namespace {

using nlohmann::json;

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buffer;
}

// Temporary directory removed on scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "fp4moe-qualify-XXXXXX").string();
    FP4MOE_CHECK(mkdtemp(pattern.data()) != nullptr, "cannot create a temporary directory for qualification");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<uint16_t> read_output(const std::string& path, size_t elements) {
  std::ifstream in(path, std::ios::binary);
  FP4MOE_CHECK(in.good(), "the worker wrote no output file ", path);
  std::vector<uint16_t> bits(elements);
  in.read(reinterpret_cast<char*>(bits.data()), static_cast<std::streamsize>(elements * 2));
  FP4MOE_CHECK(in.gcount() == static_cast<std::streamsize>(elements * 2), "probe output ", path, " is truncated");
  return bits;
}

// The reference outputs, computed once per probe and shared by every backend.
class ReferenceCache {
 public:
  ReferenceCache(const QualifyRequest& request) : request_(request) {}

  const std::vector<float>& output(size_t probe_index, const Probe& probe) {
    auto it = outputs_.find(probe_index);
    if (it != outputs_.end()) return it->second;
    const MoeProblem& problem = request_.problem;
    ProbeInputs in = make_probe_inputs(problem, probe);
    std::vector<float> out(static_cast<size_t>(probe.tokens * problem.hidden), 0.0f);
    MoeReferenceOptions options;
    options.token_rows = reference_rows(probe.tokens);
    moe_reference(problem, weights(probe.weights), in.hidden, in.router_logits, in.correction_bias.data(),
                  probe.tokens, out, options);
    return outputs_.emplace(probe_index, std::move(out)).first->second;
  }

 private:
  const MoeWeights& weights(ProbeWeights variant) {
    auto it = weights_.find(variant);
    if (it == weights_.end()) {
      request_.log(detail::concat("  ", request_.weights.model_dir.empty() ? "generating " : "loading ",
                                  to_string(variant), " reference weights (", request_.problem.num_experts, " experts",
                                  request_.weights.model_dir.empty()
                                      ? std::string()
                                      : detail::concat(" of layer ", request_.weights.layer, " of ",
                                                       request_.weights.model_dir),
                                  ")"));
      it = weights_.emplace(variant, make_probe_weights(request_.problem, variant, request_.weights)).first;
    }
    return it->second;
  }
  const QualifyRequest& request_;
  std::map<ProbeWeights, MoeWeights> weights_;
  std::map<size_t, std::vector<float>> outputs_;
};

struct WorkerReport {
  bool supported_known = false;
  bool supported = false;
  std::string support_reason;
  int last_begun = -1;
  int last_ended = -1;
  std::string error;
  bool done = false;
  double bandwidth = 0.0;
  std::vector<TimingPoint> timings;
};

WorkerReport parse_worker_output(const std::string& text) {
  WorkerReport r;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    auto rest = [&](size_t n) { return line.size() > n ? line.substr(n) : std::string(); };
    if (line.rfind("SUPPORT ok", 0) == 0) {
      r.supported_known = r.supported = true;
    } else if (line.rfind("SUPPORT no ", 0) == 0) {
      r.supported_known = true;
      r.support_reason = rest(11);
    } else if (line.rfind("PROBE_BEGIN ", 0) == 0) {
      r.last_begun = std::atoi(rest(12).c_str());
    } else if (line.rfind("PROBE_END ", 0) == 0) {
      r.last_ended = std::atoi(rest(10).c_str());
    } else if (line.rfind("ERROR ", 0) == 0) {
      r.error = rest(6);
    } else if (line.rfind("BANDWIDTH ", 0) == 0) {
      r.bandwidth = std::atof(rest(10).c_str());
    } else if (line.rfind("TIMING ", 0) == 0) {
      try {
        for (const json& t : json::parse(rest(7))) {
          r.timings.push_back({t.at("tokens").get<int64_t>(), t.at("microseconds").get<double>(),
                               t.at("floor_microseconds").get<double>()});
        }
      } catch (const json::exception& e) {
        r.error = std::string("malformed TIMING line from the worker: ") + e.what();
      }
    } else if (line == "DONE") {
      r.done = true;
    }
  }
  return r;
}

std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of("\n ");
  if (end == std::string::npos) return {};
  size_t begin = text.rfind('\n', end);
  return text.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

// The reference covers a sample of rows for large probes; every element must still be written and
// finite, so the rows outside the sample are scanned for the poison and for NaN/Inf too.
void count_bad_outside(const std::vector<uint16_t>& out, const std::vector<int64_t>& rows, int64_t cols,
                       CompareResult& metrics) {
  std::vector<bool> sampled(out.size() / static_cast<size_t>(cols), false);
  for (int64_t r : rows) sampled[static_cast<size_t>(r)] = true;
  for (size_t r = 0; r < sampled.size(); ++r) {
    if (sampled[r]) continue;
    for (size_t c = 0; c < static_cast<size_t>(cols); ++c) {
      const uint16_t bits = out[r * static_cast<size_t>(cols) + c];
      if (bits == kBf16Poison) ++metrics.unwritten;
      else if ((bits & 0x7F80) == 0x7F80) ++metrics.nan_or_inf;  // exponent all ones: Inf or NaN
    }
  }
}

}  // namespace

std::vector<int64_t> default_timing_tokens(int64_t max_tokens) {
  std::vector<int64_t> tokens;
  for (int64_t t = 1; t < max_tokens; t *= 2) tokens.push_back(t);
  tokens.push_back(max_tokens);
  return tokens;
}

std::vector<int64_t> collect_variant_tokens(const std::vector<std::string>& ids, const BackendFactory& factory,
                                            const MoeProblem& problem, int64_t max_tokens, const DeviceInfo& device) {
  std::vector<int64_t> tokens;
  for (const std::string& id : ids) {
    const std::unique_ptr<MoeBackend> backend = factory(id);
    FP4MOE_CHECK(backend != nullptr, "qualification: no backend '", id, "'");
    for (int64_t t : backend->variant_token_counts(problem, max_tokens, device)) {
      FP4MOE_CHECK(t >= 1 && t <= max_tokens, "backend ", id, " declares variant token count ", t,
                   " outside [1, max_tokens=", max_tokens, "]");
      tokens.push_back(t);
    }
  }
  std::sort(tokens.begin(), tokens.end());
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
  return tokens;
}

void check_qualify_timeout(double seconds) {
  FP4MOE_CHECK(std::isfinite(seconds) && seconds >= 1.0 && seconds <= kMaxQualifyTimeoutSeconds,
               "--timeout must be a number of seconds in [1, ", kMaxQualifyTimeoutSeconds, "] per backend, got ",
               seconds);
}

Verdict run_qualification(const QualifyRequest& request) {
  request.problem.validate();
  check_qualify_timeout(request.timeout_seconds);
  FP4MOE_CHECK(!request.worker_command.empty(), "qualification: no worker command");
  for (int64_t t : request.timing_tokens) {
    FP4MOE_CHECK(t >= 1 && t <= request.max_tokens, "qualification: timing token count ", t,
                 " is outside [1, max_tokens=", request.max_tokens, "]");
  }
  Verdict verdict;
  verdict.key = request.key;
  verdict.created_at = now_utc();
  const std::vector<Probe> probes = default_probes(request.max_tokens, request.weights.seed, request.variant_tokens);
  if (!request.variant_tokens.empty()) {
    std::string counts;
    for (int64_t t : request.variant_tokens) counts += (counts.empty() ? "" : ", ") + std::to_string(t);
    request.log("kernel-variant switches probed at T = " + counts);
  }
  const ErrorBudget budget = error_budget(CheckedOp::kMoe, request.problem.activation_mode);
  ReferenceCache references(request);
  TempDir work;

  for (const std::string& id : request.backend_ids) {
    BackendVerdict bv;
    bv.id = id;
    const std::string dir = work.path() + "/" + id;
    std::filesystem::create_directories(dir);
    QualifyJob job;
    job.backend = id;
    job.problem = request.problem;
    job.weights = request.weights;
    job.max_tokens = request.max_tokens;
    job.probes = probes;
    job.output_dir = dir;
    job.timing_tokens = request.timing_tokens;
    job.timing_replays = request.timing_replays;
    const std::string job_path = dir + "/job.json";
    {
      std::ofstream job_file(job_path);
      job_file << job_to_json(job);
      FP4MOE_CHECK(job_file.good(), "cannot write the qualification job ", job_path);
    }

    request.log(detail::concat("qualifying ", id, ": ", probes.size(), " probes in a child process (limit ",
                               request.timeout_seconds, " s)"));
    std::vector<std::string> argv = request.worker_command;
    argv.push_back("--job");
    argv.push_back(job_path);
    ChildOptions options;
    options.timeout_seconds = request.timeout_seconds;
    const ChildResult child = run_child(argv, options);
    bv.seconds = child.seconds;
    const WorkerReport report = parse_worker_output(child.stdout_text);

    if (report.supported_known && !report.supported) {
      bv.supported = false;
      bv.support_reason = report.support_reason;
      request.log("  unsupported: " + bv.support_reason);
      verdict.backends.push_back(bv);
      continue;
    }
    bv.supported = true;
    if (!child.ok() || !report.done) {
      std::string where;
      if (report.last_begun >= 0 && report.last_begun != report.last_ended) {
        where = " during probe " + probes[static_cast<size_t>(report.last_begun)].name;
      } else if (!report.supported_known) {
        where = " before it reported support";
      } else if (report.last_ended + 1 == static_cast<int>(probes.size())) {
        where = " while timing";
      } else {
        where = " while preparing weights";
      }
      std::string what;
      if (child.outcome == ChildResult::Outcome::kTimedOut) what = "hang: " + child.describe();
      else if (child.outcome == ChildResult::Outcome::kSignaled) what = "crash: " + child.describe();
      else if (!report.error.empty()) what = "error: " + report.error;
      else what = "worker " + child.describe();
      bv.failure = what + where;
      const std::string tail = last_line(child.stderr_tail);
      if (!tail.empty() && report.error.empty()) bv.failure += " (stderr: " + tail + ")";
      request.log("  REJECTED: " + bv.failure);
      verdict.backends.push_back(bv);
      continue;
    }
    bool all_passed = true;
    for (size_t i = 0; i < probes.size(); ++i) {
      const Probe& probe = probes[i];
      std::vector<uint16_t> out;
      try {
        out = read_output(dir + "/probe_" + std::to_string(i) + ".bin",
                          static_cast<size_t>(probe.tokens * request.problem.hidden));
      } catch (const Error& e) {
        // An output file missing or short: the run cannot be judged, so the backend is not trusted.
        bv.failure = std::string("its output could not be read: ") + e.what();
        all_passed = false;
        break;
      }
      const std::vector<float>& ref = references.output(i, probe);
      const std::vector<int64_t> rows = reference_rows(probe.tokens);
      CompareResult metrics = compare_bf16(out, ref, probe.tokens, request.problem.hidden, kBf16Poison, rows);
      count_bad_outside(out, rows, request.problem.hidden, metrics);
      ProbeOutcome outcome;
      outcome.probe = probe.name;
      outcome.tokens = probe.tokens;
      outcome.normalized_error = metrics.normalized_error;
      outcome.max_abs_error = metrics.max_abs_error;
      outcome.nan_or_inf = metrics.nan_or_inf;
      outcome.unwritten = metrics.unwritten;
      const BudgetVerdict judged = judge(metrics, budget);
      outcome.passed = judged.pass;
      outcome.reason = judged.reason;
      if (!outcome.passed && all_passed) {
        bv.failure = outcome.reason + " (probe " + probe.name + ")";
        all_passed = false;
      }
      bv.probes.push_back(outcome);
    }
    bv.qualified = all_passed;
    if (all_passed) {
      bv.timings = report.timings;
      if (report.bandwidth > 0) verdict.copy_bandwidth_gbps = report.bandwidth;
      request.log(detail::concat("  qualified: ", probes.size(), " probes passed"));
    } else {
      request.log("  REJECTED: " + bv.failure);
    }
    verdict.backends.push_back(bv);
  }
  verdict.choose();
  return verdict;
}

}  // namespace fp4moe
