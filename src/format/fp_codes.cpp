#include "format/fp_codes.h"

#include <array>
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
  const float a = std::fabs(value);
  // Midpoints between neighbours; ties go to the even code (mantissa bit 0): codes 0, 2, 4, 6.
  uint8_t magnitude;
  if (a <= 0.25f) magnitude = 0;
  else if (a < 0.75f) magnitude = 1;
  else if (a <= 1.25f) magnitude = 2;
  else if (a < 1.75f) magnitude = 3;
  else if (a <= 2.5f) magnitude = 4;
  else if (a < 3.5f) magnitude = 5;
  else if (a <= 5.0f) magnitude = 6;
  else magnitude = 7;  // saturate: (5, inf]
  return sign | magnitude;
}

float e4m3_decode(uint8_t code) { return kE4m3Table[code]; }

uint8_t e4m3_encode_satfinite(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  if (std::isnan(value)) return sign | 0x7F;
  const float a = std::fabs(value);
  if (a >= kE4m3Max) return sign | 0x7E;  // satfinite: everything from 448 up, Inf included
  if (a < 0x1p-6f) {
    // Subnormal range: multiples of 2^-9. Scaling by 2^9 is exact; nearbyint rounds half to even.
    int m = static_cast<int>(std::nearbyint(a * 512.0f));
    return sign | static_cast<uint8_t>(m);  // m == 8 is exactly the min normal code 0x08
  }
  int exponent;
  float fraction = std::frexp(a, &exponent);  // a = fraction * 2^exponent, fraction in [0.5, 1)
  exponent -= 1;                               // a = (2 * fraction) * 2^exponent, 2*fraction in [1, 2)
  int mantissa = static_cast<int>(std::nearbyint((2.0f * fraction - 1.0f) * 8.0f));  // exact scaling
  if (mantissa == 8) {
    mantissa = 0;
    exponent += 1;
  }
  int biased = exponent + 7;
  if (biased > 15 || (biased == 15 && mantissa == 7)) return sign | 0x7E;  // rounded past 448
  return sign | static_cast<uint8_t>((biased << 3) | mantissa);
}

}  // namespace fp4moe
