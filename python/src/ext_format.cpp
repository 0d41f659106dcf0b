// fp4moe._ext format functions: E2M1 / E4M3 / BF16 element codes, NVFP4 quantize / dequantize and
// the 128x4 scale swizzle, each a thin wrapper over src/format (so Python results are the C++
// library's bits). Host arrays only; python/fp4moe/format.py moves CUDA tensors to the host.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>

#include <cmath>
#include <optional>
#include <tuple>

#include "ext_common.h"
#include "format/bf16.h"
#include "format/fp_codes.h"
#include "format/nvfp4.h"
#include "format/sf_layout.h"

namespace fp4moe::python {
namespace {

template <typename In, typename Out, typename F>
nb::ndarray<nb::numpy, Out> map_elements(const HostArray<In>& in, F f) {
  std::vector<Out> out(in.size());
  const In* src = in.data();
  for (size_t i = 0; i < out.size(); ++i) out[i] = f(src[i], i);
  return to_numpy(std::move(out), shape_of(in));
}

void check_codes(uint8_t code, size_t index, unsigned limit, const char* what) {
  FP4MOE_CHECK(code <= limit, what, ": element ", index, " is 0x", std::hex, static_cast<unsigned>(code),
               ", not an E2M1 code (0x0..0xF)");
}

std::tuple<nb::ndarray<nb::numpy, uint8_t>, nb::ndarray<nb::numpy, uint8_t>, float> quantize(
    const HostArray<float>& x, std::optional<float> tensor_scale) {
  FP4MOE_CHECK(x.ndim() == 2, "quantize_nvfp4: x must be 2-D [rows, cols], got shape ", shape_string(x));
  const auto rows = static_cast<int64_t>(x.shape(0)), cols = static_cast<int64_t>(x.shape(1));
  FP4MOE_CHECK(cols % kNvfp4BlockSize == 0, "quantize_nvfp4: cols (", cols, ") must be a multiple of 16");
  if (tensor_scale) {
    FP4MOE_CHECK(std::isfinite(*tensor_scale) && *tensor_scale > 0.0f,
                 "quantize_nvfp4: tensor_scale must be finite and > 0, got ", *tensor_scale);
  }
  Nvfp4Matrix m;
  {
    nb::gil_scoped_release release;
    const std::span<const float> values(x.data(), x.size());
    m = tensor_scale ? quantize_nvfp4(values, rows, cols, *tensor_scale) : quantize_nvfp4(values, rows, cols);
  }
  const float scale = m.tensor_scale;
  return {to_numpy(std::move(m.packed), {static_cast<size_t>(rows), static_cast<size_t>(cols / 2)}),
          to_numpy(std::move(m.scales), {static_cast<size_t>(rows), static_cast<size_t>(cols / 16)}), scale};
}

nb::ndarray<nb::numpy, float> dequantize(const HostArray<uint8_t>& packed, const HostArray<uint8_t>& scales,
                                         float tensor_scale) {
  FP4MOE_CHECK(packed.ndim() == 2, "dequantize_nvfp4: packed must be 2-D [rows, cols/2], got shape ",
               shape_string(packed));
  const auto rows = static_cast<int64_t>(packed.shape(0)), cols = static_cast<int64_t>(packed.shape(1)) * 2;
  FP4MOE_CHECK(cols % kNvfp4BlockSize == 0, "dequantize_nvfp4: packed has ", cols / 2,
               " bytes per row, i.e. ", cols, " values, not a multiple of 16");
  check_2d(scales, "dequantize_nvfp4: scales", rows, cols / 16);
  FP4MOE_CHECK(std::isfinite(tensor_scale) && tensor_scale >= 0.0f,
               "dequantize_nvfp4: tensor_scale must be finite and >= 0, got ", tensor_scale);
  std::vector<float> out(static_cast<size_t>(rows * cols));
  {
    nb::gil_scoped_release release;
    const Nvfp4View view{packed.data(), scales.data(), tensor_scale, rows, cols};
    dequantize_nvfp4(view, out);
  }
  return to_numpy(std::move(out), {static_cast<size_t>(rows), static_cast<size_t>(cols)});
}

nb::ndarray<nb::numpy, uint8_t> swizzle(const HostArray<uint8_t>& scales) {
  FP4MOE_CHECK(scales.ndim() == 2, "swizzle_scales_128x4: scales must be 2-D [rows, cols/16], got shape ",
               shape_string(scales));
  const auto rows = static_cast<int64_t>(scales.shape(0)), kblocks = static_cast<int64_t>(scales.shape(1));
  const SwizzledShape shape = swizzled_128x4_shape(rows, kblocks);
  std::vector<uint8_t> out = swizzle_scales_128x4({scales.data(), scales.size()}, rows, kblocks);
  return to_numpy(std::move(out), {static_cast<size_t>(shape.padded_rows), static_cast<size_t>(shape.padded_kblocks)});
}

nb::ndarray<nb::numpy, uint8_t> unswizzle(const HostArray<uint8_t>& swizzled, int64_t rows, int64_t kblocks) {
  FP4MOE_CHECK(rows >= 0 && kblocks >= 0, "unswizzle_scales_128x4: rows and kblocks must be >= 0");
  const SwizzledShape shape = swizzled_128x4_shape(rows, kblocks);
  FP4MOE_CHECK(static_cast<int64_t>(swizzled.size()) == shape.bytes(), "unswizzle_scales_128x4: [", rows, ", ",
               kblocks, "] scales need ", shape.bytes(), " swizzled bytes (rows padded to ", shape.padded_rows,
               ", blocks to ", shape.padded_kblocks, "), got ", swizzled.size());
  std::vector<uint8_t> out = unswizzle_scales_128x4({swizzled.data(), swizzled.size()}, rows, kblocks);
  return to_numpy(std::move(out), {static_cast<size_t>(rows), static_cast<size_t>(kblocks)});
}

}  // namespace

void bind_format(nb::module_& m) {
  m.def("e2m1_encode",
        [](const HostArray<float>& x) {
          return map_elements<float, uint8_t>(x, [](float v, size_t) { return e2m1_encode(v); });
        },
        nb::arg("x").noconvert(), "E2M1 codes (0..15) of float32 values: RNE, saturating at +-6.");
  m.def("e2m1_decode",
        [](const HostArray<uint8_t>& codes) {
          return map_elements<uint8_t, float>(codes, [](uint8_t c, size_t i) {
            check_codes(c, i, 0xF, "e2m1_decode");
            return e2m1_decode(c);
          });
        },
        nb::arg("codes").noconvert(), "float32 values of E2M1 codes (each 0..15).");
  m.def("e4m3_encode",
        [](const HostArray<float>& x) {
          return map_elements<float, uint8_t>(x, [](float v, size_t) { return e4m3_encode_satfinite(v); });
        },
        nb::arg("x").noconvert(), "E4M3fn codes of float32 values: RNE, saturating at +-448 (satfinite).");
  m.def("e4m3_decode",
        [](const HostArray<uint8_t>& codes) {
          return map_elements<uint8_t, float>(codes, [](uint8_t c, size_t) { return e4m3_decode(c); });
        },
        nb::arg("codes").noconvert(), "float32 values of E4M3fn codes (0x7F / 0xFF decode to NaN).");
  m.def("bf16_encode",
        [](const HostArray<float>& x) {
          return map_elements<float, uint16_t>(x, [](float v, size_t) { return float_to_bf16(v); });
        },
        nb::arg("x").noconvert(), "BF16 bit patterns (uint16) of float32 values, round to nearest even.");
  m.def("bf16_decode",
        [](const HostArray<uint16_t>& bits) {
          return map_elements<uint16_t, float>(bits, [](uint16_t b, size_t) { return bf16_to_float(b); });
        },
        nb::arg("bits").noconvert(), "float32 values of BF16 bit patterns (uint16).");
  m.def("quantize_nvfp4", &quantize, nb::arg("x").noconvert(), nb::arg("tensor_scale") = nb::none(),
        "NVFP4-quantize float32 x [rows, cols] (ModelOpt formulas). tensor_scale None: amax(x) / 2688.\n"
        "Returns (packed uint8 [rows, cols/2], scales uint8 [rows, cols/16] E4M3 codes, tensor_scale).");
  m.def("dequantize_nvfp4", &dequantize, nb::arg("packed").noconvert(), nb::arg("scales").noconvert(),
        nb::arg("tensor_scale"), "ModelOpt NVFP4 dequantization: float32 [rows, cols].");
  m.def("swizzle_scales_128x4", &swizzle, nb::arg("scales").noconvert(),
        "Linear [rows, cols/16] E4M3 scales -> the 128x4 swizzled layout, shape [roundup(rows, 128), "
        "roundup(cols/16, 4)] (zero padding).");
  m.def("unswizzle_scales_128x4", &unswizzle, nb::arg("swizzled").noconvert(), nb::arg("rows"), nb::arg("kblocks"),
        "The 128x4 swizzled scales back to linear [rows, kblocks].");
}

}  // namespace fp4moe::python
