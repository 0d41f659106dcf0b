// fp4moe._ext.MoeCore: one MoE layer's routed experts, prepared once for the backend(s) that will run
// it, and run on caller-provided arrays. python/fp4moe/moe.py (MoeLayer) builds the stacked arrays from
// ModelOpt tensors and allocates outputs and workspaces with the caller's framework.
//
// Backend choice (docs/python.md): a host layer (device -1) runs cpu.reference.v1, the fp64 oracle.
// A CUDA layer follows qualify/dispatch.h: an explicit backend id is honoured (with a notice when the
// cached verdict does not show it qualified); otherwise the cached verdict's choice per token bucket
// (every backend it chose is prepared here, so that forward never prepares); with no verdict, the safe
// default backend. The notices are returned to Python, which turns them into warnings.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu_reference_backend.h"
#include "backends/registry.h"
#include "ext_common.h"
#include "ext_moe.h"
#include "qualify/dispatch.h"
#include "qualify/verdict.h"

#ifdef FP4MOE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace fp4moe::python {
namespace {

using InArray = nb::ndarray<nb::ro, nb::c_contig>;
using OutArray = nb::ndarray<nb::c_contig>;

constexpr std::string_view kHostBackend = "cpu.reference.v1";

#ifdef FP4MOE_WITH_CUDA
// Sets the current CUDA device for a scope and restores the previous one (prepare() switches device).
class DeviceScope {
 public:
  explicit DeviceScope(int ordinal) {
    FP4MOE_CHECK(cudaGetDevice(&previous_) == cudaSuccess, "cannot query the current CUDA device");
    FP4MOE_CHECK(cudaSetDevice(ordinal) == cudaSuccess, "cannot select CUDA device ", ordinal);
  }
  ~DeviceScope() { cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};
#endif

template <typename A>
std::string dims(const A& a) {
  std::string s = "[";
  for (size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + "]";
}

template <typename A>
void check_shape(const A& a, const char* what, std::initializer_list<int64_t> shape) {
  bool ok = a.ndim() == shape.size();
  size_t i = 0;
  for (int64_t d : shape) ok = ok && static_cast<int64_t>(a.shape(i++)) == d;
  std::string want = "[";
  i = 0;
  for (int64_t d : shape) want += (i++ ? ", " : "") + std::to_string(d);
  FP4MOE_CHECK(ok, what, ": expected shape ", want, "], got ", dims(a));
}

template <typename A>
bool is_bf16_bits(const A& a) {
  return is_dtype(a.dtype(), nb::dlpack::dtype_code::Bfloat, 16) || is_dtype(a.dtype(), nb::dlpack::dtype_code::UInt, 16);
}

template <typename T>
std::vector<T> copy_array(const HostArray<T>& a, const char* what, std::initializer_list<int64_t> shape) {
  check_shape(a, what, shape);
  return std::vector<T>(a.data(), a.data() + a.size());
}

}  // namespace

std::string build_id() { return this_build_id(); }

MoeProblem make_problem(const ProblemArgs& a) {
  // The MoE part of a model config; moe_problem_for validates it like every other caller's.
  ModelConfig model;
  model.hidden = a.hidden;
  model.moe_inter = a.inter;
  model.num_experts = a.num_experts;
  model.top_k = a.top_k;
  model.routing = a.routing;
  model.n_group = a.n_group;
  model.topk_group = a.topk_group;
  model.routed_scaling_factor = a.routed_scaling_factor;
  return moe_problem_for(model, parse_activation_mode(a.activation));
}

DeviceInfo find_device(int ordinal) {
  const DeviceList list = query_cuda_devices();
  FP4MOE_CHECK(!list.devices.empty(), "CUDA device ", ordinal, " is not available: ", list.why_none);
  for (const DeviceInfo& d : list.devices) {
    if (d.ordinal == ordinal) return d;
  }
  fail("CUDA device ", ordinal, " does not exist (this process sees ", list.devices.size(), " device(s))");
}

VerdictKey verdict_key(const MoeProblem& problem, const DeviceInfo& device, int64_t max_tokens) {
  return make_verdict_key(device, problem, max_tokens);
}

class MoeCore {
 public:
  MoeCore(const ProblemArgs& problem_args, const HostArray<uint8_t>& w13_packed, const HostArray<uint8_t>& w13_scales,
          const HostArray<float>& gate_scale2, const HostArray<float>& up_scale2, const HostArray<uint8_t>& w2_packed,
          const HostArray<uint8_t>& w2_scales, const HostArray<float>& down_scale2,
          const HostArray<float>& w13_input_scale, const HostArray<float>& w2_input_scale, const std::string& backend,
          int device, int64_t max_tokens)
      : problem_(make_problem(problem_args)), device_(device), max_tokens_(max_tokens) {
    FP4MOE_CHECK(max_tokens >= 1, "MoeLayer: max_tokens must be >= 1, got ", max_tokens);
    const int64_t E = problem_.num_experts, H = problem_.hidden, I = problem_.inter;
    MoeWeights w;
    w.num_experts = E;
    w.hidden = H;
    w.inter = I;
    w.w13_packed = copy_array(w13_packed, "w13_packed", {E, 2 * I, H / 2});
    w.w13_scales = copy_array(w13_scales, "w13_scales", {E, 2 * I, H / 16});
    w.gate_scale2 = copy_array(gate_scale2, "gate_scale2", {E});
    w.up_scale2 = copy_array(up_scale2, "up_scale2", {E});
    w.w2_packed = copy_array(w2_packed, "w2_packed", {E, H, I / 2});
    w.w2_scales = copy_array(w2_scales, "w2_scales", {E, H, I / 16});
    w.down_scale2 = copy_array(down_scale2, "down_scale2", {E});
    w.w13_input_scale = copy_array(w13_input_scale, "w13_input_scale", {E});
    w.w2_input_scale = copy_array(w2_input_scale, "w2_input_scale", {E});
    w.validate();

    nb::gil_scoped_release release;
    if (device < 0) {
      FP4MOE_CHECK(backend.empty() || backend == kHostBackend, "MoeLayer: backend '", backend,
                   "' runs on a CUDA device; a host (device='cpu') layer runs ", kHostBackend);
      source_ = "host";
      single_ = std::string(kHostBackend);
      prepared_[single_] = make_cpu_reference_backend()->prepare(problem_, w, max_tokens, DeviceInfo{});
      return;
    }
    FP4MOE_CHECK(backend != kHostBackend, "MoeLayer: ", kHostBackend,
                 " runs on host arrays; build the layer with device='cpu' to use it");
#ifdef FP4MOE_WITH_CUDA
    const DeviceInfo info = find_device(device);
    const std::optional<Verdict> verdict = load_cached_verdict(verdict_key(problem_, info, max_tokens));
    dispatch_ = MoeDispatch::create(verdict, backend, [this](const std::string& line) { notices_.push_back(line); });
    std::set<std::string> ids;
    switch (dispatch_->source()) {
      case MoeDispatch::Source::kExplicit: source_ = "explicit"; break;
      case MoeDispatch::Source::kVerdict: source_ = "verdict"; break;
      case MoeDispatch::Source::kDefault: source_ = "default"; break;
    }
    if (dispatch_->source() == MoeDispatch::Source::kVerdict) {
      for (const Verdict::Bucket& b : verdict->chosen) ids.insert(b.backend);
    } else {
      ids.insert(dispatch_->backend_for(1));
    }
    DeviceScope scope(device);
    for (const std::string& id : ids) {
      std::unique_ptr<MoeBackend> b = find_moe_backend(id);
      FP4MOE_CHECK(!b->runs_on_host(), "MoeLayer: backend ", id, " runs on the host, not on CUDA device ", device);
      const Support support = b->supports(problem_, info);
      FP4MOE_CHECK(support.ok, "MoeLayer: backend ", id, " does not support ", problem_.describe(), " on ", info.name,
                   ": ", support.reason);
      prepared_[id] = b->prepare(problem_, w, max_tokens, info);
    }
#else
    fail("MoeLayer: device=cuda:", device, " needs a CUDA build of fp4moe; this extension was built without CUDA");
#endif
  }

