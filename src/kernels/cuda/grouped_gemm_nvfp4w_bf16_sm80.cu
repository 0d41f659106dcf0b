// Host side of the sm80 grouped NVFP4-weight x BF16-activation GEMM: which instance of the kernel
// (grouped_gemm_nvfp4w_bf16_sm80_kernel.cuh: tile configuration, split-K warps, scale path, self-routing,
// one-row tiles) a launch takes, the split-K sizing from the device's residency, and the launches
// themselves (programmatic dependent launches on SM90+). The instances are compiled here, the one
// translation unit that includes the kernel.
#include <algorithm>
#include <limits>
#include <optional>

#include "common/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/programmatic_launch.cuh"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm80.h"
#include "kernels/cuda/grouped_gemm_nvfp4w_bf16_sm80_kernel.cuh"

namespace fp4moe {
using namespace sm80_grouped_gemm;  // the kernel's configurations, parameters and instances
namespace {

// The decode tile's instance (one warp per K split) for the split count, the scale path and self-routing.
template <int CFG, GemmEpilogue EPI, bool SELF_ROUTE, bool ONE_ROW = false>
auto decode_instance(int splits, bool all_normal) {
  return splits > 1 ? (all_normal ? grouped_gemm_kernel<CFG, EPI, true, true, SELF_ROUTE, ONE_ROW>
                                  : grouped_gemm_kernel<CFG, EPI, true, false, SELF_ROUTE, ONE_ROW>)
                    : (all_normal ? grouped_gemm_kernel<CFG, EPI, false, true, SELF_ROUTE, ONE_ROW>
                                  : grouped_gemm_kernel<CFG, EPI, false, false, SELF_ROUTE, ONE_ROW>);
}

// Which instance of a configuration a launch takes (launch_grouped_gemm_nvfp4w_bf16 checked the choice).
struct InstanceChoice {
  int splits;                                     // K splits (decode tile)
  bool all_normal;                                // the table-free scales (decode tile)
  bool one_row;                                   // ONE_ROW (GEMM2 of one token)
  const one_token::SelfRouteParams* self_routed;  // the SELF_ROUTE instance's argument, else null
};
template <int CFG, GemmEpilogue EPI>
void launch_config(const Params& p, int64_t max_tiles, const InstanceChoice& choice, cudaStream_t stream) {
  constexpr TileConfig c = kConfigs[CFG];
  const int splits = choice.splits;
  const bool all_normal = choice.all_normal;
  const one_token::SelfRouteParams* self_routed = choice.self_routed;
  if constexpr (!supports_epilogue(c, EPI)) {
    fail("grouped GEMM: tile configuration ", CFG, " cannot run this epilogue");
  } else {
    FP4MOE_CHECK(splits == 1 || (c.a_in_registers && splits >= 1 && splits <= kMaxKSplits),
                 "grouped GEMM: ", splits, " K splits for tile configuration ", CFG);
    const dim3 grid(static_cast<unsigned>(p.n / c.bn), static_cast<unsigned>(max_tiles));
    const size_t smem = smem_bytes(c, splits);
    if constexpr (c.a_in_registers) {
      // The decode tile: the split-K instance, the table-free ones where every expert's scales are positive
      // normal, the self-routing ones and GEMM2's one-row ones.
      if constexpr (EPI == GemmEpilogue::kSwiglu) {
        if (self_routed != nullptr) {
          launch_maybe_programmatic(decode_instance<CFG, EPI, true>(splits, all_normal), grid, 32 * splits,
                                    smem + kSelfRouteSlotBytes, stream, p, *self_routed);
          return;
        }
      }
      if constexpr (EPI == GemmEpilogue::kScaleFp32) {
        if (choice.one_row) {
          launch_maybe_programmatic(decode_instance<CFG, EPI, false, true>(splits, all_normal), grid, 32 * splits,
                                    smem, stream, p, one_token::NoSelfRoute{});
          return;
        }
      }
      FP4MOE_CHECK(self_routed == nullptr, "grouped GEMM: self-routing is an instance of the SwiGLU GEMM1");
      FP4MOE_CHECK(!choice.one_row, "grouped GEMM: one-row tiles are an instance of GEMM2");
      launch_maybe_programmatic(decode_instance<CFG, EPI, false>(splits, all_normal), grid, 32 * splits, smem, stream,
                                p, one_token::NoSelfRoute{});
    } else {
      // all_normal concerns the decode tile only: the prefill tiles always read the scale table.
      FP4MOE_CHECK(self_routed == nullptr && !choice.one_row,
                   "grouped GEMM: self-routing and one-row tiles are instances of the decode tile");
      launch_maybe_programmatic(grouped_gemm_kernel<CFG, EPI, false>, grid, c.warps_m * c.warps_n * 32, smem, stream, p,
                                one_token::NoSelfRoute{});
    }
  }
}

template <GemmEpilogue EPI>
void launch_epilogue(const Params& p, int cfg, int64_t max_tiles, const InstanceChoice& choice, cudaStream_t stream) {
  switch (cfg) {
    case 0: return launch_config<0, EPI>(p, max_tiles, choice, stream);
    case 1: return launch_config<1, EPI>(p, max_tiles, choice, stream);
    case 2: return launch_config<2, EPI>(p, max_tiles, choice, stream);
    case 3: return launch_config<3, EPI>(p, max_tiles, choice, stream);
    case 4: return launch_config<4, EPI>(p, max_tiles, choice, stream);
    case 5: return launch_config<5, EPI>(p, max_tiles, choice, stream);
  }
  static_assert(kNumConfigs == 6, "launch_epilogue lists every configuration");
  fail("grouped GEMM: unknown tile configuration ", cfg);
}

// The first configuration of the M tile that runs the epilogue.
int config_index(int tile_m, GemmEpilogue epilogue) {
  for (int i = 0; i < kNumConfigs; ++i)
    if (kConfigs[i].bm == tile_m && supports_epilogue(kConfigs[i], epilogue)) return i;
  fail("grouped GEMM: no tile configuration for tile_m = ", tile_m, " (have 16, 64, 96, 128)");
}

template <int CFG, bool WARP_SPLIT, bool ALL_NORMAL = false>
void configure_instances() {
  const int bytes = static_cast<int>(smem_bytes(kConfigs[CFG], WARP_SPLIT ? kMaxKSplits : 1));
  FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_kernel<CFG, GemmEpilogue::kSwiglu, WARP_SPLIT, ALL_NORMAL>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  if constexpr (kConfigs[CFG].a_in_registers) {
    FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_kernel<CFG, GemmEpilogue::kSwiglu, WARP_SPLIT, ALL_NORMAL, true>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, bytes + kSelfRouteSlotBytes));
  }
  if constexpr (supports_epilogue(kConfigs[CFG], GemmEpilogue::kSwigluNvfp4)) {
    FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_kernel<CFG, GemmEpilogue::kSwigluNvfp4, WARP_SPLIT, ALL_NORMAL>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  }
  FP4MOE_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_kernel<CFG, GemmEpilogue::kScaleFp32, WARP_SPLIT, ALL_NORMAL>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  if constexpr (kConfigs[CFG].a_in_registers) {
    FP4MOE_CUDA_CHECK(
        cudaFuncSetAttribute(grouped_gemm_kernel<CFG, GemmEpilogue::kScaleFp32, WARP_SPLIT, ALL_NORMAL, false, true>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  }
}
template <int CFG>
void configure_config() {
  configure_instances<CFG, false>();
  if constexpr (kConfigs[CFG].a_in_registers) {
    configure_instances<CFG, true>();
    configure_instances<CFG, false, true>();
    configure_instances<CFG, true, true>();
  }
}

// GroupedGemmArgs::self_routing: one token, the W4A16 GEMM1 on the decode tile, every route buffer present.
one_token::SelfRouteParams checked_self_route_params(const GroupedGemmArgs& args, GemmEpilogue epilogue, int tile_m) {
  const GemmSelfRouting& s = *args.self_routing;
  const int K = s.config.top_k, E = s.config.num_experts;
  FP4MOE_CHECK(epilogue == GemmEpilogue::kSwiglu && tile_m == kConfigs[0].bm,
               "grouped GEMM: self-routing is the W4A16 GEMM1 (SwiGLU epilogue) on the ", kConfigs[0].bm,
               "-row decode tile, got tile_m ", tile_m);
  check_cuda_routing_config(s.config);
  FP4MOE_CHECK(E == args.num_experts && args.rows == K, "grouped GEMM: self-routing routes one token (rows = top_k = ",
               K, ", got ", args.rows, ") over the GEMM's experts (", args.num_experts, ", routing has ", E, ")");
  FP4MOE_CHECK(args.max_tiles > K, "grouped GEMM: self-routing needs a tile per routed expert (", K,
               ") and a row of CTAs past them (the route buffers' writers), grid has ", args.max_tiles);
  FP4MOE_CHECK(!args.route_final_at_launch && args.a_slots == nullptr,
               "grouped GEMM: self-routing writes the route buffers and reads the token's row itself (no early start, "
               "no a_slots)");
  const MoeRouteBuffers& b = args.route;
  FP4MOE_CHECK(s.router_logits && b.topk_ids && b.topk_weights && b.expert_counts && b.expert_offsets &&
                   b.sorted_slots && b.slot_rows && b.tile_expert && b.tile_row_begin && b.num_tiles,
               "grouped GEMM: self-routing needs the router logits and every route buffer");
  return one_token::SelfRouteParams{
      route_device::make_route_params(s.config, s.router_logits, s.correction_bias, 1, b.topk_ids, b.topk_weights),
      b.expert_counts, b.expert_offsets, b.sorted_slots, b.slot_rows, b.tile_expert, b.tile_row_begin, b.num_tiles};
}

}  // namespace

size_t grouped_gemm_smem_bytes(int tile_m) {
  config_index(tile_m, GemmEpilogue::kSwiglu);  // unknown tiles are errors
  size_t bytes = 0;
  for (const TileConfig& c : kConfigs)
    if (c.bm == tile_m) bytes = std::max(bytes, smem_bytes(c));
  return bytes;
}

int decode_family(GemmEpilogue epilogue, bool one_row_tiles) {
  switch (epilogue) {
    case GemmEpilogue::kSwiglu:
    case GemmEpilogue::kSwigluNvfp4:
      FP4MOE_CHECK(!one_row_tiles, "grouped GEMM: one-row tiles are an instance of GEMM2 (kScaleFp32)");
      return epilogue == GemmEpilogue::kSwiglu ? 0 : 1;
    case GemmEpilogue::kScaleFp32:
      return one_row_tiles ? 3 : 2;
  }
  fail("grouped GEMM: unknown epilogue ", static_cast<int>(epilogue));
}

int grouped_gemm_k_splits(int64_t n, int64_t k, int64_t rows, int num_experts, int tile_m,
                          const DecodeResidency& residency, GemmEpilogue epilogue, bool one_row_tiles) {
  const int* ctas_per_sm = residency.ctas_per_sm[decode_family(epilogue, one_row_tiles)];
  FP4MOE_CHECK(residency.sms > 0 && ctas_per_sm[1] > 0,
               "grouped_gemm_k_splits: unknown device residency (grouped_gemm_decode_residency)");
  if (tile_m != kConfigs[0].bm || rows <= 0) return 1;
  // The most splits whose CTAs (one warp per split) are all resident at once, >= 2 chunks per split.
  // Measured (H200, E=512, T=1..16): a second, partial wave costs more than the split saves.
  const int64_t ctas = (n / kConfigs[0].bn) * std::min<int64_t>(num_experts, rows);
  const int most = static_cast<int>(std::min<int64_t>(kMaxKSplits, (k / kChunkK) / 2));
  for (int splits = most; splits > 1; --splits)
    if (ctas <= int64_t{residency.sms} * ctas_per_sm[splits]) return splits;
  return 1;
}

// Params::early_ctas: the decode tile's first wave (the CTAs resident at once, launched in linear block
// order) starts early when the route buffers are final at launch; none otherwise.
int early_start_ctas(const GroupedGemmArgs& args, GemmEpilogue epilogue, int tile_m, int splits) {
  if (!args.route_final_at_launch || tile_m != kConfigs[0].bm) return 0;
  const DecodeResidency& residency = args.decode_residency;
  const int ctas_per_sm = residency.ctas_per_sm[decode_family(epilogue, args.one_row_tiles)][splits];
  FP4MOE_CHECK(residency.sms > 0 && ctas_per_sm > 0,
               "grouped GEMM: route_final_at_launch needs the device residency (grouped_gemm_decode_residency)");
  return residency.sms * ctas_per_sm;
}

// Resident CTAs of `splits` warps per SM of the current device: the fewest over the decode instances of
// the family that a launch with that split count may take (scale paths; self-routing for kSwiglu).
template <GemmEpilogue EPI, bool ONE_ROW = false>
cudaError_t fewest_resident_decode_ctas(int splits, int& ctas) {
  const size_t smem = smem_bytes(kConfigs[0], splits);
  cudaError_t err = cudaSuccess;
  ctas = std::numeric_limits<int>::max();
  auto query = [&](auto kernel, size_t bytes) {
    int resident = 0;
    if (err == cudaSuccess) err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, 32 * splits, bytes);
    ctas = std::min(ctas, resident);
  };
  for (bool all_normal : {false, true}) {
    query(decode_instance<0, EPI, false, ONE_ROW>(splits, all_normal), smem);
    if constexpr (EPI == GemmEpilogue::kSwiglu) {
      query(decode_instance<0, EPI, true>(splits, all_normal), smem + kSelfRouteSlotBytes);
    }
  }
  return err;
}

