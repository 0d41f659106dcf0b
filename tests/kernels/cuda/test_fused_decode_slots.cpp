// The fused decode's slot sort, both forms (src/kernels/cuda/moe_fused_decode_sm80_slots.cuh): for up
// to 32 slots launch 1 uses the one-warp form, above it the CTA-wide counting sort. Each must give the
// tables computed here on the host (slots sorted by expert, stable by slot; touched experts ascending;
// their first slot and first 8-token group; the touched expert of each group), on random slot experts
// with repeats, slots without an expert (-1) and the edge cases (one slot, 32 slots, all on one expert,
// none with an expert).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "fused_decode_slots_probe.h"
#include "gpu_test_util.h"

namespace fp4moe {
namespace {

constexpr int kTokenGroup = 8;

test::SlotSortTables host_tables(const std::vector<int16_t>& ids) {
  test::SlotSortTables t;
  for (int s = 0; s < static_cast<int>(ids.size()); ++s)
    if (ids[s] >= 0) t.sorted.push_back(static_cast<int16_t>(s));
  std::stable_sort(t.sorted.begin(), t.sorted.end(), [&](int16_t a, int16_t b) { return ids[a] < ids[b]; });
  for (int i = 0; i < static_cast<int>(t.sorted.size()); ++i) {
    const int16_t e = ids[t.sorted[i]];
    if (i > 0 && ids[t.sorted[i - 1]] == e) continue;
    t.touched.push_back(e);
    t.toff.push_back(static_cast<int16_t>(i));
  }
  t.touched_count = static_cast<int>(t.touched.size());
  t.toff.push_back(static_cast<int16_t>(t.sorted.size()));
  for (int j = 0; j < t.touched_count; ++j) {
    t.gprefix.push_back(static_cast<int16_t>(t.groups));
    const int groups = (t.toff[j + 1] - t.toff[j] + kTokenGroup - 1) / kTokenGroup;
    for (int q = 0; q < groups; ++q) t.g2j.push_back(static_cast<int16_t>(j));
    t.groups += groups;
  }
  t.gprefix.push_back(static_cast<int16_t>(t.groups));
  return t;
}

void expect_tables(const test::SlotSortTables& got, const test::SlotSortTables& want, const std::string& label) {
  EXPECT_EQ(got.touched_count, want.touched_count) << label;
  EXPECT_EQ(got.groups, want.groups) << label;
  EXPECT_EQ(got.sorted, want.sorted) << label;
  EXPECT_EQ(got.touched, want.touched) << label;
  EXPECT_EQ(got.toff, want.toff) << label;
  EXPECT_EQ(got.gprefix, want.gprefix) << label;
  EXPECT_EQ(got.g2j, want.g2j) << label;
}

TEST(FusedDecodeSlots, WarpAndBlockSortsGiveTheHostTables) {
  std::string why;
  const DeviceInfo* device = test::sm80_device(why);
  if (!device) GTEST_SKIP() << why;
  FP4MOE_CUDA_CHECK(cudaSetDevice(device->ordinal));
  std::vector<std::pair<std::string, std::vector<int16_t>>> cases = {
      {"one slot", {5}},
      {"one slot without an expert", {-1}},
      {"32 slots on one expert (4 token groups)", std::vector<int16_t>(32, 3)},
      {"32 slots without an expert", std::vector<int16_t>(32, -1)},
      {"top-10 of one token, descending", {511, 400, 300, 200, 100, 50, 40, 30, 2, 0}},
  };
  std::mt19937 rng(20261201);
  for (int c = 0; c < 300; ++c) {
    const int slots = 1 + static_cast<int>(rng() % 32);
    const int experts = c % 3 == 0 ? 4 : c % 3 == 1 ? 64 : 512;  // 4 experts: long runs of one expert
    std::vector<int16_t> ids(static_cast<size_t>(slots));
    for (auto& e : ids) e = static_cast<int16_t>(rng() % 8 == 0 ? -1 : static_cast<int>(rng() % experts));
    cases.emplace_back("random case " + std::to_string(c) + " (" + std::to_string(slots) + " slots, E = " +
                           std::to_string(experts) + ")",
                       ids);
  }
  for (const auto& [label, ids] : cases) {
    const int experts = std::max(512, 1 + *std::max_element(ids.begin(), ids.end()));
    test::SlotSortTables warp_form, block_form;
    test::run_slot_sorts(ids, experts, warp_form, block_form);
    const test::SlotSortTables want = host_tables(ids);
    expect_tables(warp_form, want, "warp form, " + label);
    expect_tables(block_form, want, "block form, " + label);
  }
}

}  // namespace
}  // namespace fp4moe
