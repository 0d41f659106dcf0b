// The sm80 grouped GEMM's M-tile configurations (16, 64, 96, 128) compute bit-identical outputs: each
// output element is the same mma.sync sequence over K whatever the tile, warp layout, fragment
// interleaving or skipping of fragments past an expert's rows. The backend suite checks the tiles the
// backend picks on this GPU against the CPU reference; this test extends that to every configuration
// (the 64-row tile serves SM 8.6/8.9 parts, 128 is kept for tuning). Uneven experts (8..~100 rows)
// leave partial fragments and fully idle warp rows in every tile. Outputs are poisoned first. GEMM1
// reading the hidden rows through the sorted slots gives the bits of GEMM1 on the gathered rows.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backends/pipeline_parts.h"
#include "common/error.h"
#include "format/synthetic.h"
#include "gpu_test_util.h"
#include "sm80_gemm_args.h"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm80.h"
#include "kernels/cuda/moe_route_permute.h"
#include "kernels/cuda/nvfp4_mma_layout.h"

namespace fp4moe {
namespace {

// A small layer (H 512, I 256, 16 experts, top 4) with its repacked weights, route workspace and stage
// buffers for up to max_t tokens, and the grouped GEMM configured.
struct SmallLayer {
  static constexpr int64_t H = 512, I = 256, E = 16, K = 4;
  SmallLayer(int64_t max_t, uint64_t weight_seed)
      : host(synthetic_moe_weights(E, H, I, weight_seed)),
        weights(upload_repacked_expert_weights(host, repack_nvfp4_for_mma)),
        route_ws(moe_route_workspace_bytes(max_t, K, E, 16)),
        route(carve_moe_route_workspace(route_ws.get(), max_t, K, E, 16)),
        rows(max_t * K * H * 2),
        h(max_t * K * I * 2),
        o(max_t * K * H * 4) {
    configure_grouped_gemm_kernels();
  }
  // Routes T tokens (logits from logits_seed) and sorts them into tile_m tiles; gathers their rows.
  void route_and_gather(const DeviceBuffer& hidden, int64_t T, uint64_t logits_seed, int tile_m) {
    RoutingConfig rc;
    rc.method = RoutingMethod::kSoftmaxTopkRenorm, rc.num_experts = E, rc.top_k = K;
    DeviceBuffer logits = DeviceBuffer::from_host(test::random_logits(T, E, logits_seed));
    launch_moe_route(rc, logits.as<float>(), nullptr, T, route.topk_ids, route.topk_weights, nullptr);
    launch_moe_align(route, T, K, E, MTile{tile_m, 0}, nullptr);
    launch_moe_gather(hidden.get(), route, T, K, E, H, nullptr, rows.get(), nullptr);
  }
  MoeWeights host;
  DeviceExpertWeights weights;  // without the normal-scale flags: the scale table everywhere
  DeviceBuffer route_ws;
  MoeRouteBuffers route;
  DeviceBuffer rows, h, o;
};

TEST(CudaGroupedGemmTiles, EveryTileConfigurationGivesTheSameBits) {
  FP4MOE_REQUIRE_SM80(device);
  SmallLayer layer(400, 21);
  const int64_t H = SmallLayer::H, I = SmallLayer::I, E = SmallLayer::E, K = SmallLayer::K;
  const DeviceExpertWeights& dw = layer.weights;
  const MoeRouteBuffers& b = layer.route;
  DeviceBuffer &rows = layer.rows, &h = layer.h, &o = layer.o;
  for (int64_t T : {200, 400}) {
    DeviceBuffer hidden = DeviceBuffer::from_host(test::to_bf16_bits(synthetic_activations(T, H, 40 + T)));
    std::vector<uint16_t> h_ref, h4_ref;
    std::vector<float> o_ref;
    // Every M tile, and the 96-row tile in both warp layouts.
    std::vector<std::pair<int, Tile96Warps>> tiles;
    for (int tile_m : kGemmTileMs) tiles.emplace_back(tile_m, Tile96Warps::kEight);
    tiles.emplace_back(96, Tile96Warps::kFour);
    for (const auto& [tile_m, warps] : tiles) {
      if (device->shared_memory_per_block_optin < static_cast<int64_t>(grouped_gemm_smem_bytes(tile_m))) continue;
      const std::string label = "T=" + std::to_string(T) + " tile_m=" + std::to_string(tile_m) +
                                (warps == Tile96Warps::kFour ? " (four warps)" : "");
      layer.route_and_gather(hidden, T, 50 + T, tile_m);
      // No split: one pass over K.
      auto [a1, a2] = test::sm80_w4a16_gemm_args(dw, b, T, K, E, H, I, tile_m, rows.get(), h.get(), o.get(), false);
      a1.tile96_warps = a2.tile96_warps = warps;
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
      test::expect_all_written_and_finite(ov, "o " + label);
      if (h_ref.empty()) {
        h_ref = hv, h4_ref = h4, o_ref = ov;
        continue;
      }
      EXPECT_TRUE(hv == h_ref) << "h " << label << " differs from tile_m 16";
      EXPECT_TRUE(h4 == h4_ref) << "h (W4A4) " << label << " differs from tile_m 16";
      EXPECT_EQ(std::memcmp(ov.data(), o_ref.data(), ov.size() * 4), 0) << "o " << label << " differs from tile_m 16";
    }
  }
  // The four-warp layout belongs to the 96-row tile only.
  layer.route_and_gather(DeviceBuffer::from_host(test::to_bf16_bits(synthetic_activations(200, H, 1))), 200, 2, 64);
  auto [a1, a2] = test::sm80_w4a16_gemm_args(dw, b, 200, K, E, H, I, 64, rows.get(), h.get(), o.get(), false);
  a1.tile96_warps = Tile96Warps::kFour;
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16(a1, GemmEpilogue::kSwiglu, 64, nullptr), Error);
}

// The decode tile's table-free scale instance (GroupedGemmArgs::scales_all_normal: when every block
// scale is a positive normal E4M3 code the bf16 multiplier is built with integer operations) gives the
// bits of the scale table, in the narrow form (<= 8 rows per expert, T = 3), the wide one (T = 200) and
// split over the warps, for the SwiGLU, W4A4 and fp32 epilogues. The flags themselves are checked
// against the codes on the CPU (test_nvfp4_mma_layout.cpp).
TEST(CudaGroupedGemmTiles, NormalScaleFlagsGiveTheBitsOfTheScaleTable) {
  FP4MOE_REQUIRE_SM80(device);
  SmallLayer layer(200, 25);
  const int64_t H = SmallLayer::H, I = SmallLayer::I, E = SmallLayer::E, K = SmallLayer::K;
  DeviceExpertWeights& dw = layer.weights;
  const std::vector<uint8_t> w13_flags = experts_with_positive_normal_scales(layer.host.w13_scales, E, 2 * I * H / 16);
  const std::vector<uint8_t> w2_flags = experts_with_positive_normal_scales(layer.host.w2_scales, E, H * I / 16);
  for (int64_t e = 0; e < E; ++e) {
    ASSERT_EQ(w13_flags[e], 1) << "expert " << e << ": the synthetic scales should all be normal (else untested)";
    ASSERT_EQ(w2_flags[e], 1) << "expert " << e << ": the synthetic scales should all be normal (else untested)";
  }
  DeviceBuffer &h = layer.h, &o = layer.o;
  for (int64_t T : {3, 200}) {
    DeviceBuffer hidden = DeviceBuffer::from_host(test::to_bf16_bits(synthetic_activations(T, H, 80 + T)));
    layer.route_and_gather(hidden, T, 90 + T, 16);
    for (bool split_k : {false, true}) {
      const std::string label = "T=" + std::to_string(T) + (split_k ? " split-K" : "");
      auto [a1, a2] = test::sm80_w4a16_gemm_args(dw, layer.route, T, K, E, H, I, 16, layer.rows.get(), h.get(),
                                                  o.get(), split_k);
      std::vector<uint16_t> h_out[2], h4_out[2];
      std::vector<float> o_out[2];
      for (int with_flags = 0; with_flags < 2; ++with_flags) {
        a1.scales_all_normal = a2.scales_all_normal = with_flags != 0;
        h_out[with_flags].resize(T * K * I), h4_out[with_flags].resize(T * K * I), o_out[with_flags].resize(T * K * H);
        FP4MOE_CUDA_CHECK(cudaMemset(h.get(), 0xFF, T * K * I * 2));
        launch_grouped_gemm_nvfp4w_bf16(a1, GemmEpilogue::kSwigluNvfp4, 16, nullptr);
        FP4MOE_CUDA_CHECK(cudaMemcpy(h4_out[with_flags].data(), h.get(), T * K * I * 2, cudaMemcpyDeviceToHost));
        FP4MOE_CUDA_CHECK(cudaMemset(h.get(), 0xFF, T * K * I * 2));
        FP4MOE_CUDA_CHECK(cudaMemset(o.get(), 0xFF, T * K * H * 4));
        launch_grouped_gemm_nvfp4w_bf16(a1, GemmEpilogue::kSwiglu, 16, nullptr);
        launch_grouped_gemm_nvfp4w_bf16(a2, GemmEpilogue::kScaleFp32, 16, nullptr);
        FP4MOE_CUDA_CHECK(cudaMemcpy(h_out[with_flags].data(), h.get(), T * K * I * 2, cudaMemcpyDeviceToHost));
        FP4MOE_CUDA_CHECK(cudaMemcpy(o_out[with_flags].data(), o.get(), T * K * H * 4, cudaMemcpyDeviceToHost));
      }
      test::expect_all_written_and_finite(h_out[1], "h with flags " + label);
      test::expect_all_written_and_finite(h4_out[1], "h (W4A4) with flags " + label);
      test::expect_all_written_and_finite(o_out[1], "o with flags " + label);
      EXPECT_TRUE(h_out[1] == h_out[0]) << "h " << label << ": the table-free scales differ from the table";
      EXPECT_TRUE(h4_out[1] == h4_out[0]) << "h (W4A4) " << label << ": the table-free scales differ from the table";
      EXPECT_EQ(std::memcmp(o_out[1].data(), o_out[0].data(), o_out[0].size() * 4), 0)
          << "o " << label << ": the table-free scales differ from the table";
    }
  }
}

// GEMM2's early start (GroupedGemmArgs::route_final_at_launch: the decode tile's first wave reads its
// tile entry and starts its weight copies before the programmatic-launch wait) gives the bits of the
// ordinary start. GEMM2 runs right behind GEMM1, as in the pipeline (a programmatic launch where the
// device has one). T = 3 fits in the first wave; T = 800 (3456 CTAs) spans more than one on every GPU
// of up to 132 SMs with 18 decode CTAs each, so the later CTAs start as usual. Without the device
// residency the early start is an error.
TEST(CudaGroupedGemmTiles, EarlyStartGivesTheBitsOfTheOrdinaryStart) {
  FP4MOE_REQUIRE_SM80(device);
  SmallLayer layer(800, 23);
  const int64_t H = SmallLayer::H, I = SmallLayer::I, E = SmallLayer::E, K = SmallLayer::K;
  DeviceBuffer &h = layer.h, &o = layer.o;
  for (int64_t T : {3, 800}) {
    DeviceBuffer hidden = DeviceBuffer::from_host(test::to_bf16_bits(synthetic_activations(T, H, 60 + T)));
    layer.route_and_gather(hidden, T, 70 + T, 16);
    auto [a1, a2] = test::sm80_w4a16_gemm_args(layer.weights, layer.route, T, K, E, H, I, 16, layer.rows.get(), h.get(),
                                                o.get(), true);
    std::vector<float> o_ordinary;
    for (bool early : {false, true}) {
      const std::string label = "T=" + std::to_string(T) + (early ? " early start" : " ordinary start");
      a2.route_final_at_launch = early;
      FP4MOE_CUDA_CHECK(cudaMemset(h.get(), 0xFF, T * K * I * 2));
      FP4MOE_CUDA_CHECK(cudaMemset(o.get(), 0xFF, T * K * H * 4));
      launch_grouped_gemm_nvfp4w_bf16(a1, GemmEpilogue::kSwiglu, 16, nullptr);
      launch_grouped_gemm_nvfp4w_bf16(a2, GemmEpilogue::kScaleFp32, 16, nullptr);
      std::vector<float> ov(T * K * H);
      FP4MOE_CUDA_CHECK(cudaMemcpy(ov.data(), o.get(), ov.size() * 4, cudaMemcpyDeviceToHost));
      test::expect_all_written_and_finite(ov, "o " + label);
      if (!early) {
        o_ordinary = ov;
      } else {
        EXPECT_EQ(std::memcmp(ov.data(), o_ordinary.data(), ov.size() * 4), 0) << "o " << label << " differs";
      }
    }
    a2.decode_residency = DecodeResidency{};
    a2.k_splits = 1;
    EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16(a2, GemmEpilogue::kScaleFp32, 16, nullptr), Error)
        << "T=" << T << ": an early start without the device residency";
  }
}

