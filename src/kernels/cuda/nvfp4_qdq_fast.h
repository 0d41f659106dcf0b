// W4A4 activation quantize-dequantize with one reciprocal per NVFP4 block instead of a division per
// value, bit-identical to the division (nvfp4_device.cuh nvfp4_qdq_value, the CPU reference's
// nvfp4_quantize_block). Host and device: the CPU test checks it against the reference on every BF16
// value. Why: launch 1 of the fused decode quantizes every activation it multiplies, and with an IEEE
// division per value (a dozen instructions and a branch each) W4A4 took 3x W4A16's time at one token
// of Qwen3.5-397B (docs/perf/2026-12-01-h200-r24.md).
//
// Why it is exact: with d and r = RN(1/d) normal floats, q' = RN(x * r) is within 2^-22 (relative) of
// the quotient RN(x / d). E2M1 rounding (RNE on the grid 0, 0.5, 1, 1.5, 2, 3, 4, 6) only changes at
// the midpoints 0.25, 0.75, 1.25, 1.75, 2.5, 3.5 and 5, i.e. at half-integers of |q| counted in grid
// steps (0.5 below 2, 1 below 4, 2 above). Below 8, 2^-22 relative is under 2^-18 steps, so a product
// farther than 2^-16 steps from every half-integer rounds like the quotient; from 8 up both give 6.
// Closer than that (an exact midpoint needs x = midpoint * d: 3.6e-5 of the values in
// test_nvfp4_qdq_fast.cpp's sweep) the function reports `unsure` and the caller divides.
#pragma once
#include <math.h>

#include "kernels/cuda/common/host_device.h"

namespace fp4moe {

// RN(a * b) and RN(a - b) without contraction into an FMA (device) / as IEEE float (host).
FP4MOE_HOST_DEVICE inline float qdq_mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// RN(1 / divisor), or 0 where divisor or its reciprocal would not be a normal float (0, negative,
// NaN, below 2^-125 or above 2^125): there the error bound above does not hold and the caller divides.
FP4MOE_HOST_DEVICE inline float nvfp4_qdq_reciprocal(float divisor) {
  if (!(divisor >= 0x1p-125f && divisor <= 0x1p125f)) return 0.0f;
#if defined(__CUDA_ARCH__)
  return __frcp_rn(divisor);
#else
  return 1.0f / divisor;
#endif
}

// The signed E2M1 value that x / divisor rounds to (sign as ModelOpt's `x < 0`: -0.0 gives +0), from
// reciprocal = nvfp4_qdq_reciprocal(divisor) != 0. Sets `unsure` (never clears it) where the product
// is within 2^-16 grid steps of a rounding midpoint: there only the division decides. NaN gives 6, as
// the division's rounding (e2m1_round_value) does.
FP4MOE_HOST_DEVICE inline float e2m1_round_by_reciprocal(float x, float reciprocal, bool& unsure) {
  const float q = qdq_mul_rn(x, reciprocal);
  const float a = fabsf(q);
  const float steps_per_unit = a < 2.0f ? 2.0f : (a < 4.0f ? 1.0f : 0.5f);
  const float units_per_step = a < 2.0f ? 0.5f : (a < 4.0f ? 1.0f : 2.0f);
  const float steps = qdq_mul_rn(a, steps_per_unit);  // exact: a power of two
  const float nearest = rintf(steps);               // RNE: the grid's ties to even
  const float off_grid = fabsf(steps - nearest);    // exact (Sterbenz), in [0, 0.5]
  if (a < 8.0f && !(off_grid < 0.5f - 0x1p-16f)) unsure = true;
  const float m = fminf(qdq_mul_rn(nearest, units_per_step), 6.0f);
  return q < 0.0f ? -m : m;
}

}  // namespace fp4moe
