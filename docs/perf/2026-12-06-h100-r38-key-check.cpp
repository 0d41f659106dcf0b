// r38, CPU, run locally (8 s): every one of the 2^32 float bit patterns through the ordered key of main's
// select_top_k (compare-and-select) and of -topk-fast.patch (integer operations only). The new key equals
// the old one for non-negative scores, zeros and NaN and is one more for the other negative scores, whose
// keys stay below 2^31 and above NaN's 1: a strictly increasing function of the old key, so every
// comparison, and so the selection, agrees. Build: g++ -O2 -std=c++20 THIS.cpp && ./a.out (exit 0: agrees).
#include <cstdint>
#include <cstdio>
#include <cstring>
static uint32_t old_bits(uint32_t b) {
  float s; std::memcpy(&s, &b, 4);
  uint32_t bits = b;
  if (bits == 0x80000000u) bits = 0;
  bits = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
  return s != s ? 1u : bits;
}
static uint32_t new_bits(uint32_t b) {
  const uint32_t negative = static_cast<uint32_t>(static_cast<int32_t>(b) >> 31);
  const uint32_t key = ((b ^ negative) - negative) ^ (~negative & 0x80000000u);
  const uint32_t nan = static_cast<uint32_t>(static_cast<int32_t>((b & 0x7FFFFFFFu) + 0x007FFFFFu) >> 31);
  return (key & ~nan) | (nan & 1u);
}
int main() {
  // new = old for non-negative, zero and NaN; old + 1 for negative non-zero non-NaN; and the ranges do
  // not interleave (negative keys below 2^31, NaN 1 below them): new is a strictly increasing function
  // of old, so every comparison agrees.
  uint64_t bad = 0; uint32_t neg_min = 0xFFFFFFFFu, neg_max = 0, pos_min = 0xFFFFFFFFu;
  for (uint64_t i = 0; i <= 0xFFFFFFFFull; ++i) {
    const uint32_t b = static_cast<uint32_t>(i);
    float s; std::memcpy(&s, &b, 4);
    const uint32_t o = old_bits(b), n = new_bits(b);
    uint32_t expect;
    if (s != s) expect = 1;
    else if ((b & 0x80000000u) && b != 0x80000000u) { expect = o + 1; if (n < neg_min) neg_min = n; if (n > neg_max) neg_max = n; }
    else { expect = o; if (n < pos_min) pos_min = n; }
    if (n != expect) { if (bad < 5) std::printf("b=%08x old=%08x new=%08x\n", b, o, n); ++bad; }
  }
  std::printf("mismatches %llu; negative keys [%08x, %08x], non-negative from %08x\n", (unsigned long long)bad, neg_min, neg_max, pos_min);
  return bad != 0 || !(neg_min > 1 && neg_max < pos_min);
}
