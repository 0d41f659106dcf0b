// Test probe: the fused decode's W4A4 activation quantization in one warp (fused_decode_w4a4_probe.h).
#include <cuda_runtime.h>

#include "common/error.h"
#include "fused_decode_w4a4_probe.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/moe_fused_decode_sm80_w4a4.cuh"

namespace fp4moe::test {
namespace {

__global__ void w4a4_quantize_kernel(const uint16_t* rows, int tokens, float tensor_scale, uint16_t* out) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const int row = g % fused_decode::w4a4_rows(tokens);  // as launch 1's activation_source
  const uint32_t* src = reinterpret_cast<const uint32_t*>(rows + (row < tokens ? row : 0) * kW4A4ProbeColumns + 32 * t);
  uint32_t b[16];
  for (int i = 0; i < 16; ++i) b[i] = src[i];
  fused_decode::quantize_activations_w4a4(tensor_scale, b, tokens, g, t);
  uint32_t* dst = reinterpret_cast<uint32_t*>(out + lane * 32);
  for (int i = 0; i < 16; ++i) dst[i] = b[i];
}

}  // namespace

std::vector<uint16_t> run_w4a4_quantize(const std::vector<uint16_t>& rows, int tokens, float tensor_scale) {
  FP4MOE_CHECK(tokens >= 1 && tokens <= 8, "W4A4 probe: 1..8 tokens, got ", tokens);
  FP4MOE_CHECK(rows.size() == static_cast<size_t>(tokens) * kW4A4ProbeColumns, "W4A4 probe: ", tokens, " rows of ",
               kW4A4ProbeColumns, " values expected, got ", rows.size(), " values");
  const DeviceBuffer d_rows = DeviceBuffer::from_host(rows);
  std::vector<uint16_t> out(32 * 32, 0xFFFF);
  DeviceBuffer d_out = DeviceBuffer::from_host(out);
  w4a4_quantize_kernel<<<1, 32>>>(d_rows.as<uint16_t>(), tokens, tensor_scale, d_out.as<uint16_t>());
  FP4MOE_CUDA_CHECK(cudaGetLastError());
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  return d_out.to_host<uint16_t>();
}

}  // namespace fp4moe::test
