// The qualification worker: the child side of `fp4moe qualify`. Runs one backend on the probes of
// a QualifyJob (qualify/job.h) and reports on stdout, one event per line:
//   DEVICE <json>            the GPU it sees (or {} for none)
//   SUPPORT ok | SUPPORT no <reason>
//   PROBE_BEGIN <i> / PROBE_END <i>   around each probe; the output goes to output_dir/probe_<i>.bin
//   BANDWIDTH <GB/s>         device copy bandwidth measured in this process
//   TIMING <json>            [{tokens, microseconds, floor_microseconds}, ...]
//   ERROR <message>          a caught error (e.g. a CUDA fault after a run); exit code kWorkerError
//   DONE
// The parent judges the outputs itself: a backend cannot vouch for its own numbers.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "backends/moe_backend.h"

namespace fp4moe {

inline constexpr int kWorkerUnsupported = 3;
inline constexpr int kWorkerError = 4;

using BackendFactory = std::function<std::unique_ptr<MoeBackend>(std::string_view id)>;

int qualify_worker_main(const std::string& job_path, const BackendFactory& factory);

}  // namespace fp4moe
