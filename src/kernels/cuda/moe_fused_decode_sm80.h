// The fused low-latency decode MoE (cuda.sm80.fused_decode.v1): two launches per chunk of at most
// kFusedDecodeMaxTokens tokens, SM80 and later.
//   launch 1: routes the chunk's tokens itself (no routing launch: below plan.route_share_from tokens
//             every CTA routes them all, from there on each token is routed by one CTA and shared),
//             sorts the slots by expert, and takes (expert, 8-token group, 16- or 32-row block of W13)
//             items: GEMM1, SwiGLU, h [slot, I] BF16 (W4A4: NVFP4-quantized with w2_input_scale). Its
//             last CTA also writes the routing record that launch 2 reads.
//   launch 2: one CTA per 16 or 32 output rows of H streams those rows of W2 for every touched expert, and
//             adds weight * down_scale2 * (W2 row . h) per token in a fixed order: the combine is
//             inside the GEMM, so the output is written once, without atomics. It reads the routing
//             record once launch 1's writer flags it and starts its W2 copies before waiting for h.
// Weights: nvfp4_decode_layout.h. Deterministic, allocation-free, no host synchronization, capturable.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/moe_problem.h"

namespace fp4moe {

// Tokens per launch pair; run() goes through larger batches in chunks of this many.
inline constexpr int64_t kFusedDecodeMaxTokens = 64;

struct FusedDecodeWeights {
  const uint8_t* w13 = nullptr;  // [E][2I/16][H/128] layout blocks, rows gate/up interleaved by 8
  const uint8_t* w2 = nullptr;   // [E][H/16][I/128] layout blocks
  const float* gate_scale2 = nullptr;  // [E]
  const float* up_scale2 = nullptr;    // [E]
  const float* down_scale2 = nullptr;  // [E]
  const float* w13_input_scale = nullptr;  // [E], W4A4 only
  const float* w2_input_scale = nullptr;   // [E], W4A4 only
  // Every block scale of the matrix (all experts) is a positive normal E4M3 code (e4m3_scale_bits.h;
  // experts_with_positive_normal_scales at prepare): its kernel builds the scales without the table.
  bool w13_scales_all_normal = false;
  bool w2_scales_all_normal = false;
};

// Launch 1's shapes for W4A16 (16-row tiles of W13 per item and CTAs per SM; the table is in the .cu;
// W4A4 has its own): plan_moe_fused_decode takes kFusedDecodeDefaultGemm1Shape where it fits the device at
// its full CTAs per SM, else shape 0; FP4MOE_FD_GEMM1_SHAPE=0..count-1 chooses (measurements, tests).
// Chunks of one token (routed by every CTA) take the shape's early-prime twin where it has one and
// H >= 4096 in steps of 1024 (plan.gemm1_one_token_shape): its ring's first copies start before the slot
// sort and item table, 1.5-1.6 % faster at one token of Qwen3.5-397B and Qwen3-235B on the H200
// (docs/perf/2026-12-02-h200-r29.md), and since r45 right after the top-k round that finds the CTA's first
// item rather than after all K rounds, 4.1-4.8 % more at Qwen3.5-397B on the H100
// (docs/perf/2026-12-07-h100-r45.md). FP4MOE_FD_EARLY_PRIME=0 turns it off
// (measurements, tests; 1 or unset: on; other values are errors).
inline constexpr int kFusedDecodeW4A16Gemm1ShapeCount = 2;
inline constexpr int kFusedDecodeDefaultGemm1Shape = 1;  // 32-row items, 2 CTAs per SM

// Launch 2's CTA shapes (warps per CTA, ring stages, 16 or 32 rows of H per CTA; the table is in the .cu),
// by chunk size (H200, docs/perf/2026-12-01-h200-r20.md):
//   4..8 tokens: kFusedDecodeGemm2FewShape, 32 rows and 20 warps (two tiles share each step's h loads and
//     bookkeeping), where no SM gets more rows than with 16-row CTAs: 3.6 % faster at 8 tokens of
//     Qwen3.5-397B, 1 % at 4, but 1-9 % slower at 1-3 (one CTA per SM: it starts only once launch 1 has
//     left the SM, while a 16-row CTA starts beside the SM's last launch-1 CTA);
//   other chunks: kFusedDecodeDefaultGemm2Shape, 16 rows, 10 warps, 5 stages.
// Each where it runs at its full CTAs per SM, else the next (down to shape 0, 8 warps: the 99 KiB of
// SM86/89/120 parts). FP4MOE_FD_GEMM2_SHAPE=0..count-1 (read when planning; measurements, tests) forces a
// shape for chunks of up to 8 tokens, and for larger chunks too when it is a 16-row one.
inline constexpr int kFusedDecodeGemm2ShapeCount = 3;
inline constexpr int kFusedDecodeDefaultGemm2Shape = 1;  // 10 warps, 5 stages, 16 rows
inline constexpr int kFusedDecodeGemm2FewShape = 2;      // 20 warps, 4 stages, 32 rows
inline constexpr int kFusedDecodeGemm2FewFrom = 4;       // tokens from which a chunk takes the few-token shape
inline constexpr int kFusedDecodeGemm2FewUpTo = 8;       // its last chunk size: one token group of launch 1
// Which of the plan's three launch-2 configurations a chunk of `tokens` (1..kFusedDecodeMaxTokens) takes:
// the latency one (1..3), the few-token one (4..8) or the one for larger chunks. A kernel-variant switch,
// so the backend declares it for qualification.
enum class FusedDecodeLaunch2Use { kLatency, kFew, kMany };
constexpr FusedDecodeLaunch2Use fused_decode_launch2_use(int64_t tokens) {
  if (tokens > kFusedDecodeGemm2FewUpTo) return FusedDecodeLaunch2Use::kMany;
  return tokens >= kFusedDecodeGemm2FewFrom ? FusedDecodeLaunch2Use::kFew : FusedDecodeLaunch2Use::kLatency;
}
static_assert(1 < kFusedDecodeGemm2FewFrom && kFusedDecodeGemm2FewFrom <= kFusedDecodeGemm2FewUpTo &&
              kFusedDecodeGemm2FewUpTo < kFusedDecodeMaxTokens);
// One-token chunks take launch 2's 8-warp shape 0 where each of its warps then takes one whole expert (top_k a
// multiple of 8) of at most 8 K chunks of 128 (I <= 1024): at one token, shape 0 over the default measured
// 0.984-0.988 at Qwen3-30B and Qwen3.5-35B and 0.993-0.995 at Qwen3.5-122B (H200 and H100), but 1.004 at
// Qwen3-235B (12 chunks: a longer chain per warp) and 1.005-1.013 at Qwen3.5-397B and Qwen3-Next-80B (top-10,
// whole experts on the default's 10 warps); at 2 tokens 1.001, at 4-8 tokens 1.3-2.0 % slower
// (docs/perf/2026-12-07-h200-r47.md); as this plan against the default on an H100, 0.985, 0.988 and 0.995
// (docs/perf/2026-12-07-h100-r48.md). Not for W4A4 (not measured).
inline constexpr int kFusedDecodeOneTokenGemm2Shape = 0;
inline constexpr int kFusedDecodeOneTokenWarps = 8;       // kGemm2Shapes[kFusedDecodeOneTokenGemm2Shape].warps
inline constexpr int kFusedDecodeOneTokenMaxChunks = 8;   // an expert's K chunks of 128 of I, at most
constexpr bool fused_decode_one_token_whole_experts(const MoeProblem& problem) {
  return problem.activation_mode == ActivationMode::kW4A16 && problem.top_k % kFusedDecodeOneTokenWarps == 0 &&
         problem.inter <= int64_t{kFusedDecodeOneTokenMaxChunks} * 128;
}
// From this many tokens per chunk on, launch 1's CTAs share the routing (each token routed by one CTA)
// instead of each routing every token. H200, 2026-12-01 (docs/perf/2026-12-01-h200-r17.md): at 2 tokens
// the per-CTA routing was faster (Qwen3.5-397B 59.4 against 61.5 us), at 4 the shared one (106.2 against
// 108.0, in a build whose per-CTA path was slower), at 8 and 64 the shared one by 3-9 %. Since the top-k
// is sized by E (r29), per-CTA routing is 1.6-3.4 % faster at 4 tokens and 0-2.4 % at 5 on six presets (and
// Qwen3.5-397B W4A4) (docs/perf/2026-12-02-h200-r30.md). From 6 on it depends on the router's size E x H,
// which every CTA reads once per token when it routes them all (r31, docs/perf/2026-12-02-h200-r31.md):
// per-CTA routing at 6-8 tokens was 0.7-2.5 % faster on five presets up to Qwen3-Next-80B's 512 x 2048, and
// 0.3-0.6 % slower at 8 tokens of Qwen3.5-397B's 512 x 4096.
inline constexpr int kFusedDecodeRouteShareFromLargeRouter = 6;
inline constexpr int kFusedDecodeRouteShareFromSmallRouter = 9;
inline constexpr int64_t kFusedDecodeSmallRouterElements = int64_t{512} * 2048;  // E x H, at most
static_assert(kFusedDecodeRouteShareFromLargeRouter > 2 &&
                  kFusedDecodeRouteShareFromLargeRouter < kFusedDecodeRouteShareFromSmallRouter &&
                  kFusedDecodeRouteShareFromSmallRouter <= kFusedDecodeMaxTokens,
              "per-CTA routing covers 1-2 tokens for every router and more for small ones");
constexpr int fused_decode_default_route_share_from(const MoeProblem& problem) {
  return problem.num_experts * problem.hidden <= kFusedDecodeSmallRouterElements
             ? kFusedDecodeRouteShareFromSmallRouter
             : kFusedDecodeRouteShareFromLargeRouter;
}
// The threshold in use: FP4MOE_FD_ROUTE_SHARE_FROM = 1..65 (65: never; measurements, tests), else the
// problem's default. Any other value of the knob is an error. Read by plan_moe_fused_decode and by the
// backend's declared variants.
int fused_decode_route_share_from(const MoeProblem& problem);

// One of launch 2's configurations (by the chunk's tokens; one token may take its own).
struct FusedDecodeLaunch2 {
  int shape = -1;  // CTA shape: index into the kernel's table
  int grid = 0;
  size_t smem = 0;
};

// Launch configuration chosen once per device (grid sizes fixed so that runs can be captured).
struct FusedDecodePlan {
  int gemm1_grid = 0;
  size_t gemm1_smem = 0;
  int gemm1_item_cap = 0;  // launch 1's item table: the most items a CTA of its grid takes
  int gemm1_shape = kFusedDecodeDefaultGemm1Shape;  // launch 1's shape (index into the kernel's table)
  int gemm1_one_token_shape = kFusedDecodeDefaultGemm1Shape;  // launch 1's shape for one-token chunks
  // Launch 2 by fused_decode_launch2_use:
  FusedDecodeLaunch2 gemm2_latency;  // chunks of 1..kFusedDecodeGemm2FewFrom - 1 tokens
  FusedDecodeLaunch2 gemm2_few;      // chunks of kFusedDecodeGemm2FewFrom..kFusedDecodeGemm2FewUpTo tokens
  FusedDecodeLaunch2 gemm2_many;     // larger chunks
  // One-token chunks: gemm2_latency, or shape 0 where fused_decode_one_token_whole_experts (and no
  // FP4MOE_FD_GEMM2_SHAPE), with its table-free instance only where its register fit holds (as below).
  FusedDecodeLaunch2 gemm2_one_token;
  bool gemm2_one_token_table_free = false;
  int route_share_from = 0;  // tokens from which launch 1's CTAs share routing (fused_decode_route_share_from)
  // FP4MOE_FD_TABLE_SCALES=1 (measurements, tests; 0 or unset: not forced, other values are errors): the
  // kernels load every block scale from the table even where all of a matrix's scales allow the table-free
  // form, which gives the same bits.
  bool table_scales_forced = false;
  // Chunks of 1..kFusedDecodeGemm2FewFrom - 1 tokens take launch 2's table-free instance only where it
  // keeps the one-token register fit beside launch 1's table-free one-token shape (fused_decode_register_fit).
  // On sm_90a it fits since r32 (85 registers: 2 x 120 + 3 x 88 of 512); at r31's 89 it did not (3 x 96).
  bool gemm2_latency_table_free = false;
};

// Launch 2's CTAs start (programmatic launch) beside an SM's last launch-1 CTA only where the warps of both
// fit one SM sub-partition's register file (4 per SM; a CTA's warps spread over them, so a 10-warp CTA puts 3
// on one). H200, 2026-12-01 (docs/perf/2026-12-01-h200-r23.md): two builds whose launch-1 and launch-2 warps
// needed 2 x 120 + 3 x 96 and 2 x 128 + 3 x 88 registers per lane of a sub-partition (more than its 512)
// were 1.5-1.7 us slower at one token of Qwen3.5-397B in graph replays than the same code with launch 1
// capped at 112 registers (512 and 488); Nsight Compute, which runs the launches apart, saw no such gap.
// This reports the fit of a launch-1 shape and a launch-2 instance, each with the scale table or table-free,
// as compiled for the current device. Throws Error for unknown shapes or a 32-row shape's missing instance.
struct FusedDecodeRegisterFit {
  int gemm1_registers = 0;          // per thread, as compiled
  int gemm2_registers = 0;          // per thread, as compiled
  int sub_partition_registers = 0;  // registers of one SM sub-partition
  int needed = 0;  // one CTA of each: their warps' registers (allocated in units of 8 per thread) on the fullest
  bool fits() const { return needed <= sub_partition_registers; }
};
FusedDecodeRegisterFit fused_decode_register_fit(int gemm1_shape, bool gemm1_table_free, int gemm2_shape, bool one_tile,
                                                 bool gemm2_table_free);

// Sets the kernels' shared-memory attributes on the current device and sizes the persistent grids.
// Throws Error when the problem does not fit (E > 1024, K > 32, H or I not multiples of 128).
FusedDecodePlan plan_moe_fused_decode(const MoeProblem& problem, int multiprocessors);

// Workspace for one chunk (routing record + h), reused chunk after chunk on the same stream.
size_t moe_fused_decode_workspace_bytes(const MoeProblem& problem);

struct FusedDecodeRun {
  const void* hidden = nullptr;            // [T, H] BF16, 16-byte aligned
  const float* router_logits = nullptr;    // [T, E]
  const float* correction_bias = nullptr;  // [E] or null
  int64_t tokens = 0;
  void* out = nullptr;                     // [T, H] BF16
  void* workspace = nullptr;               // moe_fused_decode_workspace_bytes
};

void launch_moe_fused_decode(const MoeProblem& problem, const FusedDecodeWeights& weights, const FusedDecodePlan& plan,
                             const FusedDecodeRun& run, cudaStream_t stream);

}  // namespace fp4moe
