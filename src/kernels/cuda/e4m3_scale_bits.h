// E4M3 block-scale codes as the bf16 multiplier of the sm80 kernels' FP4 decode, without a table.
// The kernels decode an FP4 code to the bf16 bits of e2m1 * 2^-126 and multiply by bf16(scale * 2^117),
// which a 1 KB shared-memory table maps from every E4M3 code (sm80::scale_lut_entry). For a positive
// normal code (0x08..0x7E: exponent 1..15, not NaN) those bf16 bits are the code's exponent and mantissa
// moved into bf16's fields with the exponent bias adjusted (e - 7 + 117 + 127 = e + 237): (code << 4) +
// kNormalScaleBf16Bias. A kernel builds two of them with two integer operations (a byte permute placing
// the codes in the low bytes of the two halves, then a multiply-add: sm80::normal_scale_pair_bf16x2; each
// bf16x2 multiply takes one half for both lanes, sm80::bf16x2_mul_by_half) instead of a shift, a mask
// and a shared-memory load each, but only for experts whose every scale is such a code: zero, subnormal,
// negative and NaN codes need the table. Host and device (C++17: the .cu files include it).
#pragma once
#include <cstdint>

namespace fp4moe {

inline constexpr uint32_t kNormalScaleBf16Bias = 237u << 7;  // 0x7680
constexpr bool e4m3_is_positive_normal(uint8_t code) { return code >= 0x08 && code <= 0x7E; }

}  // namespace fp4moe