DecodeResidency grouped_gemm_decode_residency(int device) {
  DecodeResidency r;
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&r.sms, cudaDevAttrMultiProcessorCount, device));
  int current = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&current));
  FP4MOE_CUDA_CHECK(cudaSetDevice(device));
  cudaError_t err = cudaSuccess;
  for (int splits = 1; splits <= kMaxKSplits && err == cudaSuccess; ++splits) {
    auto family = [&](GemmEpilogue e, bool one_row) -> int& { return r.ctas_per_sm[decode_family(e, one_row)][splits]; };
    err = fewest_resident_decode_ctas<GemmEpilogue::kSwiglu>(splits, family(GemmEpilogue::kSwiglu, false));
    if (err == cudaSuccess) {
      err = fewest_resident_decode_ctas<GemmEpilogue::kSwigluNvfp4>(splits, family(GemmEpilogue::kSwigluNvfp4, false));
    }
    if (err == cudaSuccess) {
      err = fewest_resident_decode_ctas<GemmEpilogue::kScaleFp32>(splits, family(GemmEpilogue::kScaleFp32, false));
    }
    if (err == cudaSuccess) {
      err = fewest_resident_decode_ctas<GemmEpilogue::kScaleFp32, true>(splits, family(GemmEpilogue::kScaleFp32, true));
    }
  }
  static_assert(kDecodeFamilies == 4, "every family's residency is queried");
  FP4MOE_CUDA_CHECK(cudaSetDevice(current));
  FP4MOE_CUDA_CHECK(err);
  bool every_family = true;
  for (const auto& family : r.ctas_per_sm) every_family = every_family && family[1] > 0;
  FP4MOE_CHECK(r.sms > 0 && every_family, "grouped GEMM: the decode tile does not fit an SM of device ", device);
  return r;
}

