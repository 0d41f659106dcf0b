// format_probe: a small command-line front end to the format layer, driven by
// check_against_ml_dtypes.py, which compares its output with an independent numpy + ml_dtypes
// implementation. All files are raw little-endian arrays (float32, uint8 or uint16).
//
//   format_probe e2m1_encode IN.f32 OUT.u8       one E2M1 code per float (e2m1_encode)
//   format_probe e4m3_encode IN.f32 OUT.u8       one E4M3 code per float (e4m3_encode_satfinite)
//   format_probe bf16_encode IN.f32 OUT.u16      float_to_bf16
//   format_probe e2m1_decode OUT.f32             the 16 E2M1 codes decoded
//   format_probe e4m3_decode OUT.f32             the 256 E4M3 codes decoded
//   format_probe quantize IN.f32 ROWS COLS SCALE PREFIX
//       quantize_nvfp4 of the [ROWS, COLS] matrix; SCALE is "auto" (tensor scale from the amax) or
//       the tensor scale as 8 hex digits of its fp32 bit pattern. Writes PREFIX.packed (u8),
//       PREFIX.scales (u8, linear), PREFIX.scale2 (one f32) and PREFIX.deq (f32, dequantize_nvfp4).
//   format_probe swizzle IN.u8 ROWS KBLOCKS OUT.u8    linear -> 128x4 swizzled (padded)
//   format_probe unswizzle IN.u8 ROWS KBLOCKS OUT.u8  swizzled -> linear
// On an fp4moe::Error it prints "error: <message>" to stderr and exits with status 2.
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/error.h"
#include "format/bf16.h"
#include "format/fp_codes.h"
#include "format/nvfp4.h"
#include "format/sf_layout.h"

namespace fp4moe {
namespace {

template <typename T>
std::vector<T> read_array(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FP4MOE_CHECK(in.good(), "format_probe: cannot open ", path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  FP4MOE_CHECK(bytes.size() % sizeof(T) == 0, "format_probe: ", path, " has ", bytes.size(),
               " bytes, not a multiple of ", sizeof(T));
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

template <typename T>
void write_array(const std::string& path, const std::vector<T>& values) {
  std::ofstream out(path, std::ios::binary);
  FP4MOE_CHECK(out.good(), "format_probe: cannot write ", path);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(T)));
  FP4MOE_CHECK(out.good(), "format_probe: write to ", path, " failed");
}

int64_t parse_int(const std::string& text, const char* what) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  FP4MOE_CHECK(used == text.size() && value >= 0, "format_probe: ", what, " must be an integer >= 0, got '", text,
               "'");
  return value;
}

int run(const std::vector<std::string>& args) {
  FP4MOE_CHECK(!args.empty(), "format_probe: missing command (see the header of format_probe.cpp)");
  const std::string& cmd = args[0];
  auto need = [&](size_t count) {
    FP4MOE_CHECK(args.size() == count + 1, "format_probe ", cmd, ": expected ", count, " arguments, got ",
                 args.size() - 1);
  };
  if (cmd == "e2m1_encode" || cmd == "e4m3_encode") {
    need(2);
    const std::vector<float> in = read_array<float>(args[1]);
    std::vector<uint8_t> out(in.size());
    for (size_t i = 0; i < in.size(); ++i) out[i] = cmd == "e2m1_encode" ? e2m1_encode(in[i]) : e4m3_encode_satfinite(in[i]);
    write_array(args[2], out);
  } else if (cmd == "bf16_encode") {
    need(2);
    const std::vector<float> in = read_array<float>(args[1]);
    std::vector<uint16_t> out(in.size());
    for (size_t i = 0; i < in.size(); ++i) out[i] = float_to_bf16(in[i]);
    write_array(args[2], out);
  } else if (cmd == "e2m1_decode" || cmd == "e4m3_decode") {
    need(1);
    const int count = cmd == "e2m1_decode" ? 16 : 256;
    std::vector<float> out(static_cast<size_t>(count));
    for (int c = 0; c < count; ++c) {
      out[static_cast<size_t>(c)] = cmd == "e2m1_decode" ? e2m1_decode(static_cast<uint8_t>(c))
                                                          : e4m3_decode(static_cast<uint8_t>(c));
    }
    write_array(args[1], out);
  } else if (cmd == "quantize") {
    need(5);
    const std::vector<float> x = read_array<float>(args[1]);
    const int64_t rows = parse_int(args[2], "ROWS"), cols = parse_int(args[3], "COLS");
    Nvfp4Matrix m;
    if (args[4] == "auto") {
      m = quantize_nvfp4(x, rows, cols);
    } else {
      const std::string& hex = args[4];
      FP4MOE_CHECK(hex.size() == 8 && hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos,
                   "format_probe: SCALE must be 'auto' or 8 hex digits, got '", hex, "'");
      m = quantize_nvfp4(x, rows, cols, std::bit_cast<float>(static_cast<uint32_t>(std::stoul(hex, nullptr, 16))));
    }
    std::vector<float> deq(static_cast<size_t>(rows * cols));
    dequantize_nvfp4(m.view(), deq);
    write_array(args[5] + ".packed", m.packed);
    write_array(args[5] + ".scales", m.scales);
    write_array(args[5] + ".scale2", std::vector<float>{m.tensor_scale});
    write_array(args[5] + ".deq", deq);
  } else if (cmd == "swizzle" || cmd == "unswizzle") {
    need(4);
    const std::vector<uint8_t> in = read_array<uint8_t>(args[1]);
    const int64_t rows = parse_int(args[2], "ROWS"), kblocks = parse_int(args[3], "KBLOCKS");
    write_array(args[4], cmd == "swizzle" ? swizzle_scales_128x4(in, rows, kblocks)
                                          : unswizzle_scales_128x4(in, rows, kblocks));
  } else {
    fail("format_probe: unknown command '", cmd, "'");
  }
  return 0;
}

}  // namespace
}  // namespace fp4moe

int main(int argc, char** argv) {
  try {
    return fp4moe::run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const fp4moe::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
