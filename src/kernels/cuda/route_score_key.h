// The key a routing score is selected by in the GPU top-k (moe_route_device.cuh): a larger key is a better
// score in the CPU reference's order (routing_reference.cpp: descending score, -0 == +0). Host and device:
// the host tests it (tests/kernels/cuda/test_route_score_key.cpp) on every sign, exponent and mantissa end.
// Key of a score with bits b: b | 2^31 where the sign bit is clear, -b (two's complement) where it is set,
// so that -0 lands where +0 does and -inf at 0x00800000; NaN (either sign) 1, below every number but still
// a candidate; 0 is left for "no candidate" (excluded, or past E). Integer operations only, no compares:
// a lane computes up to 32 at once, and the compare-and-select form kept each in one of a thread's 7
// predicates, which ptxas then ran one after another (docs/perf/2026-12-06-h100-r38.md: ~700 of the ~1500
// cycles before the first top-k round).
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/cuda/common/host_device.h"

namespace fp4moe::route_device {

FP4MOE_HOST_DEVICE inline uint32_t ordered_score_bits(float score) {
#if defined(__CUDA_ARCH__)
  const uint32_t b = __float_as_uint(score);
#else
  uint32_t b;
  std::memcpy(&b, &score, sizeof b);
#endif
  const uint32_t negative = static_cast<uint32_t>(static_cast<int32_t>(b) >> 31);  // all ones if negative
  const uint32_t key = ((b ^ negative) - negative) ^ (~negative & 0x80000000u);   // -b, or b | 2^31
  const uint32_t nan = static_cast<uint32_t>(static_cast<int32_t>((b & 0x7FFFFFFFu) + 0x007FFFFFu) >> 31);
  return (key & ~nan) | (nan & 1u);
}

}  // namespace fp4moe::route_device
