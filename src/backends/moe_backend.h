// MoeBackend: one way of running the MoE operation (architecture.md, "Backends"). A backend has a
// stable versioned id, says whether it supports a problem on a device (and why not), prepares
// (repacks) the weights once, reports its workspace, and runs. Host code only: CUDA types appear as
// void* so that CPU-only builds compile this header.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

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
};

}  // namespace fp4moe
