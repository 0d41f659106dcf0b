// Test probe: both forms of the fused decode's slot sort in one CTA (fused_decode_slots_probe.h).
#include <cuda_runtime.h>

#include "common/error.h"
#include "fused_decode_slots_probe.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/moe_fused_decode_sm80_slots.cuh"

namespace fp4moe::test {
namespace {

constexpr int kWarps = 8, kTokenGroup = 8, kMaxSlots = 32, kMaxExperts = 1024;
// Per form in `out`: sorted [32] | touched [32] | toff [33] | gprefix [33] | g2j [32] | misc [2].
constexpr int kFormStride = 32 + 32 + 33 + 33 + 32 + 2;
constexpr int16_t kUnwritten = -7;

__global__ void slot_sorts_kernel(const int16_t* ids_in, int slots, int experts, int16_t* out) {
  __shared__ int16_t ids[kMaxSlots];
  __shared__ int16_t tables[2][kFormStride];
  __shared__ int misc[2][2];
  __shared__ int counts[kMaxExperts];
  __shared__ uint64_t scan[kWarps];
  for (int i = threadIdx.x; i < 2 * kFormStride; i += blockDim.x) tables[i / kFormStride][i % kFormStride] = kUnwritten;
  for (int i = threadIdx.x; i < slots; i += blockDim.x) ids[i] = ids_in[i];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  auto form = [&](int f) {
    int16_t* t = tables[f];
    return fused_decode::SlotTables{ids, t, t + 32, t + 64, t + 97, t + 130, misc[f]};
  };
  if (threadIdx.x / 32 == 0) fused_decode::sort_slots_warp<kTokenGroup>(form(0), slots);
  fused_decode::sort_slots_block<kWarps, kTokenGroup>(form(1), slots, experts, counts, scan);
  __syncthreads();
  for (int i = threadIdx.x; i < 2 * kFormStride; i += blockDim.x) {
    const int f = i / kFormStride, k = i % kFormStride;
    out[i] = k < kFormStride - 2 ? tables[f][k] : static_cast<int16_t>(misc[f][k - (kFormStride - 2)]);
  }
}

SlotSortTables unpack(const int16_t* form) {
  SlotSortTables t;
  t.touched_count = form[kFormStride - 2];
  t.groups = form[kFormStride - 1];
  const int n = t.touched_count;
  FP4MOE_CHECK(n >= 0 && n <= kMaxSlots && t.groups >= 0 && t.groups <= kMaxSlots, "slot sort probe: bad counts");
  const int valid = form[64 + n];  // toff[n]
  FP4MOE_CHECK(valid >= 0 && valid <= kMaxSlots, "slot sort probe: bad slot count ", valid);
  t.sorted.assign(form, form + valid);
  t.touched.assign(form + 32, form + 32 + n);
  t.toff.assign(form + 64, form + 64 + n + 1);
  t.gprefix.assign(form + 97, form + 97 + n + 1);
  t.g2j.assign(form + 130, form + 130 + t.groups);
  return t;
}

}  // namespace

void run_slot_sorts(const std::vector<int16_t>& ids, int num_experts, SlotSortTables& warp_form,
                    SlotSortTables& block_form) {
  FP4MOE_CHECK(!ids.empty() && ids.size() <= kMaxSlots, "slot sort probe: 1..32 slots");
  FP4MOE_CHECK(num_experts >= 1 && num_experts <= kMaxExperts, "slot sort probe: 1..1024 experts");
  int16_t *d_ids = nullptr, *d_out = nullptr;
  FP4MOE_CUDA_CHECK(cudaMalloc(&d_ids, ids.size() * sizeof(int16_t)));
  FP4MOE_CUDA_CHECK(cudaMalloc(&d_out, 2 * kFormStride * sizeof(int16_t)));
  std::vector<int16_t> out(2 * kFormStride);
  FP4MOE_CUDA_CHECK(cudaMemcpy(d_ids, ids.data(), ids.size() * sizeof(int16_t), cudaMemcpyHostToDevice));
  slot_sorts_kernel<<<1, kWarps * 32>>>(d_ids, static_cast<int>(ids.size()), num_experts, d_out);
  FP4MOE_CUDA_CHECK(cudaGetLastError());
  FP4MOE_CUDA_CHECK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(int16_t), cudaMemcpyDeviceToHost));
  FP4MOE_CUDA_CHECK(cudaFree(d_ids));
  FP4MOE_CUDA_CHECK(cudaFree(d_out));
  warp_form = unpack(out.data());
  block_form = unpack(out.data() + kFormStride);
}

}  // namespace fp4moe::test
