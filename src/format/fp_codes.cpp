#include "format/fp_codes.h"

#include <array>
#include <bit>
#include <cmath>
#include <limits>

namespace fp4moe {
namespace {

constexpr std::array<float, 8> kE2m1Magnitudes = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

std::array<float, 256> make_e4m3_table() {
  std::array<float, 256> table{};
  for (int code = 0; code < 256; ++code) {
    int exponent = (code >> 3) & 0xF, mantissa = code & 0x7;
    float magnitude;
    if (exponent == 0xF && mantissa == 0x7) {
      magnitude = std::numeric_limits<float>::quiet_NaN();
    } else if (exponent == 0) {
      magnitude = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m * 2^-9
    } else {
      magnitude = std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
    }
    table[code] = (code & 0x80) ? -magnitude : magnitude;
  }
  return table;
}

const std::array<float, 256> kE4m3Table = make_e4m3_table();

}  // namespace

float e2m1_decode(uint8_t code) {
  float magnitude = kE2m1Magnitudes[code & 0x7];
  return (code & 0x8) ? -magnitude : magnitude;
}

uint8_t e2m1_encode(float value) {
  const uint8_t sign = std::signbit(value) ? 0x8 : 0x0;
  if (std::isnan(value)) return sign | 0x7;
  return sign | e2m1_magnitude_code(std::fabs(value));  // +-Inf: every comparison true, 7 (saturate)
}

float e4m3_decode(uint8_t code) { return kE4m3Table[code]; }

uint8_t e4m3_encode_satfinite(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint8_t sign = (bits >> 31) ? 0x80 : 0x00;
  if (std::isnan(value)) return sign | 0x7F;
  const float a = std::fabs(value);
  if (a >= kE4m3Max) return sign | 0x7E;  // satfinite: everything from 448 up, Inf included
  if (a < 0x1p-6f) {
    // Subnormal range: multiples of 2^-9. Scaling by 2^9 is exact; nearbyint rounds half to even
    // (the default rounding mode). m == 8 is exactly the min normal code 0x08.
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  // Normal range [2^-6, 448): round the fp32 mantissa from 23 to 3 bits, half to even, on the bit
  // pattern; a mantissa carry correctly bumps the exponent. Rebias the exponent from 127 to 7.
  // The result stays <= 448 (0x7E): a < 448 rounds to at most 448.
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  const uint32_t rounded = (magnitude + 0x7FFFFu + ((magnitude >> 20) & 1u)) >> 20;  // (exp << 3) | m3
  return sign | static_cast<uint8_t>(rounded - ((127u - 7u) << 3));
}

}  // namespace fp4moe
