// The error budgets of qualify/tolerances.h, derived and checked with the CPU reference itself:
// a "correct kernel with another fp32 summation order" is simulated by perturbing every fp32
// result of the reference at a relative level (MoeReferenceOptions::fp32_perturbation); faults
// (gate/up swapped, the gate's tensor scale used for up) are simulated by corrupting the weights.
// The perturbed runs must stay inside the budget, the faults far above it.
// DISABLED_MeasureBudgetDistribution is the experiment behind the numbers in tolerances.h
// (397B per-expert shape, ~2 minutes on 2 cores): run it with --gtest_also_run_disabled_tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "common/rng.h"
#include "format/synthetic.h"
#include "kernels/cpu/moe_reference.h"
#include "qualify/compare.h"
#include "qualify/tolerances.h"

namespace fp4moe {
namespace {

// The layer as a kernel that reads w13 as [up; gate] would compute it.
MoeWeights swap_gate_up(const MoeWeights& w) {
  MoeWeights s = w;
  const int64_t half_packed = w.inter * w.hidden / 2, half_scales = w.inter * w.hidden / 16;
  for (int64_t e = 0; e < w.num_experts; ++e) {
    auto p = s.w13_packed.begin() + 2 * e * half_packed;
    std::swap_ranges(p, p + half_packed, p + half_packed);
    auto q = s.w13_scales.begin() + 2 * e * half_scales;
    std::swap_ranges(q, q + half_scales, q + half_scales);
    std::swap(s.gate_scale2[e], s.up_scale2[e]);
  }
  return s;
}

// The layer as a kernel that takes the gate's weight_scale_2 for up would compute it.
MoeWeights gate_scale_for_up(const MoeWeights& w) {
  MoeWeights s = w;
  s.up_scale2 = s.gate_scale2;
  return s;
}

struct Case {
  MoeProblem problem;
  MoeWeights weights;
  std::vector<float> hidden, logits;
  int64_t tokens;
};

Case make_case(int64_t H, int64_t I, int64_t E, int64_t K, int64_t T, ActivationMode mode, uint64_t seed) {
  Case c{make_moe_problem(H, I, E, K, mode), synthetic_moe_weights(E, H, I, seed), synthetic_activations(T, H, seed + 1),
         std::vector<float>(static_cast<size_t>(T * E)), T};
  Rng rng(seed + 2);
  for (float& v : c.logits) v = static_cast<float>(rng.normal());
  return c;
}

std::vector<float> run(const Case& c, const MoeWeights& w, double perturbation = 0.0, uint64_t seed = 0) {
  std::vector<float> out(static_cast<size_t>(c.tokens * c.problem.hidden));
  MoeReferenceOptions options;
  options.fp32_perturbation = perturbation;
  options.perturbation_seed = seed;
  moe_reference(c.problem, w, c.hidden, c.logits, nullptr, c.tokens, out, options);
  return out;
}

CompareResult compare(const std::vector<float>& out, const std::vector<float>& ref, const Case& c) {
  std::vector<uint16_t> bits(out.size());
  floats_to_bf16_bits(out, bits);
  return compare_bf16(bits, ref, c.tokens, c.problem.hidden);
}

// Small shape, every budget check in one place: fast enough for the default suite.
TEST(Tolerances, PerturbedRunsPassAndFaultsFailTheMoeBudget) {
  for (ActivationMode mode : {ActivationMode::kW4A16, ActivationMode::kW4A4}) {
    SCOPED_TRACE(to_string(mode));
    const Case c = make_case(512, 256, 8, 4, 32, mode, 11);
    const ErrorBudget budget = error_budget(CheckedOp::kMoe, mode);
    const std::vector<float> ref = run(c, c.weights);
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      // 1e-6: a realistic fp32 summation-order level for these short sums (see tolerances.h).
      const CompareResult r = compare(run(c, c.weights, 1e-6, seed), ref, c);
      EXPECT_TRUE(judge(r, budget).pass) << judge(r, budget).reason << "; " << r.describe();
      EXPECT_GT(r.normalized_error, 0.0) << "the perturbation must change something";
    }
    for (const MoeWeights& bad : {swap_gate_up(c.weights), gate_scale_for_up(c.weights)}) {
      const CompareResult r = compare(run(c, bad), ref, c);
      EXPECT_TRUE(r.clean());
      EXPECT_GT(r.normalized_error, kGarbageNormalizedError) << r.describe();
      EXPECT_GT(r.normalized_error, 20 * budget.normalized_error) << r.describe();
      const BudgetVerdict v = judge(r, budget);
      EXPECT_FALSE(v.pass);
      EXPECT_EQ(v.reason.rfind("garbage", 0), 0u) << v.reason;
    }
  }
}

// The linear budgets: a uniform 1e-5 relative perturbation of the fp32 result (fp32 output), and
// the BF16 rounding of the result (BF16 output); a 1.75x wrong tensor scale is far outside.
TEST(Tolerances, LinearBudgets) {
  const int64_t T = 16, N = 1024, K = 4096;
  const Nvfp4Matrix w = quantize_nvfp4(synthetic_weight_matrix(N, K, 31), N, K);
  const std::vector<float> x = synthetic_activations(T, K, 32);
  for (ActivationMode mode : {ActivationMode::kW4A16, ActivationMode::kW4A4}) {
    SCOPED_TRACE(to_string(mode));
    std::vector<float> ref(static_cast<size_t>(T * N)), perturbed(ref.size()), wrong(ref.size());
    linear_nvfp4_reference(w.view(), x, T, mode, nvfp4_tensor_scale_for_amax(8.0f), ref);
    Rng rng(33);
    for (size_t i = 0; i < ref.size(); ++i) {
      perturbed[i] = static_cast<float>(ref[i] * (1.0 + 1e-5 * rng.uniform(-1.0, 1.0)));
    }
    const CompareResult f32 = compare_f32(perturbed, ref, T, N);
    std::vector<uint16_t> bits(ref.size());
    floats_to_bf16_bits(perturbed, bits);
    const CompareResult bf16 = compare_bf16(bits, ref, T, N);
    std::printf("linear %s: fp32 output perturbed 1e-5: normalized %.3g max-row %.3g; BF16 output: normalized %.3g "
                "max-row %.3g\n",
                std::string(to_string(mode)).c_str(), f32.normalized_error, f32.max_row_normalized_error,
                bf16.normalized_error, bf16.max_row_normalized_error);
    EXPECT_TRUE(judge(f32, error_budget(CheckedOp::kLinearF32, mode)).pass) << f32.describe(N);
    EXPECT_TRUE(judge(bf16, error_budget(CheckedOp::kLinearBf16, mode)).pass) << bf16.describe(N);
    EXPECT_FALSE(judge(bf16, error_budget(CheckedOp::kLinearF32, mode)).pass) << "BF16 output needs its own budget";
    Nvfp4Matrix scaled = w;
    scaled.tensor_scale *= 1.75f;
    linear_nvfp4_reference(scaled.view(), x, T, mode, nvfp4_tensor_scale_for_amax(8.0f), wrong);
    const CompareResult bad = compare_f32(wrong, ref, T, N);
    EXPECT_GT(bad.normalized_error, 0.5);
    EXPECT_FALSE(judge(bad, error_budget(CheckedOp::kLinearBf16, mode)).pass);
  }
}

struct Stats {
  double min = 0, median = 0, p90 = 0, max = 0;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {v.front(), v[n / 2], v[std::min(n - 1, n * 9 / 10)], v.back()};
}

// The experiment behind tolerances.h: H=4096, I=1024 (Qwen3.5-397B per expert), K=10, 64 tokens,
// 32 experts (fewer than 512 so weight generation is quick; per-token numerics are the same).
TEST(Tolerances, DISABLED_MeasureBudgetDistribution) {
  const int seeds = 8;
  for (ActivationMode mode : {ActivationMode::kW4A16, ActivationMode::kW4A4}) {
    const Case c = make_case(4096, 1024, 32, 10, 64, mode, 21);
    const std::vector<float> ref = run(c, c.weights);
    for (double level : {1e-7, 1e-6, 1e-5}) {
      std::vector<double> norm, row, maxabs;
      for (int s = 1; s <= seeds; ++s) {
        const CompareResult r = compare(run(c, c.weights, level, static_cast<uint64_t>(s)), ref, c);
        norm.push_back(r.normalized_error);
        row.push_back(r.max_row_normalized_error);
        maxabs.push_back(r.max_abs_error / r.max_abs_reference);
      }
      const Stats n = stats(norm), rw = stats(row), m = stats(maxabs);
      std::printf("%s perturbation %.0e (%d seeds): normalized min %.3g median %.3g max %.3g | "
                  "max-row min %.3g median %.3g max %.3g | max_abs/max_ref median %.3g max %.3g\n",
                  std::string(to_string(mode)).c_str(), level, seeds, n.min, n.median, n.max, rw.min, rw.median, rw.max,
                  m.median, m.max);
    }
    const CompareResult swapped = compare(run(c, swap_gate_up(c.weights)), ref, c);
    const CompareResult scale = compare(run(c, gate_scale_for_up(c.weights)), ref, c);
    std::printf("%s faults: gate/up swapped normalized %.3g (max-row %.3g); gate scale for up normalized %.3g "
                "(max-row %.3g)\n",
                std::string(to_string(mode)).c_str(), swapped.normalized_error, swapped.max_row_normalized_error,
                scale.normalized_error, scale.max_row_normalized_error);
    const ErrorBudget budget = error_budget(CheckedOp::kMoe, mode);
    EXPECT_FALSE(judge(swapped, budget).pass);
    EXPECT_FALSE(judge(scale, budget).pass);
  }
}

}  // namespace
}  // namespace fp4moe