  MoeCore(const MoeCore&) = delete;  // owns prepared device state
  MoeCore& operator=(const MoeCore&) = delete;

  std::string backend_for(int64_t tokens) const {
    if (dispatch_) return dispatch_->backend_for(tokens);
    FP4MOE_CHECK(tokens >= 0, "MoeLayer: token count must be >= 0, got ", tokens);
    return single_;
  }

  size_t workspace_bytes() const {
    size_t bytes = 0;
    for (const auto& [id, p] : prepared_) bytes = std::max(bytes, p->workspace_bytes());
    return bytes;
  }

  std::vector<std::string> backends() const {
    std::vector<std::string> ids;
    for (const auto& [id, p] : prepared_) ids.push_back(id);
    return ids;
  }

  void run(const InArray& hidden, const InArray& logits, const OutArray& out, const std::optional<OutArray>& workspace,
           uintptr_t stream, const std::optional<InArray>& correction_bias) {
    const int64_t H = problem_.hidden, E = problem_.num_experts;
    FP4MOE_CHECK(hidden.ndim() == 2 && static_cast<int64_t>(hidden.shape(1)) == H,
                 "MoeLayer.forward: hidden must be [tokens, ", H, "], got ", dims(hidden));
    const auto T = static_cast<int64_t>(hidden.shape(0));
    FP4MOE_CHECK(T <= max_tokens_, "MoeLayer.forward: ", T, " tokens exceed max_tokens=", max_tokens_,
                 " given when the layer was built");
    FP4MOE_CHECK(is_bf16_bits(hidden), "MoeLayer.forward: hidden must be bfloat16 (or uint16 BF16 bits)");
    check_shape(logits, "MoeLayer.forward: router_logits", {T, E});
    FP4MOE_CHECK(is_dtype(logits.dtype(), nb::dlpack::dtype_code::Float, 32),
                 "MoeLayer.forward: router_logits must be float32");
    check_shape(out, "MoeLayer.forward: out", {T, H});
    FP4MOE_CHECK(is_bf16_bits(out), "MoeLayer.forward: out must be bfloat16 (or uint16 BF16 bits)");
    if (correction_bias) {
      check_shape(*correction_bias, "MoeLayer.forward: correction_bias", {E});
      FP4MOE_CHECK(is_dtype(correction_bias->dtype(), nb::dlpack::dtype_code::Float, 32),
                   "MoeLayer.forward: correction_bias must be float32");
    }
    const bool host = device_ < 0;
    auto check_device = [&](int type, int id, const char* what) {
      if (host) {
        FP4MOE_CHECK(type == nb::device::cpu::value, "MoeLayer.forward: ", what,
                     " must be a host (CPU) array for this host layer (", single_, ")");
      } else {
        FP4MOE_CHECK(type == nb::device::cuda::value && id == device_, "MoeLayer.forward: ", what,
                     " must be on cuda:", device_, " (the layer's device), got device type ", type, " id ", id);
      }
    };
    check_device(hidden.device_type(), hidden.device_id(), "hidden");
    check_device(logits.device_type(), logits.device_id(), "router_logits");
    check_device(out.device_type(), out.device_id(), "out");
    if (correction_bias) check_device(correction_bias->device_type(), correction_bias->device_id(), "correction_bias");

    const std::string id = backend_for(T);
    PreparedMoe& prepared = *prepared_.at(id);
    MoeRunArgs args;
    args.hidden = hidden.data();
    args.router_logits = static_cast<const float*>(logits.data());
    args.correction_bias = correction_bias ? static_cast<const float*>(correction_bias->data()) : nullptr;
    args.tokens = T;
    args.out = out.data();
    args.stream = reinterpret_cast<void*>(stream);
    const size_t need = prepared.workspace_bytes();
    if (need > 0) {
      FP4MOE_CHECK(workspace.has_value(), "MoeLayer.forward: backend ", id, " needs a workspace of ", need, " bytes");
      check_device(workspace->device_type(), workspace->device_id(), "workspace");
      FP4MOE_CHECK(workspace->nbytes() >= need, "MoeLayer.forward: workspace has ", workspace->nbytes(),
                   " bytes, backend ", id, " needs ", need);
      args.workspace = workspace->data();
    }
    nb::gil_scoped_release release;
    prepared.run(args);
  }

