// Routing, alignment, gather and combine kernels (moe_route_permute.h) against independent host
// computations: routing vs route_reference (identical ids, weights to fp32 rounding), the counting sort
// vs a host stable sort (including invalid ids and one-expert skew), W4A4 gather vs format/nvfp4.h bit
// for bit, combine vs the host's slot-order sum bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <utility>

#include "format/bf16.h"
#include "format/fp_codes.h"
#include "format/nvfp4.h"
#include "format/synthetic.h"
#include "gpu_test_util.h"
#include "kernels/cpu/moe_reference.h"
#include "kernels/cuda/moe_route_permute.h"

namespace fp4moe {
namespace {

struct RouteCase {
  const char* name;
  RoutingConfig config;
};

std::vector<RouteCase> route_cases() {
  std::vector<RouteCase> cases;
  RoutingConfig c;
  c.method = RoutingMethod::kSoftmaxTopkRenorm, c.num_experts = 512, c.top_k = 10;
  cases.push_back({"softmax_topk_renorm E512 K10", c});
  c.method = RoutingMethod::kSoftmaxTopk, c.num_experts = 128, c.top_k = 8;
  cases.push_back({"softmax_topk E128 K8", c});
  c.method = RoutingMethod::kTopkSoftmax, c.num_experts = 8, c.top_k = 2;
  cases.push_back({"topk_softmax E8 K2", c});
  c.method = RoutingMethod::kSigmoidGroupedTopk, c.num_experts = 256, c.top_k = 8, c.n_group = 8, c.topk_group = 4;
  c.routed_scaling_factor = 2.5f;
  cases.push_back({"sigmoid_grouped E256 K8 g8/4", c});
  c.renormalize = false, c.n_group = 1, c.topk_group = 1, c.num_experts = 64, c.top_k = 6;
  cases.push_back({"sigmoid no-renorm E64 K6", c});
  // E just past select_top_k's 4- and 8-expert instances: its 8 and 16 instances with lanes holding 4 or
  // 5 and 9 or 10 experts (the bounds checks past E).
  c = RoutingConfig{};
  c.method = RoutingMethod::kTopkSoftmax, c.num_experts = 129, c.top_k = 5;
  cases.push_back({"topk_softmax E129 K5", c});
  c.method = RoutingMethod::kSoftmaxTopkRenorm, c.num_experts = 300, c.top_k = 7;
  cases.push_back({"softmax_topk_renorm E300 K7", c});
  // E near the limit and the largest K: at 8 tokens the fused route+align's most slots (256).
  c = RoutingConfig{};
  c.method = RoutingMethod::kSoftmaxTopkRenorm, c.num_experts = 1000, c.top_k = 32;
  cases.push_back({"softmax_topk_renorm E1000 K32", c});
  return cases;
}

TEST(CudaMoeRoute, MatchesRouteReference) {
  FP4MOE_REQUIRE_SM80(device);
  for (const RouteCase& rc : route_cases()) {
    for (int64_t tokens : {1, 7, 257}) for (const int rows : {0, 1, 2}) {
      const bool coarse = rows == 1, one_lane = rows == 2;
      const char* kind = coarse ? " coarse" : (one_lane ? " one lane" : " random");
      const RoutingConfig& c = rc.config;
      const int64_t E = c.num_experts, K = c.top_k;
      std::vector<float> logits = test::random_logits(tokens, E, 11 + tokens);
      // Exact ties: copy some logits within a row, so tie-breaking is exercised.
      for (int64_t t = 0; t < tokens; ++t) logits[t * E + E - 1] = logits[t * E + 1];
      // One lane's experts (e = 5 mod 32, as the warp routing deals experts to lanes) above all others, some
      // tied: that lane wins round after round, so its exclusions (and a per-lane candidate list) are used
      // up round after round.
      for (int64_t t = 0; one_lane && t < tokens; ++t)
        for (int64_t e = 5; e < E; e += 32) logits[t * E + e] = 20.0f + 0.25f * static_cast<float>((e * 13 + t) % 8);
      // Coarse rows: a few experts at 0.5, the rest -0.0, +0.0 or -1; the slots past the 0.5 ones are
      // ties of -0.0 and +0.0, which compare equal (lower expert first) as in the reference.
      for (int64_t t = 0; coarse && t < tokens; ++t)
        for (int64_t e = 0; e < E; ++e) {
          const int64_t r = (e * 7 + t) % 3;
          logits[t * E + e] = e % 97 == 5 ? 0.5f : (r == 0 ? -0.0f : (r == 1 ? 0.0f : -1.0f));
        }
      std::vector<float> bias(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) bias[e] = 0.01f * static_cast<float>((e * 37) % 11) - 0.05f;
      const bool grouped = c.method == RoutingMethod::kSigmoidGroupedTopk;
      std::vector<int32_t> ref_ids(tokens * K);
      std::vector<float> ref_w(tokens * K);
      route_reference(c, logits, tokens, grouped ? bias.data() : nullptr, ref_ids, ref_w);

      DeviceBuffer d_logits = DeviceBuffer::from_host(logits), d_bias = DeviceBuffer::from_host(bias);
      DeviceBuffer d_ids(tokens * K * 4), d_w(tokens * K * 4);
      launch_moe_route(c, d_logits.as<float>(), grouped ? d_bias.as<float>() : nullptr, tokens, d_ids.as<int32_t>(),
                       d_w.as<float>(), nullptr);
      FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
      const auto ids = d_ids.to_host<int32_t>();
      const auto w = d_w.to_host<float>();
      int mismatches = 0;
      for (int64_t i = 0; i < tokens * K && mismatches < 5; ++i) {
        if (ids[i] != ref_ids[i]) {
          ++mismatches;
          ADD_FAILURE() << rc.name << " T=" << tokens << kind << " slot " << i << ": id " << ids[i] << " vs reference " << ref_ids[i];
        }
        EXPECT_NEAR(w[i], ref_w[i], 2e-7 * std::fabs(ref_w[i]) + 1e-30) << rc.name << " T=" << tokens << kind << " slot " << i;
      }
    }
  }
}

// launch_moe_route_align = launch_moe_route then launch_moe_align, bit for bit: up to 8 tokens it is one
// kernel (routing and align in one CTA), at 9 the two launches. Every routing method, with and without a
// tail; both workspaces poisoned first.
TEST(CudaMoeRouteAlign, FusedMatchesRouteThenAlign) {
  FP4MOE_REQUIRE_SM80(device);
  for (const RouteCase& rc : route_cases()) {
    for (const int64_t tokens : {int64_t{1}, int64_t{3}, kFusedRouteAlignMaxTokens, kFusedRouteAlignMaxTokens + 1}) {
      // {1, 0} and {2, 1}: experts of several tiles (E8 K2 routes 8 tokens' 16 slots to 8 experts).
      for (const MTile tile : {MTile{16, 0}, MTile{64, 8}, MTile{1, 0}, MTile{2, 1}}) {
        const RoutingConfig& c = rc.config;
        const int E = c.num_experts, K = c.top_k;
        const std::vector<float> logits = test::random_logits(tokens, E, 5 + tokens);
        std::vector<float> bias(static_cast<size_t>(E));
        for (int e = 0; e < E; ++e) bias[e] = 0.02f * static_cast<float>((e * 13) % 7) - 0.06f;
        const bool grouped = c.method == RoutingMethod::kSigmoidGroupedTopk;
        DeviceBuffer d_logits = DeviceBuffer::from_host(logits), d_bias = DeviceBuffer::from_host(bias);
        const float* bias_ptr = grouped ? d_bias.as<float>() : nullptr;
        const size_t bytes = moe_route_workspace_bytes(tokens, K, E, tile.rows);
        DeviceBuffer ws_two(bytes), ws_one(bytes);
        FP4MOE_CUDA_CHECK(cudaMemset(ws_two.get(), 0xFF, bytes));
        FP4MOE_CUDA_CHECK(cudaMemset(ws_one.get(), 0xFF, bytes));
        const MoeRouteBuffers two = carve_moe_route_workspace(ws_two.get(), tokens, K, E, tile.rows);
        const MoeRouteBuffers one = carve_moe_route_workspace(ws_one.get(), tokens, K, E, tile.rows);
        launch_moe_route(c, d_logits.as<float>(), bias_ptr, tokens, two.topk_ids, two.topk_weights, nullptr);
        launch_moe_align(two, tokens, K, E, tile, nullptr);
        launch_moe_route_align(c, d_logits.as<float>(), bias_ptr, one, tokens, tile, nullptr);
        FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
        const std::string label = std::string(rc.name) + " T=" + std::to_string(tokens) + " tile " +
                                  std::to_string(tile.rows) + "+" + std::to_string(tile.tail_rows);
        auto same = [&](const void* a, const void* b, size_t n, const char* what) {
          std::vector<uint32_t> va(n), vb(n);
          FP4MOE_CUDA_CHECK(cudaMemcpy(va.data(), a, n * 4, cudaMemcpyDeviceToHost));
          FP4MOE_CUDA_CHECK(cudaMemcpy(vb.data(), b, n * 4, cudaMemcpyDeviceToHost));
          EXPECT_EQ(va, vb) << label << ": " << what;
          return va;
        };
        const size_t slots = static_cast<size_t>(tokens * K);
        same(two.topk_ids, one.topk_ids, slots, "topk_ids");
        same(two.topk_weights, one.topk_weights, slots, "topk_weights");
        same(two.expert_counts, one.expert_counts, E, "expert_counts");
        same(two.expert_offsets, one.expert_offsets, E + 1, "expert_offsets");
        same(two.sorted_slots, one.sorted_slots, slots, "sorted_slots");
        same(two.slot_rows, one.slot_rows, slots, "slot_rows");
        const uint32_t tiles = same(two.num_tiles, one.num_tiles, 1, "num_tiles")[0];
        ASSERT_GE(tiles, 1u) << label;
        ASSERT_LE(tiles, static_cast<uint32_t>(moe_max_tiles(tokens, K, E, tile.rows))) << label;
        same(two.tile_expert, one.tile_expert, tiles, "tile_expert");
        same(two.tile_row_begin, one.tile_row_begin, tiles, "tile_row_begin");
      }
    }
  }
}

// Host expectation of launch_moe_align: stable counting sort by expert. 400 slots take the one-CTA
// kernel; 4000 and 19996 slots (a partial last chunk, E = 1024 with 64 KB histograms) the multi-CTA one.
// The tiles, with and without a tail (MTile), are checked against the rule the GEMMs read them by: a
// tile holds the expert's remaining rows when they are at most rows + tail_rows, else `rows`.
TEST(CudaMoeAlign, StableCountingSortAndTiles) {
  FP4MOE_REQUIRE_SM80(device);
  const int K = 4;
  for (const auto& [T, E] : {std::pair<int64_t, int>{100, 64}, {1000, 64}, {4999, 1024}})
  for (int variant = 0; variant < 3; ++variant) {
    for (const MTile tile : {MTile{16, 0}, MTile{64, 0}, MTile{128, 0}, MTile{16, 16}, MTile{64, 8}, MTile{128, 32}}) {
      const int tile_m = tile.rows;
      Rng rng(variant * 100 + tile_m + 7 * tile.tail_rows + T);
      std::vector<int32_t> ids(T * K);
      for (int64_t i = 0; i < T * K; ++i) {
        ids[i] = static_cast<int32_t>(rng.below(E));
        if (variant == 1 && i % K == 0) ids[i] = E - 1;  // the last expert in every token
        if (variant == 1 && i % K != 0) ids[i] = static_cast<int32_t>(rng.below(3));  // most experts empty
      }
      if (variant == 2) {  // invalid ids (impossible from routing, guarded anyway)
        ids[5] = -1;
        ids[17] = E;
        ids[T * K - 1] = 1 << 20;
      }
      const size_t bytes = moe_route_workspace_bytes(T, K, E, tile_m);
      DeviceBuffer ws(bytes);
      FP4MOE_CUDA_CHECK(cudaMemset(ws.get(), 0xFF, bytes));
      const MoeRouteBuffers b = carve_moe_route_workspace(ws.get(), T, K, E, tile_m);
      FP4MOE_CUDA_CHECK(cudaMemcpy(b.topk_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
      launch_moe_align(b, T, K, E, tile, nullptr);
      FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
      auto fetch = [](const int32_t* p, size_t n) {
        std::vector<int32_t> v(n);
        FP4MOE_CUDA_CHECK(cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost));
        return v;
      };
      const auto counts = fetch(b.expert_counts, E), offsets = fetch(b.expert_offsets, E + 1);
      const auto sorted = fetch(b.sorted_slots, T * K), slot_rows = fetch(b.slot_rows, T * K);
      const int32_t num_tiles = fetch(b.num_tiles, 1)[0];
      const auto tile_e = fetch(b.tile_expert, std::max(0, num_tiles)), tile_r = fetch(b.tile_row_begin, std::max(0, num_tiles));

      std::vector<std::vector<int32_t>> expected(E);
      for (int64_t i = 0; i < T * K; ++i)
        if (ids[i] >= 0 && ids[i] < E) expected[ids[i]].push_back(static_cast<int32_t>(i));
      int32_t row = 0, tiles = 0;
      const std::string label = "T " + std::to_string(T) + " E " + std::to_string(E) + " variant " +
                                std::to_string(variant) + " tile " + std::to_string(tile_m) + "+" +
                                std::to_string(tile.tail_rows);
      for (int e = 0; e < E; ++e) {
        ASSERT_EQ(counts[e], static_cast<int32_t>(expected[e].size())) << label << " expert " << e;
        ASSERT_EQ(offsets[e], row) << label << " expert " << e;
        for (size_t j = 0; j < expected[e].size(); ++j) {
          ASSERT_EQ(sorted[row + j], expected[e][j]) << label << " expert " << e << " position " << j;
          ASSERT_EQ(slot_rows[expected[e][j]], row + static_cast<int32_t>(j)) << label;
        }
        const int32_t count = static_cast<int32_t>(expected[e].size());
        for (int32_t r = 0; r < count; r += count - r <= tile_m + tile.tail_rows ? count - r : tile_m, ++tiles) {
          ASSERT_LT(tiles, num_tiles) << label;
          EXPECT_EQ(tile_e[tiles], e) << label << " tile " << tiles;
          EXPECT_EQ(tile_r[tiles], row + r) << label << " tile " << tiles;
        }
        row += static_cast<int32_t>(expected[e].size());
      }
      EXPECT_EQ(offsets[E], row) << label;
      EXPECT_EQ(num_tiles, tiles) << label;
      EXPECT_LE(num_tiles, moe_max_tiles(T, K, E, tile_m)) << label;
      for (int64_t i = 0; i < T * K; ++i)
        if (ids[i] < 0 || ids[i] >= E) {
          EXPECT_EQ(slot_rows[i], -1) << label << " invalid slot " << i;
        }
    }
  }
}

// An M tile without rows, or with a tail that is negative or longer than its rows, is an error naming it.
TEST(CudaMoeAlign, RejectsBadTiles) {
  FP4MOE_REQUIRE_SM80(device);
  const int64_t T = 8;
  const int K = 2, E = 4;
  DeviceBuffer ws(moe_route_workspace_bytes(T, K, E, 16));
  const MoeRouteBuffers b = carve_moe_route_workspace(ws.get(), T, K, E, 16);
  for (const MTile bad : {MTile{0, 0}, MTile{16, -1}, MTile{16, 17}}) {
    try {
      launch_moe_align(b, T, K, E, bad, nullptr);
      ADD_FAILURE() << "tile " << bad.rows << "+" << bad.tail_rows << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad.rows == 0 ? "rows must be >= 1" : "tail_rows"), std::string::npos) << e.what();
    }
  }
  FP4MOE_CUDA_CHECK(cudaMemset(b.topk_ids, 0, T * K * sizeof(int32_t)));
  launch_moe_align(b, T, K, E, MTile{16, 16}, nullptr);  // a tail as long as the rows is valid
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
}

// W4A4 gather = ModelOpt NVFP4 quantization with the expert's input scale, bit for bit, stored as
// e2m1 * e4m3 (the input scale is the GEMM epilogue's); W4A16 gather = a plain copy. Rows past the
// routed ones (two slots routed nowhere) are zeros; the rows are poisoned before each gather. H = 512
// and 1040 (65 16-value blocks per row: a CTA whose last warp is partial).
TEST(CudaMoeGather, W4A4QuantizationIsBitExact) {
  FP4MOE_REQUIRE_SM80(device);
  const int64_t T = 37, K = 3;
  const int E = 8;
  for (const int64_t H : {int64_t{512}, int64_t{1040}}) {
    std::vector<float> hidden = synthetic_activations(T, H, 5, 1.0);
    for (int64_t c = 0; c < 16; ++c) hidden[3 * H + c] = 0.0f;  // an all-zero block
    for (int64_t c = 16; c < 32; ++c) hidden[4 * H + c] *= 4096.0f;  // saturating blocks (scale clamps to 448)
    for (int64_t c = 32; c < 48; ++c) hidden[5 * H + c] = round_to_bf16(hidden[5 * H + c] * 1e-4f);  // tiny: subnormal scales
    std::vector<float> scales(E);
    for (int e = 0; e < E; ++e) scales[e] = nvfp4_tensor_scale_for_amax(0.5f + 3.0f * e);
    std::vector<int32_t> ids(T * K);
    for (int64_t i = 0; i < T * K; ++i) ids[i] = static_cast<int32_t>((i * 5 + i / K) % E);
    ids[7] = -1, ids[20] = E;  // routed nowhere
    const int64_t routed = T * K - 2;

    const size_t bytes = moe_route_workspace_bytes(T, K, E, 16);
    DeviceBuffer ws(bytes);
    const MoeRouteBuffers b = carve_moe_route_workspace(ws.get(), T, K, E, 16);
    FP4MOE_CUDA_CHECK(cudaMemcpy(b.topk_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
    launch_moe_align(b, T, K, E, MTile{16, 0}, nullptr);
    DeviceBuffer d_hidden = DeviceBuffer::from_host(test::to_bf16_bits(hidden)), d_scales = DeviceBuffer::from_host(scales);
    DeviceBuffer d_rows(T * K * H * 2);
    std::vector<int32_t> sorted(T * K);
    for (bool w4a4 : {false, true}) {
      FP4MOE_CUDA_CHECK(cudaMemset(d_rows.get(), 0xFF, d_rows.bytes()));
      launch_moe_gather(d_hidden.get(), b, T, K, E, H, w4a4 ? d_scales.as<float>() : nullptr, d_rows.get(), nullptr);
      FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
      FP4MOE_CUDA_CHECK(cudaMemcpy(sorted.data(), b.sorted_slots, sorted.size() * 4, cudaMemcpyDeviceToHost));
      const auto rows = d_rows.to_host<uint16_t>();
      int64_t bad = 0;
      for (int64_t r = 0; r < T * K; ++r) {
        std::vector<float> expected(static_cast<size_t>(H), 0.0f);
        if (r < routed) {
          const int32_t slot = sorted[r];
          const std::span<const float> x(hidden.data() + (slot / K) * H, static_cast<size_t>(H));
          expected.assign(x.begin(), x.end());
          if (w4a4) {
            const Nvfp4Matrix q = quantize_nvfp4(x, 1, H, scales[ids[slot]]);
            for (int64_t c = 0; c < H; ++c)
              expected[c] = e2m1_decode(nvfp4_code_at(q.view(), 0, c)) * e4m3_decode(q.scales[c / 16]);
          }
        }
        for (int64_t c = 0; c < H; ++c) {
          if (!(bf16_to_float(rows[r * H + c]) == expected[c]) && bad++ < 5)
            ADD_FAILURE() << (w4a4 ? "W4A4" : "W4A16") << " H " << H << " row " << r << " col " << c << ": "
                          << bf16_to_float(rows[r * H + c]) << " vs " << expected[c];
        }
      }
      EXPECT_EQ(bad, 0) << "H " << H;
    }
  }
}

// Combine = bf16 of the slot-order sum of weight * expert row (products and sums rounded separately, as
// the CPU reference), bit for bit, for fp32 and BF16 expert outputs, with the route buffers read before
// or after the programmatic-launch wait (route_final_at_launch; here the align ended before either
// launch). Slots routed nowhere add nothing; the output is poisoned before each run.
TEST(CudaMoeCombine, SlotOrderSumBitForBit) {
  FP4MOE_REQUIRE_SM80(device);
  const int64_t T = 37, K = 3, H = 1040;
  const int E = 8;
  std::vector<int32_t> ids(T * K);
  for (int64_t i = 0; i < T * K; ++i) ids[i] = static_cast<int32_t>((i * 3 + i / K) % E);
  ids[4] = -1, ids[30] = E;  // routed nowhere
  Rng rng(91);
  std::vector<float> weights(T * K), o(T * K * H);
  for (float& w : weights) w = static_cast<float>(rng.uniform(0.05, 1.0));
  for (float& x : o) x = round_to_bf16(static_cast<float>(rng.normal_fast()));  // exact in BF16 too
  DeviceBuffer ws(moe_route_workspace_bytes(T, K, E, 16));
  const MoeRouteBuffers b = carve_moe_route_workspace(ws.get(), T, K, E, 16);
  FP4MOE_CUDA_CHECK(cudaMemcpy(b.topk_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  FP4MOE_CUDA_CHECK(cudaMemcpy(b.topk_weights, weights.data(), weights.size() * 4, cudaMemcpyHostToDevice));
  launch_moe_align(b, T, K, E, MTile{16, 0}, nullptr);
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<int32_t> slot_rows(T * K);
  FP4MOE_CUDA_CHECK(cudaMemcpy(slot_rows.data(), b.slot_rows, slot_rows.size() * 4, cudaMemcpyDeviceToHost));
  // Expert outputs in sorted order: row slot_rows[s] holds slot s's values.
  std::vector<float> sorted_o(T * K * H, 0.0f);
  std::vector<uint16_t> expected(T * H);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < H; ++c) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t s = t * K + k;
        if (slot_rows[s] < 0) continue;
        sorted_o[slot_rows[s] * H + c] = o[s * H + c];
        const volatile float product = weights[s] * o[s * H + c];  // rounded before the add
        acc = acc + product;
      }
      expected[t * H + c] = float_to_bf16(acc);
    }
  DeviceBuffer d_o = DeviceBuffer::from_host(sorted_o), d_o_bf16 = DeviceBuffer::from_host(test::to_bf16_bits(sorted_o));
  DeviceBuffer out(T * H * 2);
  for (bool bf16_in : {false, true})
    for (bool route_final : {false, true}) {
      FP4MOE_CUDA_CHECK(cudaMemset(out.get(), 0xFF, out.bytes()));
      if (bf16_in) {
        launch_moe_combine_bf16(d_o_bf16.get(), b, T, K, H, out.get(), route_final, nullptr);
      } else {
        launch_moe_combine(d_o.as<float>(), b, T, K, H, out.get(), route_final, nullptr);
      }
      FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
      const auto got = out.to_host<uint16_t>();
      int64_t bad = 0;
      for (int64_t i = 0; i < T * H; ++i)
        if (got[i] != expected[i] && bad++ < 5)
          ADD_FAILURE() << (bf16_in ? "bf16" : "fp32") << " inputs, route_final_at_launch " << route_final << ": token "
                        << i / H << " col " << i % H << ": " << bf16_to_float(got[i]) << " vs " << bf16_to_float(expected[i]);
      EXPECT_EQ(bad, 0) << (bf16_in ? "bf16" : "fp32") << " inputs, route_final_at_launch " << route_final;
    }
}

}  // namespace
}  // namespace fp4moe
