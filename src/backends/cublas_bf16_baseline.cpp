// cuda.cublas_bf16.baseline.v1 (cublas_bf16_baseline.h): prepare dequantizes on the device, run
// routes/permutes with the pipeline's launchers and multiplies with cuBLAS.
#include "backends/cublas_bf16_baseline.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "backends/cublas_bf16_baseline_kernels.h"
#include "backends/cublas_check.h"
#include "common/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/moe_route_permute.h"

namespace fp4moe {
namespace {

constexpr std::string_view kId = "cuda.cublas_bf16.baseline.v1";
constexpr int kAlignTileM = 128;  // the align step's tile list is unused here; any tile size works
constexpr size_t kAlign = 256;

size_t align_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Pinned host memory (cudaHostAlloc), for the per-run count download and pointer upload.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t bytes) {
    if (bytes > 0) FP4MOE_CUDA_CHECK(cudaHostAlloc(&data_, bytes, cudaHostAllocDefault));
  }
  ~PinnedBuffer() {
    if (data_) cudaFreeHost(data_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }

 private:
  void* data_ = nullptr;
};

// Workspace layout for max_tokens (all pieces 256-byte aligned).
struct Layout {
  size_t route = 0, rows = 0, gate_up = 0, h = 0, expert_out = 0, pointers = 0, total = 0;
  Layout(const MoeProblem& p, int64_t max_tokens) {
    const auto slots = static_cast<size_t>(max_tokens * p.top_k);
    route = align_up(moe_route_workspace_bytes(max_tokens, static_cast<int>(p.top_k), static_cast<int>(p.num_experts),
                                               kAlignTileM));
    rows = align_up(slots * static_cast<size_t>(p.hidden) * 2);
    gate_up = align_up(slots * static_cast<size_t>(2 * p.inter) * 2);
    h = align_up(slots * static_cast<size_t>(p.inter) * 2);
    expert_out = align_up(slots * static_cast<size_t>(p.hidden) * 2);
    pointers = align_up(static_cast<size_t>(6 * p.num_experts) * sizeof(void*));
    total = route + rows + gate_up + h + expert_out + pointers;
  }
};

class PreparedBaseline final : public PreparedMoe {
 public:
  PreparedBaseline(const MoeProblem& problem, const MoeWeights& weights, int64_t max_tokens, BaselineGemmMode mode)
      : problem_(problem), max_tokens_(max_tokens), mode_(mode), layout_(problem, max_tokens),
        counts_host_(static_cast<size_t>(problem.num_experts) * sizeof(int32_t)),
        pointers_host_(static_cast<size_t>(6 * problem.num_experts) * sizeof(void*)) {
    const int64_t E = problem.num_experts, H = problem.hidden, I = problem.inter;
    FP4MOE_CHECK(weights.num_experts == E && weights.hidden == H && weights.inter == I,
                 kId, ": weights shape (E=", weights.num_experts, " H=", weights.hidden, " I=", weights.inter,
                 ") does not match the problem (", problem.describe(), ")");
    weights.validate();
    w13_ = DeviceBuffer(static_cast<size_t>(E * 2 * I * H) * 2);
    w2_ = DeviceBuffer(static_cast<size_t>(E * H * I) * 2);
    DeviceBuffer gate_scale = DeviceBuffer::from_host(weights.gate_scale2);
    DeviceBuffer up_scale = DeviceBuffer::from_host(weights.up_scale2);
    DeviceBuffer down_scale = DeviceBuffer::from_host(weights.down_scale2);
    // Dequantize in chunks of experts so the NVFP4 staging stays small next to the BF16 result.
    const int64_t chunk = std::min<int64_t>(E, 32);
    DeviceBuffer packed(static_cast<size_t>(chunk * std::max(2 * I * H, H * I) / 2));
    DeviceBuffer scales(static_cast<size_t>(chunk * std::max(2 * I * H, H * I) / 16));
    for (int64_t e0 = 0; e0 < E; e0 += chunk) {
      const int64_t n = std::min(chunk, E - e0);
      // w13: rows [0, I) gate with gate_scale2, [I, 2I) up with up_scale2.
      const size_t w13_elems = static_cast<size_t>(n * 2 * I * H);
      FP4MOE_CUDA_CHECK(cudaMemcpy(packed.get(), weights.w13_packed.data() + e0 * 2 * I * H / 2, w13_elems / 2,
                                   cudaMemcpyHostToDevice));
      FP4MOE_CUDA_CHECK(cudaMemcpy(scales.get(), weights.w13_scales.data() + e0 * 2 * I * H / 16, w13_elems / 16,
                                   cudaMemcpyHostToDevice));
      launch_dequantize_nvfp4_bf16(packed.as<uint8_t>(), scales.as<uint8_t>(), n * 2 * I, H, e0, 2 * I, I,
                                   gate_scale.as<float>(), up_scale.as<float>(),
                                   w13_.as<uint16_t>() + e0 * 2 * I * H, nullptr);
      FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());  // the staging buffers are reused next
      const size_t w2_elems = static_cast<size_t>(n * H * I);
      FP4MOE_CUDA_CHECK(cudaMemcpy(packed.get(), weights.w2_packed.data() + e0 * H * I / 2, w2_elems / 2,
                                   cudaMemcpyHostToDevice));
      FP4MOE_CUDA_CHECK(cudaMemcpy(scales.get(), weights.w2_scales.data() + e0 * H * I / 16, w2_elems / 16,
                                   cudaMemcpyHostToDevice));
      launch_dequantize_nvfp4_bf16(packed.as<uint8_t>(), scales.as<uint8_t>(), n * H, I, e0, H, H,
                                   down_scale.as<float>(), down_scale.as<float>(), w2_.as<uint16_t>() + e0 * H * I,
                                   nullptr);
      FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
    }
    FP4MOE_CUBLAS_CHECK(cublasCreate(&handle_));
    FP4MOE_CUDA_CHECK(cudaEventCreateWithFlags(&pointers_copied_, cudaEventDisableTiming));
    FP4MOE_CUDA_CHECK(cudaEventRecord(pointers_copied_, nullptr));
  }

