// MoeBackend: one way of running the MoE operation (architecture.md, "Backends"). A backend has a
// stable versioned id, says whether it supports a problem on a device (and why not), prepares
// (repacks) the weights once, reports its workspace, and runs. Host code only: CUDA types appear as
// void* so that CPU-only builds compile this header.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/device_info.h"
#include "format/moe_weights.h"
#include "kernels/moe_problem.h"

namespace fp4moe {

struct Support {
  bool ok = false;
  std::string reason;  // why not (empty when ok)
  static Support yes() { return {true, {}}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
};

// Arguments of one run. Device pointers for CUDA backends.
struct MoeRunArgs {
  const void* hidden = nullptr;          // [T, H] BF16
  const float* router_logits = nullptr;  // [T, E] fp32
  const float* correction_bias = nullptr;  // [E] fp32, sigmoid_grouped_topk only (null: zeros)
  int64_t tokens = 0;                    // T, 0 <= T <= max_tokens given to prepare
  void* out = nullptr;                   // [T, H] BF16
  void* workspace = nullptr;             // workspace_bytes(), from the caller
  void* stream = nullptr;                // cudaStream_t
};

// Weights prepared for one backend on one device; runs without host synchronization and without
// allocating, so it can be captured in a CUDA graph.
class PreparedMoe {
 public:
  virtual ~PreparedMoe() = default;
  virtual size_t workspace_bytes() const = 0;
  virtual int64_t max_tokens() const = 0;
  // Throws Error for bad arguments (null pointers, T > max_tokens) before launching anything.
  virtual void run(const MoeRunArgs& args) = 0;
};

class MoeBackend {
 public:
  virtual ~MoeBackend() = default;
  virtual std::string_view id() const = 0;  // e.g. "cuda.sm80.pipeline.v1"
  // Host backends (the CPU reference, test fakes) take host pointers in MoeRunArgs and ignore the
  // stream; all others take device pointers.
  virtual bool runs_on_host() const { return false; }
  virtual Support supports(const MoeProblem& problem, const DeviceInfo& device) const = 0;
  // Uploads and repacks the weights for `device`; max_tokens sizes the workspace.
  virtual std::unique_ptr<PreparedMoe> prepare(const MoeProblem& problem, const MoeWeights& weights,
                                               int64_t max_tokens, const DeviceInfo& device) const = 0;
  // Token counts in [1, max_tokens] at which run() switches to another kernel variant (a tile shape, a
  // second launch chunk): the first count of each variant. Qualification adds a probe at each, so no
  // variant serves a batch size that qualification did not run. Empty: one variant for every count.
  virtual std::vector<int64_t> variant_token_counts(const MoeProblem& problem, int64_t max_tokens,
                                                    const DeviceInfo& device) const {
    (void)problem, (void)max_tokens, (void)device;
    return {};
  }
};

// The first token count in [1, max_tokens] of each value of `variant(T)` (helper for
// variant_token_counts; `variant` maps a token count to a variant id such as a tile size).
template <typename VariantOf>
std::vector<int64_t> first_token_count_of_each_variant(int64_t max_tokens, VariantOf variant) {
  std::vector<int64_t> firsts;
  std::vector<decltype(variant(int64_t{1}))> seen;
  for (int64_t t = 1; t <= max_tokens; ++t) {
    const auto v = variant(t);
    bool known = false;
    for (const auto& s : seen) known = known || s == v;
    if (!known) seen.push_back(v), firsts.push_back(t);
  }
  return firsts;
}

}  // namespace fp4moe
