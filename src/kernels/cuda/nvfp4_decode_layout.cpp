// Host repacking into the fused decode weight layout; the layout is described in nvfp4_decode_layout.h.
#include "kernels/cuda/nvfp4_decode_layout.h"

#include "common/error.h"
#include "format/nvfp4.h"

namespace fp4moe {
void repack_nvfp4_for_decode(const Nvfp4View& m, const std::vector<int64_t>& source_rows, uint8_t* out) {
  const int64_t N = m.rows, K = m.cols;
  FP4MOE_CHECK(K > 0 && K % kDecodeChunkK == 0, "repack_nvfp4_for_decode: K (", K, ") must be a positive multiple of ",
               kDecodeChunkK);
  FP4MOE_CHECK(N > 0 && N % kDecodeTileRows == 0, "repack_nvfp4_for_decode: N (", N, ") must be a positive multiple of ",
               kDecodeTileRows);
  FP4MOE_CHECK(source_rows.empty() || static_cast<int64_t>(source_rows.size()) == N,
               "repack_nvfp4_for_decode: row order has ", source_rows.size(), " entries for ", N, " rows");
  const int64_t chunks = K / kDecodeChunkK;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t src = source_rows.empty() ? r : source_rows[static_cast<size_t>(r)];
    FP4MOE_CHECK(src >= 0 && src < N, "repack_nvfp4_for_decode: source row ", src, " out of [0, ", N, ")");
    const uint8_t* row = m.packed + src * K / 2;
    const uint8_t* srow = m.scales + src * K / 16;
    const int64_t tile = r / kDecodeTileRows, g = r % 8, half_row = (r % kDecodeTileRows) / 8;
    for (int64_t kc = 0; kc < chunks; ++kc) {
      uint8_t* block = out + (tile * chunks + kc) * kDecodeBlockBytes;
      for (int t = 0; t < 4; ++t) {
        const int64_t lane = 4 * g + t, col0 = kc * kDecodeChunkK + 32 * t;
        for (int j = 0; j < 4; ++j) {
          uint32_t word = 0;
          for (int k = 0; k < 4; ++k) word |= kDecodeWordByteBits.bits[k][row[(col0 + 8 * j + 2 * k) / 2]];  // col0 even
          uint8_t* dst = block + decode_code_offset(static_cast<int>(lane), static_cast<int>(half_row)) + 4 * j;
          for (int b = 0; b < 4; ++b) dst[b] = static_cast<uint8_t>(word >> (8 * b));
        }
        uint8_t* sdst = block + kDecodeScaleOffset + lane * 4 + 2 * half_row;
        sdst[0] = srow[col0 / 16];
        sdst[1] = srow[col0 / 16 + 1];
      }
    }
  }
}

}  // namespace fp4moe