  ~PreparedBaseline() override {
    if (pointers_copied_) {
      cudaEventSynchronize(pointers_copied_);
      cudaEventDestroy(pointers_copied_);
    }
    if (handle_) cublasDestroy(handle_);
  }

  size_t workspace_bytes() const override { return layout_.total; }
  int64_t max_tokens() const override { return max_tokens_; }

  void run(const MoeRunArgs& args) override {
    const int64_t T = args.tokens;
    FP4MOE_CHECK(T >= 0 && T <= max_tokens_, kId, ": tokens ", T, " outside [0, max_tokens = ", max_tokens_, "]");
    if (T == 0) return;
    FP4MOE_CHECK(args.hidden && args.router_logits && args.out && args.workspace, kId,
                 ": hidden, router_logits, out and workspace must be non-null");
    auto stream = static_cast<cudaStream_t>(args.stream);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    FP4MOE_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    FP4MOE_CHECK(capture == cudaStreamCaptureStatusNone, kId,
                 " cannot be captured in a CUDA graph: cuBLAS takes the per-expert row counts on the host, so "
                 "every run copies them to the host and waits");

    const int K = static_cast<int>(problem_.top_k), E = static_cast<int>(problem_.num_experts);
    const int64_t H = problem_.hidden, I = problem_.inter;
    auto* base = static_cast<char*>(args.workspace);
    const MoeRouteBuffers route = carve_moe_route_workspace(base, max_tokens_, K, E, kAlignTileM);
    base += layout_.route;
    auto* rows = reinterpret_cast<uint16_t*>(base);
    base += layout_.rows;
    auto* gate_up = reinterpret_cast<uint16_t*>(base);
    base += layout_.gate_up;
    auto* h = reinterpret_cast<uint16_t*>(base);
    base += layout_.h;
    auto* expert_out = reinterpret_cast<uint16_t*>(base);
    base += layout_.expert_out;
    auto** pointers_device = reinterpret_cast<void**>(base);

    launch_moe_route_align(problem_.routing, args.router_logits, args.correction_bias, route, T, MTile{kAlignTileM, 0},
                           stream);
    launch_moe_gather(args.hidden, route, T, K, E, H, nullptr, rows, stream);
    // The one host synchronization: the per-expert row counts.
    FP4MOE_CUDA_CHECK(cudaMemcpyAsync(counts_host_.as<int32_t>(), route.expert_counts, sizeof(int32_t) * E,
                                      cudaMemcpyDeviceToHost, stream));
    FP4MOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    FP4MOE_CUDA_CHECK(cudaEventSynchronize(pointers_copied_));  // the staging below may be in flight (other stream)

    // Non-empty experts, ordered by row count so that equal counts form one cuBLAS group.
    const int32_t* counts = counts_host_.as<int32_t>();
    offsets_.assign(static_cast<size_t>(E) + 1, 0);
    for (int e = 0; e < E; ++e) offsets_[static_cast<size_t>(e) + 1] = offsets_[static_cast<size_t>(e)] + counts[e];
    FP4MOE_CHECK(offsets_.back() == T * K, kId, ": routed rows ", offsets_.back(), " != T*K = ", T * K);
    experts_.clear();
    for (int e = 0; e < E; ++e)
      if (counts[e] > 0) experts_.push_back(e);
    std::stable_sort(experts_.begin(), experts_.end(), [&](int a, int b) { return counts[a] < counts[b]; });
    const size_t n = experts_.size();

    const auto* w13 = w13_.as<uint16_t>();
    const auto* w2 = w2_.as<uint16_t>();
    const float alpha = 1.0f, beta = 0.0f;
    if (mode_ == BaselineGemmMode::kPerExpert) {
      FP4MOE_CUBLAS_CHECK(cublasSetStream(handle_, stream));
      for (int e : experts_) gemm1_one(e, counts[e], w13, rows, gate_up, alpha, beta);
      launch_swiglu_bf16(gate_up, T * K, I, h, stream);
      for (int e : experts_) gemm2_one(e, counts[e], w2, h, expert_out, alpha, beta);
    } else {
      // Device pointer arrays: [A1 | B1 | C1 | A2 | B2 | C2], n entries each, in group order.
      void** staged = pointers_host_.as<void*>();
      for (size_t i = 0; i < n; ++i) {
        const auto e = static_cast<size_t>(experts_[i]);
        const auto row0 = static_cast<size_t>(offsets_[e]);
        staged[i] = const_cast<uint16_t*>(w13) + e * static_cast<size_t>(2 * I * H);
        staged[n + i] = rows + row0 * static_cast<size_t>(H);
        staged[2 * n + i] = gate_up + row0 * static_cast<size_t>(2 * I);
        staged[3 * n + i] = const_cast<uint16_t*>(w2) + e * static_cast<size_t>(H * I);
        staged[4 * n + i] = h + row0 * static_cast<size_t>(I);
        staged[5 * n + i] = expert_out + row0 * static_cast<size_t>(H);
      }
      FP4MOE_CUDA_CHECK(cudaMemcpyAsync(pointers_device, staged, 6 * n * sizeof(void*), cudaMemcpyHostToDevice, stream));
      FP4MOE_CUDA_CHECK(cudaEventRecord(pointers_copied_, stream));
      // Groups: runs of equal row counts.
      group_sizes_.clear();
      group_m_.clear();
      for (size_t i = 0; i < n; ++i) {
        const int m = counts[experts_[i]];
        if (group_m_.empty() || group_m_.back() != m) {
          group_m_.push_back(m);
          group_sizes_.push_back(0);
        }
        ++group_sizes_.back();
      }
      FP4MOE_CUBLAS_CHECK(cublasSetStream(handle_, stream));
      grouped(static_cast<int>(2 * I), static_cast<int>(H), pointers_device, pointers_device + n,
              pointers_device + 2 * n);
      launch_swiglu_bf16(gate_up, T * K, I, h, stream);
      grouped(static_cast<int>(H), static_cast<int>(I), pointers_device + 3 * n, pointers_device + 4 * n,
              pointers_device + 5 * n);
    }
    launch_moe_combine_bf16(expert_out, route, T, K, H, args.out, /*route_final_at_launch=*/true, stream);
  }