// GEMM2 of one token on its one-row instances (GroupedGemmArgs::one_row_tiles: every tile holds one row, so
// only the narrow form is compiled, in fewer registers) gives the bits of the general instances at the same
// split count: one pass and split over the warps, scale table and table-free scales, ordinary and early
// start. Outputs are poisoned first. Misuse is an error: two tokens, another epilogue or tile, no top_k.
TEST(CudaGroupedGemmTiles, OneRowGemm2GivesTheBitsOfTheGeneralInstances) {
  FP4MOE_REQUIRE_SM80(device);
  SmallLayer layer(2, 27);
  const int64_t H = SmallLayer::H, I = SmallLayer::I, E = SmallLayer::E, K = SmallLayer::K;
  DeviceBuffer &h = layer.h, &o = layer.o;
  DeviceBuffer hidden = DeviceBuffer::from_host(test::to_bf16_bits(synthetic_activations(1, H, 31)));
  layer.route_and_gather(hidden, 1, 32, 16);
  auto [a1, a2] = test::sm80_w4a16_gemm_args(layer.weights, layer.route, 1, K, E, H, I, 16, layer.rows.get(), h.get(),
                                              o.get(), true);
  launch_grouped_gemm_nvfp4w_bf16(a1, GemmEpilogue::kSwiglu, 16, nullptr);
  for (int splits : {1, 2}) {
    for (bool all_normal : {false, true}) {
      for (bool early : {false, true}) {
        const std::string label = std::to_string(splits) + " split(s)" + (all_normal ? ", table-free scales" : "") +
                                  (early ? ", early start" : "");
        a2.k_splits = splits, a2.scales_all_normal = all_normal, a2.route_final_at_launch = early, a2.top_k = K;
        std::vector<float> out[2];
        for (int one_row = 0; one_row < 2; ++one_row) {
          a2.one_row_tiles = one_row != 0;
          FP4MOE_CUDA_CHECK(cudaMemset(o.get(), 0xFF, K * H * 4));
          launch_grouped_gemm_nvfp4w_bf16(a2, GemmEpilogue::kScaleFp32, 16, nullptr);
          out[one_row].resize(K * H);
          FP4MOE_CUDA_CHECK(cudaMemcpy(out[one_row].data(), o.get(), K * H * 4, cudaMemcpyDeviceToHost));
        }
        test::expect_all_written_and_finite(out[1], "o of the one-row GEMM2, " + label);
        EXPECT_EQ(std::memcmp(out[1].data(), out[0].data(), out[0].size() * 4), 0)
            << label << ": the one-row instance differs from the general one";
      }
    }
  }
  a2.one_row_tiles = true, a2.k_splits = 0, a2.route_final_at_launch = false;
  GroupedGemmArgs two_tokens = a2;
  two_tokens.rows = 2 * K;
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16(two_tokens, GemmEpilogue::kScaleFp32, 16, nullptr), Error);
  GroupedGemmArgs no_top_k = a2;
  no_top_k.top_k = 0;
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16(no_top_k, GemmEpilogue::kScaleFp32, 16, nullptr), Error);
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16(a2, GemmEpilogue::kScaleFp32, 64, nullptr), Error);
  GroupedGemmArgs gemm1 = a1;
  gemm1.one_row_tiles = true, gemm1.top_k = K;
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16(gemm1, GemmEpilogue::kSwiglu, 16, nullptr), Error);
}