void configure_grouped_gemm_kernels() {
  int device = 0, optin = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  configure_config<0>();
  configure_config<1>();
  // 96 and 128 rows need more than the ~100 KB per block of SM 8.6/8.9 parts; the backend never
  // picks them there (cuda_sm80_pipeline.cpp, large_tile_fits).
  if (static_cast<size_t>(optin) >= smem_bytes(kConfigs[2])) configure_config<2>();
  if (static_cast<size_t>(optin) >= smem_bytes(kConfigs[3])) configure_config<3>();
  if (static_cast<size_t>(optin) >= smem_bytes(kConfigs[4])) configure_config<4>();
  if (static_cast<size_t>(optin) >= smem_bytes(kConfigs[5])) configure_config<5>();
}

void launch_grouped_gemm_nvfp4w_bf16(const GroupedGemmArgs& args, GemmEpilogue epilogue, int tile_m,
                                     cudaStream_t stream) {
  FP4MOE_CHECK(args.n > 0 && args.n % 128 == 0, "grouped GEMM: N (", args.n, ") must be a positive multiple of 128");
  FP4MOE_CHECK(args.k > 0 && args.k % kChunkK == 0, "grouped GEMM: K (", args.k, ") must be a positive multiple of 128");
  FP4MOE_CHECK(args.a && args.w_packed && args.w_scales && args.scale_first && args.out,
               "grouped GEMM: null operand pointer");
  FP4MOE_CHECK(epilogue == GemmEpilogue::kScaleFp32 || args.scale_second,
               "grouped GEMM: the SwiGLU epilogues need scale_second (up_scale2)");
  FP4MOE_CHECK(epilogue != GemmEpilogue::kSwigluNvfp4 || args.out_scale,
               "grouped GEMM: the NVFP4 SwiGLU epilogue needs out_scale (w2_input_scale)");
  if (args.max_tiles <= 0) return;
  FP4MOE_CHECK(args.max_tiles < 65536, "grouped GEMM: ", args.max_tiles, " M tiles exceed the grid limit");
  FP4MOE_CHECK(!args.a_slots || args.top_k >= 1, "grouped GEMM: reading A through a_slots needs top_k >= 1");
  // The kernel addresses A in 16-byte units with 32-bit offsets; A has at most max_tiles * tile_m rows
  // (the sorted rows; the tokens behind them are fewer).
  FP4MOE_CHECK(static_cast<uint64_t>(args.max_tiles) * static_cast<uint64_t>(tile_m) * static_cast<uint64_t>(args.k) / 8 <=
                   uint64_t{0xFFFFFFFF},
               "grouped GEMM: ", args.max_tiles, " M tiles of ", tile_m, " rows x K = ", args.k,
               " exceed the kernel's 32-bit offsets into A");
  Params p{static_cast<const __nv_bfloat16*>(args.a), args.a_slots, args.top_k, args.w_packed, args.w_scales, static_cast<int>(args.n),
           static_cast<int>(args.k), args.scale_first, args.scale_second, args.input_scale, args.out_scale,
           args.route.tile_expert, args.route.tile_row_begin, args.route.num_tiles, args.route.expert_offsets,
           args.out, 0, 0, 0};
  FP4MOE_CHECK(args.tile96_warps == Tile96Warps::kEight || tile_m == 96,
               "grouped GEMM: the four-warp layout is a layout of the 96-row tile, not of tile_m ", tile_m);
  const int cfg = args.tile96_warps == Tile96Warps::kFour ? kConfigTile96FourWarps : config_index(tile_m, epilogue);
  FP4MOE_CHECK(args.k_splits >= 0 && args.k_splits <= kMaxKSplits, "grouped GEMM: k_splits ", args.k_splits,
               " outside [0, ", kMaxKSplits, "]");
  FP4MOE_CHECK(args.k_splits <= 1 || tile_m == kConfigs[0].bm, "grouped GEMM: forced k_splits ", args.k_splits,
               " needs tile_m ", kConfigs[0].bm, ", got ", tile_m);
  FP4MOE_CHECK(!args.one_row_tiles || (epilogue == GemmEpilogue::kScaleFp32 && tile_m == kConfigs[0].bm &&
                                        args.top_k >= 1 && args.rows == args.top_k),
               "grouped GEMM: one-row tiles are GEMM2 of one token (rows = top_k >= 1) on the ", kConfigs[0].bm,
               "-row decode tile, got tile_m ", tile_m, ", rows ", args.rows, ", top_k ", args.top_k);
  const int splits = args.k_splits > 0 ? args.k_splits
                                       : grouped_gemm_k_splits(args.n, args.k, args.rows, args.num_experts, tile_m,
                                                               args.decode_residency, epilogue, args.one_row_tiles);
  p.early_ctas = early_start_ctas(args, epilogue, tile_m, splits);
  std::optional<one_token::SelfRouteParams> self_route;
  if (args.self_routing) self_route = checked_self_route_params(args, epilogue, tile_m);
  const InstanceChoice choice{splits, args.scales_all_normal, args.one_row_tiles, self_route ? &*self_route : nullptr};
  switch (epilogue) {
    case GemmEpilogue::kSwiglu: return launch_epilogue<GemmEpilogue::kSwiglu>(p, cfg, args.max_tiles, choice, stream);
    case GemmEpilogue::kSwigluNvfp4:
      return launch_epilogue<GemmEpilogue::kSwigluNvfp4>(p, cfg, args.max_tiles, choice, stream);
    case GemmEpilogue::kScaleFp32: return launch_epilogue<GemmEpilogue::kScaleFp32>(p, cfg, args.max_tiles, choice, stream);
  }
  fail("grouped GEMM: unknown epilogue");
}

}  // namespace fp4moe
