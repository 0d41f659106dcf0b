// The fused decode's plan (plan_moe_fused_decode, moe_fused_decode_sm80.h): launch 1's and launch 2's CTA
// shapes, grids and shared memory for a problem on this device, the one-token early-prime twin, and the
// register fit of launch 2 beside launch 1's last CTA (fused_decode_register_fit). Host code: it sets the
// kernels' shared-memory attributes and asks the runtime for their occupancies and registers, through the
// instances moe_fused_decode_sm80.cu exports (moe_fused_decode_sm80_instances.cuh). Planning knobs
// (FP4MOE_FD_*; measurements and tests) are read here, and a value out of range is an error naming it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "common/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/moe_fused_decode_sm80.h"
#include "kernels/cuda/moe_fused_decode_sm80_instances.cuh"
#include "kernels/cuda/moe_fused_decode_sm80_params.cuh"

namespace fp4moe {
namespace {

using namespace fused_decode;

// A shape-index planning knob (measurements, tests): -1 when unset or empty, else its single digit
// 0..count-1 (count <= 10); any other value is an error naming the knob.
int read_shape_knob(const char* knob, int count) {
  const char* env = std::getenv(knob);
  if (env == nullptr || env[0] == '\0') return -1;
  FP4MOE_CHECK(env[0] >= '0' && env[0] < '0' + count && env[1] == '\0', knob, " must be 0..", count - 1, ", not '",
               env, "'");
  return env[0] - '0';
}
static_assert(kGemm2ShapeCount <= 10 && kFusedDecodeW4A16Gemm1ShapeCount <= 10, "single-digit shape knobs");

// Sets the shared-memory attribute of a shape's two instances (with the scale table and table-free: which
// one runs depends on the weights, FusedDecodeWeights) and returns the lower of their occupancies.
template <typename Kernel>
int lower_occupancy(const Kernel (&instances)[2], int threads, size_t smem) {
  int occupancy = std::numeric_limits<int>::max();
  for (const Kernel kernel : instances) {
    FP4MOE_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    int instance_occupancy = 0;
    FP4MOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&instance_occupancy, kernel, threads, smem));
    occupancy = std::min(occupancy, instance_occupancy);
  }
  return occupancy;
}

// Launch 1's grid and shared memory depend on each other: its item table holds the most items a CTA takes
// (at most tk_cap token groups x row blocks, over the grid), and the table's size can lower the CTAs per
// SM. From the shape's CTAs per SM down, the first count whose table fits its occupancy (the kernel's
// shared-memory attribute is then set to that size); per_sm 0 when the shared memory exceeds the
// device's (smem is then the size last tried, for the error message). Both instances of the shape count
// (lower_occupancy).
struct Gemm1Size {
  int per_sm = 0, item_cap = 0;
  size_t smem = 0;
};
Gemm1Size size_gemm1(const MoeProblem& problem, int tk_cap, int shape, int multiprocessors, int optin) {
  const Gemm1Shape shape1 = kGemm1Shapes[shape];
  const Gemm1Kernel instances[2] = {gemm1_kernel(shape, false), gemm1_kernel(shape, true)};
  const int64_t max_items = gemm1_max_items(tk_cap, static_cast<int>(problem.inter), shape1.row_tiles);
  Gemm1Size size;
  for (int per_sm = shape1.ctas_per_sm; per_sm >= 1;) {
    const int64_t grid = int64_t(per_sm) * multiprocessors;
    size.item_cap = static_cast<int>((max_items + grid - 1) / grid);
    size.smem = gemm1_smem(static_cast<int>(problem.num_experts), tk_cap, shape1.row_tiles, size.item_cap).total;
    if (size.smem > size_t(optin)) break;  // fewer CTAs only make the table larger
    const int occupancy = lower_occupancy(instances, kGemm1Warps * 32, size.smem);
    if (occupancy >= per_sm) {
      size.per_sm = per_sm;
      break;
    }
    per_sm = occupancy;
  }
  return size;
}

// Launch 2's configuration for one kind of chunk: the kernel's shared-memory attribute (set here) and its
// grid (every CTA resident, at most one per row block). `full`: only at the shape's CTAs per SM, else
// none (grid 0: the plan takes another shape); otherwise (a forced shape) at any occupancy, an error when
// the shape cannot be resident at all.
FusedDecodeLaunch2 size_gemm2(const MoeProblem& problem, int tk_cap, int shape, bool one_tile, int multiprocessors,
                              int optin, bool full) {
  // Checks the shape and the instance; both scale forms count (lower_occupancy).
  const Gemm2Kernel instances[2] = {gemm2_kernel(shape, one_tile, false), gemm2_kernel(shape, one_tile, true)};
  const Gemm2Shape shape2 = kGemm2Shapes[shape];
  const size_t smem = gemm2_smem(tk_cap, shape2, one_tile).total;
  const int occupancy = smem <= size_t(optin) ? lower_occupancy(instances, shape2.warps * 32, smem) : 0;
  if (occupancy < (full ? shape2.ctas_per_sm : 1)) {
    FP4MOE_CHECK(full, "fused decode: launch 2 (shape ", shape, ", ", smem,
                 " bytes of shared memory per block) cannot be resident on this device (", optin, " bytes per block)");
    return FusedDecodeLaunch2{};
  }
  const int64_t row_blocks = problem.hidden / (kDecodeTileRows * shape2.row_tiles);
  FusedDecodeLaunch2 launch;
  launch.shape = shape;
  launch.smem = smem;
  launch.grid = static_cast<int>(std::min<int64_t>(row_blocks, int64_t(occupancy) * multiprocessors));
  return launch;
}

}  // namespace

