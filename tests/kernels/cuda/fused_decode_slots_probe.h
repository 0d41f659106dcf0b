// Test probe for the fused decode's slot sort (src/kernels/cuda/moe_fused_decode_sm80_slots.cuh): runs
// its one-warp form and its CTA-wide form on the same slot experts, in one CTA of 8 warps as launch 1
// does, and returns both forms' tables.
#pragma once
#include <cstdint>
#include <vector>

namespace fp4moe::test {

struct SlotSortTables {
  std::vector<int16_t> sorted, touched, toff, gprefix, g2j;  // sized as the form filled them
  int touched_count = 0, groups = 0;
};

// `ids`: up to 32 slot experts in [-1, num_experts) (-1 = no expert). Throws on CUDA errors.
void run_slot_sorts(const std::vector<int16_t>& ids, int num_experts, SlotSortTables& warp_form,
                    SlotSortTables& block_form);

}  // namespace fp4moe::test