// One token routed inside the W4A16 GEMM1 (GroupedGemmArgs::self_routing, the pipeline's one-token path):
// the route buffers are those of launch_moe_route_align, h has the bits of GEMM1 after it, and GEMM2 and
// the combine after the self-routed GEMM1 give the layer's output bits, for every routing method (softmax,
// renormalized, top-k softmax, DeepSeek-style sigmoid groups with a bias), logits with NaN and infinities
// (seed 3: their weights are NaN in both paths, so only the bits are compared), one pass over K and split
// over the warps, scale table and table-free scales. The route buffers, h and the output are poisoned
// first. Misuse is an error.
TEST(CudaGroupedGemmTiles, SelfRoutedTokenGivesTheRouteBuffersAndBitsOfTheRouteKernel) {
  FP4MOE_REQUIRE_SM80(device);
  SmallLayer layer(1, 27);
  const int64_t H = SmallLayer::H, I = SmallLayer::I, E = SmallLayer::E, K = SmallLayer::K;
  const MoeRouteBuffers& b = layer.route;
  DeviceBuffer &h = layer.h, &o = layer.o;
  DeviceBuffer hidden = DeviceBuffer::from_host(test::to_bf16_bits(synthetic_activations(1, H, 33)));
  DeviceBuffer y(H * 2);
  std::vector<float> bias(E);
  for (int64_t e = 0; e < E; ++e) bias[e] = 0.05f * static_cast<float>((e * 7) % 5) - 0.1f;
  DeviceBuffer bias_d = DeviceBuffer::from_host(bias);
  const std::vector<RoutingMethod> methods = {RoutingMethod::kSoftmaxTopk, RoutingMethod::kSoftmaxTopkRenorm,
                                              RoutingMethod::kTopkSoftmax, RoutingMethod::kSigmoidGroupedTopk};
  // The route buffers one token fills (ids, weights, counts, offsets, sorted slots, slot rows, tiles).
  struct RouteCopy {
    std::vector<int32_t> ids, counts, offsets, sorted, slot_rows, tile_expert, tile_row, num_tiles;
    std::vector<float> weights;
  };
  auto copy_route = [&] {
    RouteCopy r;
    auto get = [](auto& v, const auto* src, int64_t n) {
      v.resize(n);
      FP4MOE_CUDA_CHECK(cudaMemcpy(v.data(), src, n * sizeof(v[0]), cudaMemcpyDeviceToHost));
    };
    get(r.ids, b.topk_ids, K), get(r.weights, b.topk_weights, K), get(r.counts, b.expert_counts, E);
    get(r.offsets, b.expert_offsets, E + 1), get(r.sorted, b.sorted_slots, K), get(r.slot_rows, b.slot_rows, K);
    get(r.num_tiles, b.num_tiles, 1);
    get(r.tile_expert, b.tile_expert, r.num_tiles[0]), get(r.tile_row, b.tile_row_begin, r.num_tiles[0]);
    return r;
  };
  auto poison = [&] {
    const int64_t tiles = moe_max_tiles(1, K, E, 16);
    for (auto [p, n] : {std::pair<void*, int64_t>{b.topk_ids, K}, {b.topk_weights, K}, {b.expert_counts, E},
                        {b.expert_offsets, E + 1}, {b.sorted_slots, K}, {b.slot_rows, K}, {b.tile_expert, tiles},
                        {b.tile_row_begin, tiles}, {b.num_tiles, 1}, {h.get(), K * I / 2}, {y.get(), H / 2}})
      FP4MOE_CUDA_CHECK(cudaMemset(p, 0xFF, n * 4));
  };
  auto get_bits = [](const DeviceBuffer& d, int64_t n) {
    std::vector<uint16_t> v(n);
    FP4MOE_CUDA_CHECK(cudaMemcpy(v.data(), d.get(), n * 2, cudaMemcpyDeviceToHost));
    return v;
  };
  for (RoutingMethod method : methods) {
    for (uint64_t seed : {1, 2, 3}) {
      RoutingConfig rc;
      rc.method = method, rc.num_experts = static_cast<int>(E), rc.top_k = static_cast<int>(K);
      if (method == RoutingMethod::kSigmoidGroupedTopk) rc.n_group = 4, rc.topk_group = 2, rc.routed_scaling_factor = 2.5f;
      std::vector<float> logits = test::random_logits(1, E, 500 + seed);
      if (seed == 3) logits[2] = std::nanf(""), logits[5] = INFINITY, logits[9] = -INFINITY;
      DeviceBuffer logits_d = DeviceBuffer::from_host(logits);
      const float* bias_ptr = method == RoutingMethod::kSigmoidGroupedTopk ? bias_d.as<float>() : nullptr;
      poison();
      launch_moe_route_align(rc, logits_d.as<float>(), bias_ptr, b, 1, MTile{16, 0}, nullptr);
      const RouteCopy want = copy_route();
      EXPECT_EQ(want.num_tiles[0], K) << "every slot routed (distinct experts), seed " << seed;
      for (bool split_k : {false, true}) {
        auto [a1, a2] = test::sm80_w4a16_gemm_args(layer.weights, b, 1, K, E, H, I, 16, hidden.get(), h.get(), o.get(),
                                                    split_k);
        a1.a_slots = b.sorted_slots, a1.top_k = static_cast<int>(K);  // the pipeline's GEMM1: hidden in place
        for (bool normal : {false, true}) {
          const std::string label = "method " + std::to_string(static_cast<int>(method)) + " seed " +
                                    std::to_string(seed) + (split_k ? " split-K" : "") + (normal ? " table-free" : "");
          a1.scales_all_normal = a2.scales_all_normal = normal;
          // The stages: route/align, GEMM1, GEMM2, combine.
          poison();
          launch_moe_route_align(rc, logits_d.as<float>(), bias_ptr, b, 1, MTile{16, 0}, nullptr);
          launch_grouped_gemm_nvfp4w_bf16(a1, GemmEpilogue::kSwiglu, 16, nullptr);
          launch_grouped_gemm_nvfp4w_bf16(a2, GemmEpilogue::kScaleFp32, 16, nullptr);
          launch_moe_combine(o.as<float>(), b, 1, static_cast<int>(K), H, y.get(), true, nullptr);
          const std::vector<uint16_t> h_want = get_bits(h, K * I), y_want = get_bits(y, H);
          // GEMM1 routing the token itself, then GEMM2 and the combine on the route buffers it wrote.
          GroupedGemmArgs g1 = a1;
          g1.a_slots = nullptr;
          g1.self_routing = GemmSelfRouting{rc, logits_d.as<float>(), bias_ptr};
          poison();
          launch_grouped_gemm_nvfp4w_bf16(g1, GemmEpilogue::kSwiglu, 16, nullptr);
          launch_grouped_gemm_nvfp4w_bf16(a2, GemmEpilogue::kScaleFp32, 16, nullptr);
          launch_moe_combine(o.as<float>(), b, 1, static_cast<int>(K), H, y.get(), true, nullptr);
          const std::vector<uint16_t> h_got = get_bits(h, K * I), y_got = get_bits(y, H);
          const std::string run_label = label + " self-routed";
          test::expect_all_written_and_finite(h_got, "h " + run_label);
          if (seed != 3) test::expect_all_written_and_finite(y_got, "y " + run_label);
          EXPECT_TRUE(h_got == h_want) << "h " << run_label << ": differs from GEMM1 after the route kernel";
          EXPECT_TRUE(y_got == y_want) << "y " << run_label << ": differs from the stages after the route kernel";
          const RouteCopy got = copy_route();
          EXPECT_EQ(got.ids, want.ids) << run_label;
          EXPECT_EQ(std::memcmp(got.weights.data(), want.weights.data(), K * 4), 0) << "weights " << run_label;
          EXPECT_EQ(got.counts, want.counts) << run_label;
          EXPECT_EQ(got.offsets, want.offsets) << run_label;
          EXPECT_EQ(got.sorted, want.sorted) << run_label;
          EXPECT_EQ(got.slot_rows, want.slot_rows) << run_label;
          EXPECT_EQ(got.num_tiles, want.num_tiles) << run_label;
          EXPECT_EQ(got.tile_expert, want.tile_expert) << run_label;
          EXPECT_EQ(got.tile_row, want.tile_row) << run_label;
        }
      }
    }
  }
  // Misuse.
  RoutingConfig rc;
  rc.num_experts = static_cast<int>(E), rc.top_k = static_cast<int>(K);
  DeviceBuffer logits_d = DeviceBuffer::from_host(test::random_logits(1, E, 9));
  auto [a1, a2] = test::sm80_w4a16_gemm_args(layer.weights, b, 1, K, E, H, I, 16, hidden.get(), h.get(), o.get(), true);
  a1.self_routing = GemmSelfRouting{rc, logits_d.as<float>(), nullptr};
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16(a1, GemmEpilogue::kSwigluNvfp4, 16, nullptr), Error) << "W4A4 epilogue";
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16(a1, GemmEpilogue::kScaleFp32, 16, nullptr), Error) << "GEMM2";
  GroupedGemmArgs two_tokens = a1;
  two_tokens.rows = 2 * K;
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16(two_tokens, GemmEpilogue::kSwiglu, 16, nullptr), Error) << "two tokens";
  GroupedGemmArgs no_spare_row = a1;
  no_spare_row.max_tiles = K;
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16(no_spare_row, GemmEpilogue::kSwiglu, 16, nullptr), Error)
      << "no row of CTAs past the tiles";
  GroupedGemmArgs early = a1;
  early.route_final_at_launch = true;
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16(early, GemmEpilogue::kSwiglu, 16, nullptr), Error) << "early start";
  GroupedGemmArgs no_logits = a1;
  no_logits.self_routing->router_logits = nullptr;
  EXPECT_THROW(launch_grouped_gemm_nvfp4w_bf16(no_logits, GemmEpilogue::kSwiglu, 16, nullptr), Error) << "no logits";
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace fp4moe
