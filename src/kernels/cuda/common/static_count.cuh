// A run-time count as a compile-time one: kernels compile a loop once per count (register arrays
// indexed at compile time, wgmma widths fixed per instruction) and pick the instance with one branch.
// Users: the sm80 grouped GEMM (live m16 fragments of a short tile) and the sm90 register-weight GEMM
// (token columns of a partial tile).
#pragma once
#include <type_traits>

namespace fp4moe {

// fn(std::integral_constant<int, C>) with C the largest of Min, Min + Step, ..., Max that is <= n
// (Min when n < Min).
template <int Max, int Step, int Min, class Fn>
__device__ __forceinline__ void with_static_count(int n, Fn&& fn) {
  static_assert(Step > 0 && Min <= Max && (Max - Min) % Step == 0, "counts Min, Min + Step, ..., Max");
  if constexpr (Max == Min) {
    fn(std::integral_constant<int, Min>{});
  } else {
    if (n >= Max)
      fn(std::integral_constant<int, Max>{});
    else
      with_static_count<Max - Step, Step, Min>(n, fn);
  }
}

}  // namespace fp4moe
