// Verdict: what qualification found for one (device, driver, build, MoE problem), and the backend
// chosen per token bucket. Stored as JSON in the cache directory and reused while its key matches
// (architecture.md, "Qualification and dispatch", step 4).
//
// Cache directory: $FP4MOE_CACHE_DIR if set, else $XDG_CACHE_HOME/fp4moe/qualify, else
// $HOME/.cache/fp4moe/qualify. One file per key: <fnv1a-64 of the key>.json.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/device_info.h"
#include "kernels/moe_problem.h"

namespace fp4moe {

struct VerdictKey {
  std::string device_name;
  int sm = 0;
  int driver_version = 0;     // CUDA driver API version (cudaDriverGetVersion)
  std::string kernel_driver;  // NVIDIA kernel driver release, e.g. "580.159.04"
  int runtime_version = 0;
  std::string build_id;  // version, commit, build type, CUDA archs
  std::string problem;   // MoeProblem::describe()
  int64_t max_tokens = 0;

  bool operator==(const VerdictKey&) const = default;
  std::string hash() const;  // 16 hex digits
};

// This build's id in verdict keys: version, commit, build type, CUDA architectures.
std::string this_build_id();
// The key of a verdict for this build, a device, a problem and a serving maximum.
VerdictKey make_verdict_key(const DeviceInfo& device, const MoeProblem& problem, int64_t max_tokens);

struct ProbeOutcome {
  std::string probe;    // probe name, e.g. "random/T=64"
  int64_t tokens = 0;
  bool passed = false;
  std::string reason;   // why it failed (empty when passed)
  double normalized_error = 0.0;
  double max_abs_error = 0.0;
  int64_t nan_or_inf = 0;
  int64_t unwritten = 0;
};

struct TimingPoint {
  int64_t tokens = 0;
  double microseconds = 0.0;        // median over CUDA-graph replays (or host runs)
  double floor_microseconds = 0.0;  // bytes of touched experts / measured copy bandwidth (0: unknown)
};

struct BackendVerdict {
  std::string id;
  bool supported = false;
  std::string support_reason;  // why not supported (empty when supported)
  bool qualified = false;
  std::string failure;         // why rejected: crash, hang, NaN/Inf, unwritten, error over budget, ...
  std::vector<ProbeOutcome> probes;
  std::vector<TimingPoint> timings;
  double seconds = 0.0;        // wall time of this backend's qualification
};

struct Verdict {
  VerdictKey key;
  std::string created_at;  // ISO 8601 UTC
  double copy_bandwidth_gbps = 0.0;  // measured in the same run (0: not measured)
  std::vector<BackendVerdict> backends;
  // Chosen backend per token bucket: bucket i covers (buckets[i-1].tokens, buckets[i].tokens].
  struct Bucket {
    int64_t tokens = 0;
    std::string backend;
  };
  std::vector<Bucket> chosen;

  // The backend for a token count: the first bucket whose bound is >= tokens, else the last bucket.
  // Empty when nothing qualified.
  std::string backend_for(int64_t tokens) const;
  // Fills `chosen` from the fastest qualified backend at each timed token count.
  void choose();
};

std::string verdict_to_json(const Verdict& verdict);
Verdict verdict_from_json(const std::string& text);  // throws Error naming the bad field

std::string qualify_cache_dir();
std::string verdict_cache_path(const VerdictKey& key);
// The cached verdict for the key, if a file exists and its stored key matches exactly.
std::optional<Verdict> load_cached_verdict(const VerdictKey& key);
// Writes atomically (temporary file + rename); returns the path.
std::string store_verdict(const Verdict& verdict);

}  // namespace fp4moe
