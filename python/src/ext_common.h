// Shared helpers of the nanobind extension (fp4moe._ext): checked access to DLPack arrays and
// numpy results that own their storage. The Python package (python/fp4moe) normalizes framework
// types (torch float8 / float4 views, ml_dtypes, CUDA tensors for the format functions) before it
// calls in here; this layer still checks everything it is given and throws fp4moe::Error (Python:
// fp4moe.Error, a ValueError) naming the argument and the problem.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"

namespace fp4moe::python {

namespace nb = nanobind;

// Any array (dtype, device and rank checked at run time), C-contiguous.
using AnyArray = nb::ndarray<nb::c_contig>;
// Host arrays of one dtype, C-contiguous, any rank.
template <typename T>
using HostArray = nb::ndarray<const T, nb::c_contig, nb::device::cpu>;

inline std::string shape_string(const AnyArray& a) {
  std::string s = "[";
  for (size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + "]";
}

template <typename T>
std::string shape_string(const HostArray<T>& a) {
  std::string s = "[";
  for (size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + "]";
}

template <typename T>
std::vector<size_t> shape_of(const HostArray<T>& a) {
  std::vector<size_t> shape(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) shape[i] = a.shape(i);
  return shape;
}

// A numpy array that owns a std::vector<T> (moved in; no copy).
template <typename T>
nb::ndarray<nb::numpy, T> to_numpy(std::vector<T>&& values, const std::vector<size_t>& shape) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(owned->data(), shape.size(), shape.data(), owner);
}

// Checks a 2-D host array's shape; `what` names the argument in the error.
template <typename T>
void check_2d(const HostArray<T>& a, const char* what, int64_t rows, int64_t cols) {
  FP4MOE_CHECK(a.ndim() == 2 && static_cast<int64_t>(a.shape(0)) == rows && static_cast<int64_t>(a.shape(1)) == cols,
               what, ": expected shape [", rows, ", ", cols, "], got ", shape_string(a));
}

inline bool is_dtype(const nb::dlpack::dtype& d, nb::dlpack::dtype_code code, int bits) {
  return d.code == static_cast<uint8_t>(code) && d.bits == bits && d.lanes == 1;
}

}  // namespace fp4moe::python
