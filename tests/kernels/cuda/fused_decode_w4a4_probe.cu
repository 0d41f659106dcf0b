// Test probe: the fused decode's W4A4 block quantization on the GPU (fused_decode_w4a4_probe.h).
#include <cuda_runtime.h>

#include "common/error.h"
#include "fused_decode_w4a4_probe.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/moe_fused_decode_sm80_w4a4.cuh"

namespace fp4moe::test {
namespace {

__global__ void w4a4_quantize_blocks_kernel(const uint32_t* in, int blocks, float tensor_scale, uint32_t* out) {
  const int block = blockIdx.x * blockDim.x + threadIdx.x;
  if (block >= blocks) return;
  uint32_t w[8];
  for (int i = 0; i < 8; ++i) w[i] = in[8 * block + i];
  fused_decode::quantize_block_w4a4(w, tensor_scale);
  for (int i = 0; i < 8; ++i) out[8 * block + i] = w[i];
}

}  // namespace

std::vector<uint16_t> run_w4a4_quantize_blocks(const std::vector<uint16_t>& values, float tensor_scale) {
  FP4MOE_CHECK(!values.empty() && values.size() % 16 == 0, "W4A4 probe: whole 16-value blocks expected, got ",
               values.size(), " values");
  const int blocks = static_cast<int>(values.size() / 16);
  const DeviceBuffer d_in = DeviceBuffer::from_host(values);
  std::vector<uint16_t> out(values.size(), 0xFFFF);
  DeviceBuffer d_out = DeviceBuffer::from_host(out);
  w4a4_quantize_blocks_kernel<<<(blocks + 31) / 32, 32>>>(d_in.as<uint32_t>(), blocks, tensor_scale,
                                                          d_out.as<uint32_t>());
  FP4MOE_CUDA_CHECK(cudaGetLastError());
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  return d_out.to_host<uint16_t>();
}

}  // namespace fp4moe::test