 private:
  // Row-major C[m, n_out] = X[m, k] * W[n_out, k]^T is column-major C^T = W^T(op T of W's storage) * X:
  // cuBLAS m = n_out, n = rows of the expert, k = k; A = W (lda k, transposed), B = X (ldb k).
  void gemm1_one(int e, int m, const uint16_t* w13, const uint16_t* rows, uint16_t* gate_up, float alpha, float beta) {
    const int64_t H = problem_.hidden, I = problem_.inter;
    const auto row0 = static_cast<size_t>(offsets_[static_cast<size_t>(e)]);
    FP4MOE_CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(2 * I), m, static_cast<int>(H),
                                     &alpha, w13 + static_cast<size_t>(e) * 2 * I * H, CUDA_R_16BF, static_cast<int>(H),
                                     rows + row0 * H, CUDA_R_16BF, static_cast<int>(H), &beta,
                                     gate_up + row0 * 2 * I, CUDA_R_16BF, static_cast<int>(2 * I), CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
  }
  void gemm2_one(int e, int m, const uint16_t* w2, const uint16_t* h, uint16_t* expert_out, float alpha, float beta) {
    const int64_t H = problem_.hidden, I = problem_.inter;
    const auto row0 = static_cast<size_t>(offsets_[static_cast<size_t>(e)]);
    FP4MOE_CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(H), m, static_cast<int>(I),
                                     &alpha, w2 + static_cast<size_t>(e) * H * I, CUDA_R_16BF, static_cast<int>(I),
                                     h + row0 * I, CUDA_R_16BF, static_cast<int>(I), &beta, expert_out + row0 * H,
                                     CUDA_R_16BF, static_cast<int>(H), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  // One grouped GEMM over the current groups: per group, C^T[n_out, m] = W^T * X^T with k inner.
  void grouped(int n_out, int k, void** a, void** b, void** c) {
    const size_t groups = group_m_.size();
    trans_a_.assign(groups, CUBLAS_OP_T);
    trans_b_.assign(groups, CUBLAS_OP_N);
    m_.assign(groups, n_out);
    k_.assign(groups, k);
    lda_.assign(groups, k);
    ldc_.assign(groups, n_out);
    alpha_.assign(groups, 1.0f);
    beta_.assign(groups, 0.0f);
    FP4MOE_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
        handle_, trans_a_.data(), trans_b_.data(), m_.data(), group_m_.data(), k_.data(), alpha_.data(), a,
        CUDA_R_16BF, lda_.data(), b, CUDA_R_16BF, lda_.data(), beta_.data(), c, CUDA_R_16BF, ldc_.data(),
        static_cast<int>(groups), group_sizes_.data(), CUBLAS_COMPUTE_32F));
  }

  MoeProblem problem_;
  int64_t max_tokens_;
  BaselineGemmMode mode_;
  Layout layout_;
  DeviceBuffer w13_, w2_;  // BF16 [E, 2I, H], [E, H, I]
  PinnedBuffer counts_host_, pointers_host_;
  cublasHandle_t handle_ = nullptr;
  cudaEvent_t pointers_copied_ = nullptr;
  // Per-run host scratch, kept to avoid allocating on every run.
  std::vector<int64_t> offsets_;
  std::vector<int> experts_, group_m_, group_sizes_, m_, k_, lda_, ldc_;
  std::vector<cublasOperation_t> trans_a_, trans_b_;
  std::vector<float> alpha_, beta_;
};

