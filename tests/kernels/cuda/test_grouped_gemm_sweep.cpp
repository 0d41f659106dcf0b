// Tuning sweep of the cuda.sm80.pipeline grouped GEMMs on the real Qwen3.5-397B expert count (label perf,
// not part of `ctest -L gpu`): H=4096, I=1024, E=512, K=10, so the rows per expert are those of the
// served model (about 80 at 4096 tokens, 320 at 16384), not the 640 of the 64-expert stage timing.
// Weights: 16 distinct synthetic experts repacked and uploaded, then copied 32 times on the device (each
// expert still has its own 7 MB, so the weight traffic is real). Prints one line per (tokens, tile_m)
// and per (tokens, split-K count) with CUDA-event medians of GEMM1 and GEMM2.
// Asserts what must hold whatever the speed: the M tiles 64/96/128 give bit-identical h and o (every
// output element is the same mma.sync sequence over K), and forced split counts agree with no split
// within fp32 reassociation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/pipeline_parts.h"
#include "format/synthetic.h"
#include "gpu_test_util.h"
#include "sm80_gemm_args.h"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm80.h"
#include "kernels/cuda/moe_route_permute.h"
#include "kernels/cuda/nvfp4_mma_layout.h"

namespace fp4moe {
namespace {

constexpr int64_t kH = 4096, kI = 1024, kE = 512, kK = 10, kDistinct = 16;

// 16 distinct experts repacked and uploaded once, replicated to 512 on the device.
DeviceExpertWeights make_weights() {
  const DeviceExpertWeights d =
      upload_repacked_expert_weights(synthetic_moe_weights(kDistinct, kH, kI, 5), repack_nvfp4_for_mma);
  auto replicate = [](const DeviceBuffer& src) {
    DeviceBuffer dst(src.bytes() * (kE / kDistinct));
    for (int64_t r = 0; r < kE / kDistinct; ++r)
      FP4MOE_CUDA_CHECK(cudaMemcpy(dst.as<uint8_t>() + r * src.bytes(), src.get(), src.bytes(), cudaMemcpyDeviceToDevice));
    return dst;
  };
  DeviceExpertWeights all;
  all.w13 = replicate(d.w13), all.w13_scales = replicate(d.w13_scales);
  all.w2 = replicate(d.w2), all.w2_scales = replicate(d.w2_scales);
  all.gate_scale2 = replicate(d.gate_scale2), all.up_scale2 = replicate(d.up_scale2);
  all.down_scale2 = replicate(d.down_scale2), all.w2_input_scale = replicate(d.w2_input_scale);
  return all;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename T>
std::vector<T> download(const void* src, size_t count) {
  std::vector<T> v(count);
  FP4MOE_CUDA_CHECK(cudaMemcpy(v.data(), src, count * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

TEST(CudaGroupedGemmSweep, Qwen35TilesAndSplits) {
  FP4MOE_REQUIRE_SM80(device);
  std::vector<int64_t> big_t = {1024, 2048, 4096, 16384}, small_t = {1, 2, 4, 8, 16};
  if (const char* env = std::getenv("FP4MOE_SWEEP_BIG_TOKENS")) big_t = {std::atoll(env)};
  const int64_t max_t = *std::max_element(big_t.begin(), big_t.end());
  const DeviceExpertWeights w = make_weights();
  const bool large_ok = device->shared_memory_per_block_optin >= static_cast<int64_t>(grouped_gemm_smem_bytes(128));
  DeviceBuffer route_ws(moe_route_workspace_bytes(max_t, kK, kE, 16));
  const MoeRouteBuffers b = carve_moe_route_workspace(route_ws.get(), max_t, kK, kE, 16);
  DeviceBuffer rows(max_t * kK * kH * 2), h(max_t * kK * kI * 2), o(max_t * kK * kH * 4);
  // Activations: 1024 synthetic rows tiled to max_t tokens (the values only need to be non-trivial).
  const std::vector<uint16_t> act = test::to_bf16_bits(synthetic_activations(1024, kH, 11));
  DeviceBuffer hidden(max_t * kH * 2);
  for (int64_t t0 = 0; t0 < max_t; t0 += 1024)
    FP4MOE_CUDA_CHECK(cudaMemcpy(hidden.as<uint16_t>() + t0 * kH, act.data(), std::min<int64_t>(1024, max_t - t0) * kH * 2,
                                 cudaMemcpyHostToDevice));
  configure_grouped_gemm_kernels();
  RoutingConfig rc;
  rc.method = RoutingMethod::kSoftmaxTopkRenorm, rc.num_experts = kE, rc.top_k = kK;
  cudaEvent_t ev[3];
  for (auto& e : ev) FP4MOE_CUDA_CHECK(cudaEventCreate(&e));

  auto gemm_args = [&](int64_t T, int tile_m) {
    return test::sm80_w4a16_gemm_args(w, b, T, kK, kE, kH, kI, tile_m, rows.get(), h.get(), o.get(), true);
  };
  // Times GEMM1 and GEMM2 (medians, us); `prepare(rep)` routes, aligns and gathers before each rep.
  auto time_gemms = [&](GroupedGemmArgs& a1, GroupedGemmArgs& a2, int tile_m, int reps, const auto& prepare) {
    std::vector<double> t1, t2;
    for (int rep = 0; rep < reps + 2; ++rep) {
      prepare(rep);
      FP4MOE_CUDA_CHECK(cudaEventRecord(ev[0]));
      launch_grouped_gemm_nvfp4w_bf16(a1, GemmEpilogue::kSwiglu, tile_m, nullptr);
      FP4MOE_CUDA_CHECK(cudaEventRecord(ev[1]));
      launch_grouped_gemm_nvfp4w_bf16(a2, GemmEpilogue::kScaleFp32, tile_m, nullptr);
      FP4MOE_CUDA_CHECK(cudaEventRecord(ev[2]));
      FP4MOE_CUDA_CHECK(cudaEventSynchronize(ev[2]));
      if (rep < 2) continue;
      float x = 0, y = 0;
      FP4MOE_CUDA_CHECK(cudaEventElapsedTime(&x, ev[0], ev[1]));
      FP4MOE_CUDA_CHECK(cudaEventElapsedTime(&y, ev[1], ev[2]));
      t1.push_back(x * 1e3), t2.push_back(y * 1e3);
    }
    return std::make_pair(median(t1), median(t2));
  };

  // 1. M tiles at prefill token counts (one routing per T; all 512 experts touched, weights cold in L2).
  for (int64_t T : big_t) {
    DeviceBuffer logits = DeviceBuffer::from_host(test::random_logits(T, kE, 100 + T));
    std::vector<uint16_t> h_ref;
    std::vector<float> o_ref;
    int ref_tile = 0;
    for (int tile_m : kGemmTileMs) {
      if (tile_m == 16 || (tile_m > 64 && !large_ok)) continue;
      launch_moe_route(rc, logits.as<float>(), nullptr, T, b.topk_ids, b.topk_weights, nullptr);
      launch_moe_align(b, T, kK, kE, MTile{tile_m, 0}, nullptr);
      launch_moe_gather(hidden.get(), b, T, kK, kE, kH, nullptr, rows.get(), nullptr);
      auto [a1, a2] = gemm_args(T, tile_m);
      const auto [us1, us2] = time_gemms(a1, a2, tile_m, T >= 16384 ? 5 : 10, [](int) {});
      const double f1 = 2.0 * T * kK * 2 * kI * kH, f2 = 2.0 * T * kK * kI * kH;
      std::printf("[ sweep ] T=%-5lld tile_m=%-3d GEMM1 %8.1f us (%5.1f TF/s)  GEMM2 %8.1f us (%5.1f TF/s)  sum %8.1f us (%5.1f TF/s)\n",
                  static_cast<long long>(T), tile_m, us1, f1 / (us1 * 1e6), us2, f2 / (us2 * 1e6), us1 + us2,
                  (f1 + f2) / ((us1 + us2) * 1e6));
      std::vector<uint16_t> hv = download<uint16_t>(h.get(), T * kK * kI);
      std::vector<float> ov = download<float>(o.get(), T * kK * kH);
      if (h_ref.empty()) {
        h_ref = std::move(hv), o_ref = std::move(ov), ref_tile = tile_m;
        test::expect_all_written_and_finite(h_ref, "h T=" + std::to_string(T));
      } else {
        EXPECT_TRUE(hv == h_ref) << "T=" << T << ": h of tile_m " << tile_m << " differs from tile_m " << ref_tile;
        EXPECT_EQ(std::memcmp(ov.data(), o_ref.data(), ov.size() * 4), 0)
            << "T=" << T << ": o of tile_m " << tile_m << " differs from tile_m " << ref_tile;
      }
    }
  }

  // 2. Split-K counts of the decode tile (fresh routing per rep from 8 logit sets, so the touched
  //    experts' weights are not L2-resident from the previous rep).
  for (int64_t T : small_t) {
    std::vector<DeviceBuffer> logit_sets;
    for (int s = 0; s < 8; ++s) logit_sets.push_back(DeviceBuffer::from_host(test::random_logits(T, kE, 7000 + 31 * s + T)));
    auto prepare = [&](int rep) {
      launch_moe_route(rc, logit_sets[rep % 8].as<float>(), nullptr, T, b.topk_ids, b.topk_weights, nullptr);
      launch_moe_align(b, T, kK, kE, MTile{16, 0}, nullptr);
      launch_moe_gather(hidden.get(), b, T, kK, kE, kH, nullptr, rows.get(), nullptr);
    };
    std::vector<uint16_t> h_one;
    for (int splits = 0; splits <= kMaxKSplits; ++splits) {
      auto [a1, a2] = gemm_args(T, 16);
      a1.k_splits = splits, a2.k_splits = splits;
      const auto [us1, us2] = time_gemms(a1, a2, 16, 40, prepare);
      const std::string label =
          splits > 0 ? std::to_string(splits)
                     : "auto(" + std::to_string(grouped_gemm_k_splits(2 * kI, kH, T * kK, static_cast<int>(kE), 16, a1.decode_residency, GemmEpilogue::kSwiglu, false)) + "/" +
                           std::to_string(grouped_gemm_k_splits(kH, kI, T * kK, static_cast<int>(kE), 16, a2.decode_residency, GemmEpilogue::kScaleFp32, false)) + ")";
      std::printf("[ sweep ] T=%-5lld tile_m=16  splits=%-9s GEMM1 %6.1f us  GEMM2 %6.1f us  sum %6.1f us\n",
                  static_cast<long long>(T), label.c_str(),
                  us1, us2, us1 + us2);
      // Same routing (the last rep's) for every split count: h agrees within fp32 reassociation.
      prepare(0);
      launch_grouped_gemm_nvfp4w_bf16(a1, GemmEpilogue::kSwiglu, 16, nullptr);
      std::vector<uint16_t> hv = download<uint16_t>(h.get(), T * kK * kI);
      test::expect_all_written_and_finite(hv, "split h T=" + std::to_string(T));
      if (splits == 1) h_one = hv;
      if (splits > 1) {
        double max_diff = 0.0, max_abs = 0.0;
        for (size_t i = 0; i < hv.size(); ++i) {
          const double x = bf16_to_float(hv[i]), y = bf16_to_float(h_one[i]);
          max_diff = std::max(max_diff, std::fabs(x - y)), max_abs = std::max(max_abs, std::fabs(y));
        }
        EXPECT_LE(max_diff, 1e-2 * max_abs) << "T=" << T << " splits=" << splits << " vs 1";
      }
    }
  }
  for (auto& e : ev) FP4MOE_CUDA_CHECK(cudaEventDestroy(e));
}

}  // namespace
}  // namespace fp4moe