  std::string problem() const { return problem_.describe(); }
  int device() const { return device_; }
  int64_t max_tokens() const { return max_tokens_; }
  const std::string& source() const { return source_; }
  const std::vector<std::string>& notices() const { return notices_; }

 private:
  MoeProblem problem_;
  int device_;
  int64_t max_tokens_;
  std::string source_;
  std::string single_;
  std::optional<MoeDispatch> dispatch_;
  std::map<std::string, std::unique_ptr<PreparedMoe>> prepared_;
  std::vector<std::string> notices_;
};

void bind_moe(nb::module_& m) {
  nb::class_<ProblemArgs>(m, "ProblemArgs", "The MoE problem of a layer (kernels/moe_problem.h).")
      .def(nb::init<>())
      .def_rw("hidden", &ProblemArgs::hidden)
      .def_rw("inter", &ProblemArgs::inter)
      .def_rw("num_experts", &ProblemArgs::num_experts)
      .def_rw("top_k", &ProblemArgs::top_k)
      .def_rw("routing", &ProblemArgs::routing)
      .def_rw("activation", &ProblemArgs::activation)
      .def_rw("n_group", &ProblemArgs::n_group)
      .def_rw("topk_group", &ProblemArgs::topk_group)
      .def_rw("routed_scaling_factor", &ProblemArgs::routed_scaling_factor)
      .def("describe", [](const ProblemArgs& a) { return make_problem(a).describe(); },
           "Validates and describes the problem, e.g. 'H=4096 I=1024 E=512 K=10 softmax_topk_renorm W4A16'.");

  nb::class_<MoeCore>(m, "MoeCore", "Routed experts prepared for a backend; see fp4moe.MoeLayer.")
      .def(nb::init<const ProblemArgs&, const HostArray<uint8_t>&, const HostArray<uint8_t>&, const HostArray<float>&,
                    const HostArray<float>&, const HostArray<uint8_t>&, const HostArray<uint8_t>&,
                    const HostArray<float>&, const HostArray<float>&, const HostArray<float>&, const std::string&, int,
                    int64_t>(),
           nb::arg("problem"), nb::arg("w13_packed").noconvert(), nb::arg("w13_scales").noconvert(),
           nb::arg("gate_scale2").noconvert(), nb::arg("up_scale2").noconvert(), nb::arg("w2_packed").noconvert(),
           nb::arg("w2_scales").noconvert(), nb::arg("down_scale2").noconvert(),
           nb::arg("w13_input_scale").noconvert(), nb::arg("w2_input_scale").noconvert(), nb::arg("backend"),
           nb::arg("device"), nb::arg("max_tokens"))
      .def("run", &MoeCore::run, nb::arg("hidden"), nb::arg("router_logits"), nb::arg("out"),
           nb::arg("workspace").none(), nb::arg("stream"), nb::arg("correction_bias").none(),
           "Runs the layer: out[T, H] (BF16) from hidden [T, H] (BF16) and router_logits [T, E] (fp32), on "
           "`stream` (a cudaStream_t as int; ignored by host backends). Never synchronizes.")
      .def("backend_for", &MoeCore::backend_for, nb::arg("tokens"), "The backend id that runs `tokens` tokens.")
      .def_prop_ro("workspace_bytes", &MoeCore::workspace_bytes)
      .def_prop_ro("backends", &MoeCore::backends, "Prepared backend ids.")
      .def_prop_ro("problem", &MoeCore::problem)
      .def_prop_ro("device", &MoeCore::device, "CUDA ordinal, or -1 for a host layer.")
      .def_prop_ro("max_tokens", &MoeCore::max_tokens)
      .def_prop_ro("source", &MoeCore::source, "How the backend was chosen: host, explicit, verdict or default.")
      .def_prop_ro("notices", &MoeCore::notices, "Warnings and notices of the backend choice.");

  m.def(
      "cached_verdict",
      [](const ProblemArgs& args, int device, int64_t max_tokens) -> std::optional<std::string> {
        const MoeProblem problem = make_problem(args);
        const std::optional<Verdict> v = load_cached_verdict(verdict_key(problem, find_device(device), max_tokens));
        if (!v) return std::nullopt;
        return verdict_to_json(*v);
      },
      nb::arg("problem"), nb::arg("device"), nb::arg("max_tokens"),
      "The cached qualification verdict (JSON text) for this problem on CUDA device `device`, or None.");
}

}  // namespace fp4moe::python