int fused_decode_route_share_from(const MoeProblem& problem) {
  const char* env = std::getenv("FP4MOE_FD_ROUTE_SHARE_FROM");
  if (env == nullptr || env[0] == '\0') return fused_decode_default_route_share_from(problem);
  char* end = nullptr;
  const long from = std::strtol(env, &end, 10);
  FP4MOE_CHECK(*end == '\0' && from >= 1 && from <= kFusedDecodeMaxTokens + 1,
               "FP4MOE_FD_ROUTE_SHARE_FROM must be 1..", kFusedDecodeMaxTokens + 1, ", not '", env, "'");
  return static_cast<int>(from);
}

FusedDecodeRegisterFit fused_decode_register_fit(int gemm1_shape, bool gemm1_table_free, int gemm2_shape, bool one_tile,
                                                 bool gemm2_table_free) {
  // gemm1_kernel and gemm2_kernel refuse unknown shapes (and a missing instance) before kGemm2Shapes is read.
  cudaFuncAttributes gemm1{}, gemm2{};
  FP4MOE_CUDA_CHECK(cudaFuncGetAttributes(&gemm1, gemm1_kernel(gemm1_shape, gemm1_table_free)));
  FP4MOE_CUDA_CHECK(cudaFuncGetAttributes(&gemm2, gemm2_kernel(gemm2_shape, one_tile, gemm2_table_free)));
  int device = 0, per_sm = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxRegistersPerMultiprocessor, device));
  constexpr int kSubPartitions = 4;  // SM70 and later
  const auto warp_registers = [](int per_thread) { return (per_thread + 7) / 8 * 8 * 32; };
  const auto warps_on_fullest = [](int warps) { return (warps + kSubPartitions - 1) / kSubPartitions; };
  FusedDecodeRegisterFit fit;
  fit.gemm1_registers = gemm1.numRegs;
  fit.gemm2_registers = gemm2.numRegs;
  fit.sub_partition_registers = per_sm / kSubPartitions;
  fit.needed = warps_on_fullest(kGemm1Warps) * warp_registers(gemm1.numRegs) +
               warps_on_fullest(kGemm2Shapes[gemm2_shape].warps) * warp_registers(gemm2.numRegs);
  return fit;
}

