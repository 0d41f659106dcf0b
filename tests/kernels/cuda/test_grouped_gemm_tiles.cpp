// The sm80 grouped GEMM's M-tile configurations (16, 64, 96, 128) compute bit-identical outputs: each
// output element is the same mma.sync sequence over K whatever the tile, warp layout, fragment
// interleaving or skipping of fragments past an expert's rows. The backend suite checks the tiles the
// backend picks on this GPU against the CPU reference; this test extends that to every configuration
// (the 64-row tile serves SM 8.6/8.9 parts, 128 is kept for tuning). Uneven experts (8..~100 rows)
// leave partial fragments and fully idle warp rows in every tile. Outputs are poisoned first. GEMM1
// reading the hidden rows through the sorted slots gives the bits of GEMM1 on the gathered rows.
#include <gtest/gtest.h>

#include <cmath>
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

TEST(CudaGroupedGemmTiles, EveryTileConfigurationGivesTheSameBits) {
  FP4MOE_REQUIRE_SM80(device);
  const int64_t H = 512, I = 256, E = 16, K = 4, max_t = 400;
  const MoeWeights w = synthetic_moe_weights(E, H, I, 21);
  const DeviceExpertWeights dw = upload_repacked_expert_weights(w, repack_nvfp4_for_mma);
  DeviceBuffer route_ws(moe_route_workspace_bytes(max_t, K, E, 16));
  const MoeRouteBuffers b = carve_moe_route_workspace(route_ws.get(), max_t, K, E, 16);
  DeviceBuffer rows(max_t * K * H * 2), h(max_t * K * I * 2), o(max_t * K * H * 4);
  configure_grouped_gemm_kernels();
  RoutingConfig rc;
  rc.method = RoutingMethod::kSoftmaxTopkRenorm, rc.num_experts = E, rc.top_k = K;
  for (int64_t T : {200, 400}) {
    DeviceBuffer hidden = DeviceBuffer::from_host(test::to_bf16_bits(synthetic_activations(T, H, 40 + T)));
    DeviceBuffer logits = DeviceBuffer::from_host(test::random_logits(T, E, 50 + T));
    std::vector<uint16_t> h_ref, h4_ref;
    std::vector<float> o_ref;
    for (int tile_m : kGemmTileMs) {
      if (device->shared_memory_per_block_optin < static_cast<int64_t>(grouped_gemm_smem_bytes(tile_m))) continue;
      const std::string label = "T=" + std::to_string(T) + " tile_m=" + std::to_string(tile_m);
      launch_moe_route(rc, logits.as<float>(), nullptr, T, b.topk_ids, b.topk_weights, nullptr);
      launch_moe_align(b, T, K, E, MTile{tile_m, 0}, nullptr);
      launch_moe_gather(hidden.get(), b, T, K, E, H, nullptr, rows.get(), nullptr);
      // No split: one pass over K.
      const auto [a1, a2] = test::sm80_w4a16_gemm_args(dw, b, T, K, E, H, I, tile_m, rows.get(), h.get(), o.get(), false);
      // W4A4 epilogue first (its h is only compared), then W4A16 h and the GEMM2 that reads it.
      FP4MOE_CUDA_CHECK(cudaMemset(h.get(), 0xFF, T * K * I * 2));
      launch_grouped_gemm_nvfp4w_bf16(a1, GemmEpilogue::kSwigluNvfp4, tile_m, nullptr);
      std::vector<uint16_t> h4(T * K * I);
      FP4MOE_CUDA_CHECK(cudaMemcpy(h4.data(), h.get(), h4.size() * 2, cudaMemcpyDeviceToHost));
      FP4MOE_CUDA_CHECK(cudaMemset(h.get(), 0xFF, T * K * I * 2));
      FP4MOE_CUDA_CHECK(cudaMemset(o.get(), 0xFF, T * K * H * 4));
      launch_grouped_gemm_nvfp4w_bf16(a1, GemmEpilogue::kSwiglu, tile_m, nullptr);
      launch_grouped_gemm_nvfp4w_bf16(a2, GemmEpilogue::kScaleFp32, tile_m, nullptr);
      std::vector<uint16_t> hv(T * K * I);
      std::vector<float> ov(T * K * H);
      FP4MOE_CUDA_CHECK(cudaMemcpy(hv.data(), h.get(), hv.size() * 2, cudaMemcpyDeviceToHost));
      FP4MOE_CUDA_CHECK(cudaMemcpy(ov.data(), o.get(), ov.size() * 4, cudaMemcpyDeviceToHost));
      // W4A16 GEMM1 reading the hidden rows in place through the sorted slots (no gather): same bits.
      GroupedGemmArgs a1_in_place = a1;
      a1_in_place.a = hidden.get();
      a1_in_place.a_slots = b.sorted_slots;
      a1_in_place.top_k = static_cast<int>(K);
      FP4MOE_CUDA_CHECK(cudaMemset(h.get(), 0xFF, T * K * I * 2));
      launch_grouped_gemm_nvfp4w_bf16(a1_in_place, GemmEpilogue::kSwiglu, tile_m, nullptr);
      std::vector<uint16_t> h_in_place(T * K * I);
      FP4MOE_CUDA_CHECK(cudaMemcpy(h_in_place.data(), h.get(), h_in_place.size() * 2, cudaMemcpyDeviceToHost));
      EXPECT_TRUE(h_in_place == hv) << "h " << label << ": reading A through the sorted slots differs from the gathered rows";
      test::expect_all_written_and_finite(h4, "h (W4A4) " + label);
      test::expect_all_written_and_finite(hv, "h " + label);
      int64_t o_bad = 0;
      for (float x : ov) o_bad += !std::isfinite(x);  // the 0xFF poison is a NaN
      EXPECT_EQ(o_bad, 0) << "o " << label << ": unwritten or non-finite elements";
      if (h_ref.empty()) {
        h_ref = hv, h4_ref = h4, o_ref = ov;
        continue;
      }
      EXPECT_TRUE(hv == h_ref) << "h " << label << " differs from tile_m 16";
      EXPECT_TRUE(h4 == h4_ref) << "h (W4A4) " << label << " differs from tile_m 16";
      EXPECT_EQ(std::memcmp(ov.data(), o_ref.data(), ov.size() * 4), 0) << "o " << label << " differs from tile_m 16";
    }
  }
}

}  // namespace
}  // namespace fp4moe
