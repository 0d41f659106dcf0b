// The operands of one grouped expert GEMM (GEMM1 or GEMM2 of a MoE layer), common to every grouped-GEMM
// kernel: each launcher's argument struct extends it with what that kernel needs besides (tile list,
// grid, workspaces), and the backends' shared runner (backends/pipeline_parts.h) fills it once.
#pragma once
#include <cstdint>

namespace fp4moe {

enum class GemmEpilogue {
  kSwiglu,       // GEMM1: W rows gate/up interleaved by 8; out BF16 [rows, N/2] = bf16(silu(g) * u)
  kSwigluNvfp4,  // GEMM1, W4A4: h quantized to NVFP4 with out_scale[e], stored dequantized (without it)
  kScaleFp32,    // GEMM2: out fp32 [rows, N] = scale_first[e] (* input_scale[e]) * acc
};

struct GroupedGemmOperands {
  const void* a = nullptr;              // [T*K, K] BF16 sorted rows; or [T, K] read through a_slots
  const int32_t* a_slots = nullptr;     // non-null: sorted row r is A's row a_slots[r] / top_k (no gather)
  int top_k = 0;                        // with a_slots
  const uint8_t* w_packed = nullptr;    // the kernel's repacked weights [E][...]
  const uint8_t* w_scales = nullptr;    // their E4M3 block scales
  bool scales_all_normal = false;       // every expert's block scales are positive normal E4M3 codes
                                        // (sm80 decode tiles: no scale table; e4m3_scale_bits.h)
  int64_t n = 0;                        // N: weight rows (GEMM1 2I, GEMM2 H)
  int64_t k = 0;                        // K (GEMM1 H, GEMM2 I)
  const float* scale_first = nullptr;   // [E] gate_scale2 (GEMM1) or down_scale2 (GEMM2)
  const float* scale_second = nullptr;  // [E] up_scale2 (GEMM1)
  const float* input_scale = nullptr;   // [E] activation tensor scale (W4A4) or null (W4A16)
  const float* out_scale = nullptr;     // [E] w2_input_scale (kSwigluNvfp4)
  void* out = nullptr;                  // kSwiglu*: BF16 [rows, N/2]; kScaleFp32: fp32 [rows, N]
};

}  // namespace fp4moe