class CublasBf16Baseline final : public MoeBackend {
 public:
  explicit CublasBf16Baseline(BaselineGemmMode mode) : mode_(mode) {}
  std::string_view id() const override { return kId; }

  Support supports(const MoeProblem& problem, const DeviceInfo& device) const override {
    if (device.sm() < 80) return Support::no("needs SM80+ for BF16 tensor-core GEMMs (device is SM" + std::to_string(device.sm()) + ")");
    if (problem.activation_mode != ActivationMode::kW4A16)
      return Support::no("the cuBLAS BF16 baseline multiplies BF16 activations; W4A4 is not emulated");
    if (problem.top_k > 32 || problem.num_experts > 1024)
      return Support::no("routing kernel limits: top_k <= 32 and num_experts <= 1024");
    if (problem.hidden % 16 != 0 || problem.inter % 16 != 0)
      return Support::no("hidden and inter must be multiples of 16");
    const double bf16_bytes = 2.0 * 3.0 * static_cast<double>(problem.num_experts * problem.hidden * problem.inter);
    if (device.memory_bytes > 0 && bf16_bytes > 0.9 * static_cast<double>(device.memory_bytes))
      return Support::no("the BF16 expert weights (" + std::to_string(bf16_bytes / 1e9) + " GB) do not fit in device memory");
    return Support::yes();
  }

  std::unique_ptr<PreparedMoe> prepare(const MoeProblem& problem, const MoeWeights& weights, int64_t max_tokens,
                                       const DeviceInfo& device) const override {
    problem.validate();
    const Support support = supports(problem, device);
    FP4MOE_CHECK(support.ok, kId, " does not support ", problem.describe(), ": ", support.reason);
    FP4MOE_CHECK(max_tokens >= 1, kId, ": max_tokens must be >= 1 (got ", max_tokens, ")");
    FP4MOE_CHECK(max_tokens * problem.top_k <= (int64_t{1} << 30), kId, ": max_tokens * top_k too large for int32 rows");
    FP4MOE_CUDA_CHECK(cudaSetDevice(device.ordinal));
    return std::make_unique<PreparedBaseline>(problem, weights, max_tokens, mode_);
  }

 private:
  BaselineGemmMode mode_;
};

}  // namespace

std::unique_ptr<MoeBackend> make_cublas_bf16_baseline_backend() {
  return make_cublas_bf16_baseline_backend(BaselineGemmMode::kGrouped);
}
std::unique_ptr<MoeBackend> make_cublas_bf16_baseline_backend(BaselineGemmMode mode) {
  return std::make_unique<CublasBf16Baseline>(mode);
}

}  // namespace fp4moe
