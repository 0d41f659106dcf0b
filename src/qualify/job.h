// QualifyJob: what the parent asks one child process (`fp4moe qualify-worker --job FILE`) to do for
// one backend, as JSON. The child rebuilds weights and probe inputs from seeds (qualify/probes.h),
// runs the probes on poisoned outputs, writes each raw BF16 output to output_dir/probe_<i>.bin and
// times the token buckets. It reports on stdout, one line per event (see worker.h), so that a crash
// or hang still tells the parent how far it got.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/moe_problem.h"
#include "qualify/probes.h"

namespace fp4moe {

struct QualifyJob {
  std::string backend;
  MoeProblem problem;
  WeightSource weights;
  int64_t max_tokens = 0;
  std::vector<Probe> probes;
  std::string output_dir;
  std::vector<int64_t> timing_tokens;  // empty: no timing
  int timing_replays = 20;
};

std::string job_to_json(const QualifyJob& job);
QualifyJob job_from_json(const std::string& text);  // throws Error naming the bad field

}  // namespace fp4moe
