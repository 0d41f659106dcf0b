// Host repacking into the sm80 grouped-GEMM weight layout; the layout is described in nvfp4_mma_layout.h.
#include "kernels/cuda/nvfp4_mma_layout.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "common/parallel.h"
#include "kernels/cuda/nvfp4_decode_layout.h"

namespace fp4moe {

void repack_nvfp4_for_mma(const Nvfp4View& m, std::span<const int64_t> source_rows, uint8_t* packed_out,
                          uint8_t* scales_out) {
  const int64_t N = m.rows, K = m.cols;
  FP4MOE_CHECK(K % kMmaChunkK == 0, "repack_nvfp4_for_mma: K (", K, ") must be a multiple of ", kMmaChunkK);
  FP4MOE_CHECK(N % kMmaRowGroup == 0, "repack_nvfp4_for_mma: N (", N, ") must be a multiple of ", kMmaRowGroup);
  FP4MOE_CHECK(source_rows.empty() || static_cast<int64_t>(source_rows.size()) == N,
               "repack_nvfp4_for_mma: row order has ", source_rows.size(), " entries for ", N, " rows");
  const int64_t chunks = K / kMmaChunkK;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t src = source_rows.empty() ? r : source_rows[r];
    FP4MOE_CHECK(src >= 0 && src < N, "repack_nvfp4_for_mma: source row ", src, " out of [0, ", N, ")");
    const uint8_t* row = m.packed + src * K / 2;
    const uint8_t* srow = m.scales + src * K / 16;
    const int64_t nb = r / kMmaRowGroup, g = r % kMmaRowGroup;
    for (int64_t kc = 0; kc < chunks; ++kc) {
      uint8_t* tile = packed_out + (nb * chunks + kc) * 512;
      const int64_t k0 = kc * kMmaChunkK;
      for (int t = 0; t < 4; ++t) {
        for (int j = 0; j < 4; ++j) {
          const int64_t k = k0 + 32 * j + 2 * t;
          uint32_t word = 0;  // pair p = (k + 8p, k + 8p + 1), one byte as k is even, is decode_word's output p
          for (int p = 0; p < 4; ++p) word |= kDecodeWordByteBits.bits[p][row[(k + 8 * p) / 2]];
          std::memcpy(tile + (4 * g + t) * 16 + 4 * j, &word, 4);  // little-endian word
        }
      }
      std::memcpy(scales_out + (nb * chunks + kc) * 64 + g * 8, srow + kc * 8, 8);
    }
  }
}

std::vector<int64_t> gate_up_interleaved_rows(int64_t inter) {
  FP4MOE_CHECK(inter % kMmaRowGroup == 0, "gate/up interleave: I (", inter, ") must be a multiple of 8");
  std::vector<int64_t> rows(static_cast<size_t>(2 * inter));
  for (int64_t r = 0; r < 2 * inter; ++r) {
    const int64_t j = r / 16, i = r % 16;
    rows[r] = i < 8 ? 8 * j + i : inter + 8 * j + (i - 8);
  }
  return rows;
}

std::vector<uint8_t> experts_with_positive_normal_scales(std::span<const uint8_t> scales, int64_t num_experts,
                                                         int64_t per_expert) {
  FP4MOE_CHECK(num_experts >= 0 && per_expert >= 0 &&
                   scales.size() == static_cast<size_t>(num_experts) * static_cast<size_t>(per_expert),
               "scale flags: ", scales.size(), " scale codes are not ", num_experts, " experts x ", per_expert);
  std::vector<uint8_t> flags(static_cast<size_t>(num_experts));
  parallel_for(num_experts, [&](int64_t begin, int64_t end) {  // 400 MB of codes per Qwen3.5-397B layer
    for (int64_t e = begin; e < end; ++e) {
      const uint8_t* codes = scales.data() + e * per_expert;
      flags[e] = std::all_of(codes, codes + per_expert, e4m3_is_positive_normal) ? 1 : 0;
    }
  });
  return flags;
}

}  // namespace fp4moe
