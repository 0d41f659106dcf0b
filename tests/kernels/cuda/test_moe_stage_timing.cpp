// Stage timings of the cuda.sm80.pipeline kernels (label perf, not part of `ctest -L gpu`): route,
// align, gather, GEMM1, GEMM2, combine timed with CUDA events on a Qwen3.5-397B-shaped layer (H=4096,
// I=1024, K=10; 64 experts so the synthetic weights build fast). Prints one line per token count.
// It asserts only that the pipeline ran; the numbers are for tuning (tools/gpu/check.sh, FP4MOE_GPU_PERF=1).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "backends/cuda_sm80_pipeline.h"
#include "backends/pipeline_parts.h"
#include "format/synthetic.h"
#include "gpu_test_util.h"
#include "sm80_gemm_args.h"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm80.h"
#include "kernels/cuda/moe_route_permute.h"
#include "kernels/cuda/nvfp4_mma_layout.h"

namespace fp4moe {
namespace {

TEST(CudaMoeStageTiming, Qwen35Shape) {
  FP4MOE_REQUIRE_SM80(device);
  const int64_t H = 4096, I = 1024, E = 64, K = 10, max_t = 4096;
  const MoeWeights w = synthetic_moe_weights(E, H, I, 1);
  const DeviceExpertWeights dw = upload_repacked_expert_weights(w, repack_nvfp4_for_mma);
  DeviceBuffer route_ws(moe_route_workspace_bytes(max_t, K, E, 16));
  const MoeRouteBuffers b = carve_moe_route_workspace(route_ws.get(), max_t, K, E, 16);
  DeviceBuffer rows(max_t * K * H * 2), h(max_t * K * I * 2), o(max_t * K * H * 4), out(max_t * H * 2);
  configure_grouped_gemm_kernels();
  RoutingConfig rc;
  rc.method = RoutingMethod::kSoftmaxTopkRenorm, rc.num_experts = E, rc.top_k = K;
  cudaEvent_t ev[7];
  for (auto& e : ev) FP4MOE_CUDA_CHECK(cudaEventCreate(&e));
  std::vector<int64_t> token_counts = {1, 4, 16, 64, 256, 1024, 4096};
  if (const char* env = std::getenv("FP4MOE_TIMING_TOKENS")) token_counts = {std::atoll(env)};  // e.g. under ncu
  for (int64_t T : token_counts) {
    DeviceBuffer hidden = DeviceBuffer::from_host(test::to_bf16_bits(synthetic_activations(T, H, T)));
    DeviceBuffer logits = DeviceBuffer::from_host(test::random_logits(T, E, T));
    const Sm80PipelineTile tile =
        sm80_pipeline_tile(T, K, 512, device->shared_memory_per_block_optin >= 140000);
    const int tile_m = tile.m;
    auto [a1, a2] = test::sm80_w4a16_gemm_args(dw, b, T, K, E, H, I, tile_m, rows.get(), h.get(), o.get(), true);
    a1.tile96_warps = a2.tile96_warps = tile.tile96_warps;  // the backend's layout for T
    double ms[6] = {};
    const int reps = 20;
    for (int rep = 0; rep < reps + 2; ++rep) {
      FP4MOE_CUDA_CHECK(cudaEventRecord(ev[0]));
      launch_moe_route(rc, logits.as<float>(), nullptr, T, b.topk_ids, b.topk_weights, nullptr);
      FP4MOE_CUDA_CHECK(cudaEventRecord(ev[1]));
      launch_moe_align(b, T, K, E, MTile{tile_m, 0}, nullptr);
      FP4MOE_CUDA_CHECK(cudaEventRecord(ev[2]));
      launch_moe_gather(hidden.get(), b, T, K, E, H, nullptr, rows.get(), nullptr);
      FP4MOE_CUDA_CHECK(cudaEventRecord(ev[3]));
      launch_grouped_gemm_nvfp4w_bf16(a1, GemmEpilogue::kSwiglu, tile_m, nullptr);
      FP4MOE_CUDA_CHECK(cudaEventRecord(ev[4]));
      launch_grouped_gemm_nvfp4w_bf16(a2, GemmEpilogue::kScaleFp32, tile_m, nullptr);
      FP4MOE_CUDA_CHECK(cudaEventRecord(ev[5]));
      launch_moe_combine(o.as<float>(), b, T, K, H, out.get(), /*route_final_at_launch=*/true, nullptr);
      FP4MOE_CUDA_CHECK(cudaEventRecord(ev[6]));
      FP4MOE_CUDA_CHECK(cudaEventSynchronize(ev[6]));
      if (rep < 2) continue;
      for (int s = 0; s < 6; ++s) {
        float t = 0;
        FP4MOE_CUDA_CHECK(cudaEventElapsedTime(&t, ev[s], ev[s + 1]));
        ms[s] += t / reps;
      }
    }
    std::vector<int32_t> counts(E);
    FP4MOE_CUDA_CHECK(cudaMemcpy(counts.data(), b.expert_counts, E * 4, cudaMemcpyDeviceToHost));
    int touched = 0;
    for (int32_t c : counts) touched += c > 0;
    const double gemm_bytes1 = touched * (2.0 * I * H * 9 / 16), gemm_bytes2 = touched * (1.0 * I * H * 9 / 16);
    const double flops1 = 2.0 * T * K * 2 * I * H, flops2 = 2.0 * T * K * I * H;
    std::printf("[ timing ] T=%-5lld tile_m=%-3d splits=%d/%d touched=%-3d route %.1f align %.1f gather %.1f | GEMM1 %.1f us (%.0f GB/s, %.1f TF/s) "
                "GEMM2 %.1f us (%.0f GB/s, %.1f TF/s) | combine %.1f  total %.1f us\n",
                static_cast<long long>(T), tile_m, grouped_gemm_k_splits(2 * I, H, T * K, static_cast<int>(E), tile_m, a1.decode_residency, GemmEpilogue::kSwiglu, false),
                grouped_gemm_k_splits(H, I, T * K, static_cast<int>(E), tile_m, a2.decode_residency, GemmEpilogue::kScaleFp32, false), touched, ms[0] * 1e3, ms[1] * 1e3, ms[2] * 1e3, ms[3] * 1e3,
                gemm_bytes1 / (ms[3] * 1e6), flops1 / (ms[3] * 1e9), ms[4] * 1e3, gemm_bytes2 / (ms[4] * 1e6),
                flops2 / (ms[4] * 1e9), ms[5] * 1e3, (ms[0] + ms[1] + ms[2] + ms[3] + ms[4] + ms[5]) * 1e3);
    EXPECT_GT(touched, 0);
  }
  for (auto& e : ev) FP4MOE_CUDA_CHECK(cudaEventDestroy(e));
}

}  // namespace
}  // namespace fp4moe
