// cuda.cublas_bf16.baseline.v1: the library baseline of `fp4moe bench moe` (issue 4): what a team gets
// by dequantizing the NVFP4 experts to BF16 once and calling cuBLAS. Per run: routing, counting sort
// and gather (kernels/cuda/moe_route_permute.h), grouped GEMM1 (cublasGemmGroupedBatchedEx, BF16 in
// and out, fp32 accumulation), SwiGLU (fp32 math, BF16 out), grouped GEMM2, weighted combine.
//
// Numerics: weights are BF16(e2m1 * fp32(block_scale * tensor_scale)), gate and up rows each with their
// own tensor scale; GEMM outputs are rounded to BF16 as a plain BF16 library path does. So it is NOT
// bit-faithful to the numerics contract (expect ~1e-2 normalized error vs the reference); W4A4 is not
// supported (BF16 activations only).
//
// Host synchronization: cuBLAS takes the per-expert row counts on the host, so each run copies the
// [E] counts to the host once and waits for them. The baseline therefore cannot be captured in a
// CUDA graph; run() throws a clear Error when called on a capturing stream (before launching
// anything), and `fp4moe bench` times it with CUDA events around eager runs.
#pragma once
#include <memory>

#include "backends/moe_backend.h"

namespace fp4moe {

enum class BaselineGemmMode {
  kGrouped,    // one cublasGemmGroupedBatchedEx per GEMM (experts with equal row counts share a group)
  kPerExpert,  // one cublasGemmEx per non-empty expert
};

std::unique_ptr<MoeBackend> make_cublas_bf16_baseline_backend();
std::unique_ptr<MoeBackend> make_cublas_bf16_baseline_backend(BaselineGemmMode mode);

}  // namespace fp4moe