FusedDecodePlan plan_moe_fused_decode(const MoeProblem& problem, int multiprocessors) {
  check_problem(problem);
  FP4MOE_CHECK(multiprocessors >= 1, "fused decode: no multiprocessors");
  const int tk_cap = tk_capacity(problem);
  FusedDecodePlan plan;
  const bool w4a4 = problem.activation_mode == ActivationMode::kW4A4;
  int device = 0, optin = 0;
  FP4MOE_CUDA_CHECK(cudaGetDevice(&device));
  FP4MOE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  plan.route_share_from = fused_decode_route_share_from(problem);
  plan.table_scales_forced = read_shape_knob("FP4MOE_FD_TABLE_SCALES", 2) == 1;
  // Launch 2's CTA shapes (kGemm2Shapes) for chunks of 1..3, 4..8 and more tokens (the header says why;
  // the first and the last take the same shape, in its two instances):
  // FP4MOE_FD_GEMM2_SHAPE (measurements, tests; a 32-row shape for chunks of up to 8 tokens only), else the
  // default shape where it runs at its full CTAs per SM on this device, else shape 0 (10 warps need 105
  // KiB for 64 tokens at Qwen3.5-397B's 640 slots, more than the 99 KiB of SM86/89/120 parts, where 8
  // warps take 95 KiB).
  const int shape2_knob = read_shape_knob("FP4MOE_FD_GEMM2_SHAPE", kGemm2ShapeCount);
  auto default_or_shape0 = [&](bool one_tile) {
    const FusedDecodeLaunch2 launch =
        size_gemm2(problem, tk_cap, kFusedDecodeDefaultGemm2Shape, one_tile, multiprocessors, optin, true);
    if (launch.grid > 0) return launch;
    return size_gemm2(problem, tk_cap, 0, one_tile, multiprocessors, optin, false);  // an error if it cannot run
  };
  auto forced = [&](bool one_tile) {
    return size_gemm2(problem, tk_cap, shape2_knob, one_tile, multiprocessors, optin, false);
  };
  plan.gemm2_many = shape2_knob >= 0 && kGemm2Shapes[shape2_knob].row_tiles == 1
                        ? forced(false)
                        : default_or_shape0(false);
  plan.gemm2_latency = shape2_knob >= 0 ? forced(true) : default_or_shape0(true);
  // 32-row CTAs where no SM gets more rows than with 16-row ones: Qwen3.5-397B's 256 tiles of H are 2 per
  // SM either way on 132 SMs; the 128 tiles of H = 2048 would be 2 on 64 SMs instead of 1 on 128.
  const int64_t tiles = problem.hidden / kDecodeTileRows, sms = multiprocessors;
  const int few_rows = kGemm2Shapes[kFusedDecodeGemm2FewShape].row_tiles;
  const bool balanced = few_rows * ((tiles / few_rows + sms - 1) / sms) <= (tiles + sms - 1) / sms;
  // Where the 32-row shape is not balanced or does not run at its full CTAs per SM: the latency chunks'.
  const FusedDecodeLaunch2 few =
      shape2_knob < 0 && balanced
          ? size_gemm2(problem, tk_cap, kFusedDecodeGemm2FewShape, true, multiprocessors, optin, true)
          : FusedDecodeLaunch2{};
  plan.gemm2_few = few.grid > 0 ? few : plan.gemm2_latency;
  // Launch 1's shape (kGemm1Shapes): W4A4's; or FP4MOE_FD_GEMM1_SHAPE (measurements, tests); or the default
  // where it fits at its full CTAs per SM, else 16-row items.
  const int shape1_knob = read_shape_knob("FP4MOE_FD_GEMM1_SHAPE", kFusedDecodeW4A16Gemm1ShapeCount);
  FP4MOE_CHECK(shape1_knob < 0 || !w4a4, "FP4MOE_FD_GEMM1_SHAPE chooses among the W4A16 shapes; W4A4 has one");
  plan.gemm1_shape = w4a4 ? kGemm1ShapeW4A4 : (shape1_knob >= 0 ? shape1_knob : kFusedDecodeDefaultGemm1Shape);
  Gemm1Size size1 = size_gemm1(problem, tk_cap, plan.gemm1_shape, multiprocessors, optin);
  if (!w4a4 && shape1_knob < 0 && size1.per_sm < kGemm1Shapes[plan.gemm1_shape].ctas_per_sm) {
    plan.gemm1_shape = 0;
    size1 = size_gemm1(problem, tk_cap, plan.gemm1_shape, multiprocessors, optin);
  }
  FP4MOE_CHECK(size1.per_sm >= 1, "fused decode: launch 1 (shape ", plan.gemm1_shape, ") needs ", size1.smem,
               " bytes of shared memory per block, more than this device's ", optin, " or its occupancy allows");
  // Persistent grid, every CTA resident. Items come in rounds over the grid: one token's 10 experts x 64
  // row blocks of 32 rows = 640 items are 2.4 rounds on 264 CTAs, so the longest CTA does 3 items.
  plan.gemm1_grid = size1.per_sm * multiprocessors;
  plan.gemm1_item_cap = size1.item_cap;
  plan.gemm1_smem = size1.smem;  // size_gemm1 left the kernel's shared-memory attribute at this size
  // Chunks of one token routed by every CTA itself: the shape's early-prime twin where it applies (unless
  // FP4MOE_FD_EARLY_PRIME=0; measurements, tests) and runs the same grid and table (it has its own
  // registers: its occupancy is checked, not assumed).
  const int early_knob = read_shape_knob("FP4MOE_FD_EARLY_PRIME", 2);
  const int twin = early_prime_twin(plan.gemm1_shape);
  plan.gemm1_one_token_shape = plan.gemm1_shape;
  if (early_knob != 0 && twin >= 0 && plan.route_share_from > 1 &&
      early_prime_fits(static_cast<int>(problem.hidden), static_cast<int>(problem.num_experts),
                       kGemm1Shapes[twin].row_tiles)) {
    const Gemm1Size twin_size = size_gemm1(problem, tk_cap, twin, multiprocessors, optin);
    if (twin_size.per_sm == size1.per_sm && twin_size.item_cap == size1.item_cap && twin_size.smem == size1.smem)
      plan.gemm1_one_token_shape = twin;
  }
  plan.gemm2_latency_table_free =
      fused_decode_register_fit(plan.gemm1_one_token_shape, true, plan.gemm2_latency.shape, true, true).fits();
  // One token: 8 warps where each takes one whole expert (fused_decode_one_token_whole_experts), at the shape's
  // full CTAs per SM; else the latency configuration.
  const FusedDecodeLaunch2 one_token =
      shape2_knob < 0 && fused_decode_one_token_whole_experts(problem)
          ? size_gemm2(problem, tk_cap, kFusedDecodeOneTokenGemm2Shape, true, multiprocessors, optin, true)
          : FusedDecodeLaunch2{};
  plan.gemm2_one_token = one_token.grid > 0 ? one_token : plan.gemm2_latency;
  plan.gemm2_one_token_table_free =
      one_token.grid > 0
          ? fused_decode_register_fit(plan.gemm1_one_token_shape, true, plan.gemm2_one_token.shape, true, true).fits()
          : plan.gemm2_latency_table_free;
  return plan;
}

}  // namespace fp4moe
