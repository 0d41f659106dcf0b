// Qualification proven by fault injection (issue: backend registry and self-qualification). The test
// binary is also the qualification worker (see main below), so the fault backends, which exist only
// in the tests, run in real child processes exactly as production backends do.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <filesystem>
#include <fstream>

#include "common/child_process.h"
#include "common/device_info.h"
#include "common/error.h"
#include "fault_backends.h"
#include "io/moe_loader.h"
#include "io/synth.h"
#include "qualify/dispatch.h"
#include "qualify/qualify.h"
#include "qualify/report.h"
#include "qualify/worker.h"

namespace fp4moe {
namespace {

MoeProblem tiny_problem(ActivationMode mode, int64_t hidden = 128, int64_t inter = 64) {
  MoeProblem p = make_moe_problem(hidden, inter, 8, 2, mode);
  p.validate();
  return p;
}

QualifyRequest tiny_request(std::vector<std::string> ids, ActivationMode mode = ActivationMode::kW4A16,
                            int64_t hidden = 128, int64_t inter = 64) {
  QualifyRequest r;
  r.problem = tiny_problem(mode, hidden, inter);
  r.max_tokens = 64;
  r.timing_tokens = {1, 8, 64};
  r.timing_replays = 3;
  r.backend_ids = std::move(ids);
  r.worker_command = {current_executable_path(), "--qualify-worker"};
  r.timeout_seconds = 60.0;
  r.key.device_name = "test";
  r.key.problem = r.problem.describe();
  r.key.max_tokens = r.max_tokens;
  return r;
}

const BackendVerdict& find(const Verdict& v, const std::string& id) {
  for (const BackendVerdict& b : v.backends)
    if (b.id == id) return b;
  ADD_FAILURE() << "no verdict for " << id;
  static BackendVerdict none;
  return none;
}

TEST(Qualification, RejectsEveryHostFaultForTheRightReasonAndKeepsTheGoodBackends) {
  std::vector<std::string> ids = {"cpu.reference.v1"};
  for (const std::string& id : testing::host_fault_backend_ids()) ids.push_back(id);
  QualifyRequest request = tiny_request(ids);
  request.timeout_seconds = 8.0;  // the hang fault costs this much
  request.variant_tokens =
      collect_variant_tokens(ids, testing::make_test_backend, request.problem, request.max_tokens, DeviceInfo{});
  const Verdict v = run_qualification(request);
  ASSERT_EQ(v.backends.size(), ids.size());

  EXPECT_TRUE(find(v, "cpu.reference.v1").qualified) << find(v, "cpu.reference.v1").failure;
  EXPECT_TRUE(find(v, "test.slow_but_correct.v1").qualified) << find(v, "test.slow_but_correct.v1").failure;

  auto expect_rejected = [&](const std::string& id, const std::string& reason_part) {
    const BackendVerdict& b = find(v, id);
    EXPECT_TRUE(b.supported) << id;
    EXPECT_FALSE(b.qualified) << id << " was not rejected";
    EXPECT_NE(b.failure.find(reason_part), std::string::npos) << id << ": failure '" << b.failure
                                                              << "' does not mention '" << reason_part << "'";
  };
  expect_rejected("test.fault.nan.v1", "NaN");
  expect_rejected("test.fault.garbage_at_33.v1", "T=33");
  expect_rejected("test.fault.unwritten_row.v1", "never written");
  expect_rejected("test.fault.abort_at_16.v1", "SIGABRT");
  expect_rejected("test.fault.abort_at_16.v1", "T=16");
  expect_rejected("test.fault.segfault_at_3.v1", "SIGSEGV");
  expect_rejected("test.fault.hang_at_8.v1", "hang");
  expect_rejected("test.fault.swap_gate_up.v1", "error");
  expect_rejected("test.fault.broken_middle_variant.v1", "T=40");
  const BackendVerdict& unsupported = find(v, "test.fault.unsupported.v1");
  EXPECT_FALSE(unsupported.supported);
  EXPECT_NE(unsupported.support_reason.find("on purpose"), std::string::npos) << unsupported.support_reason;

  // The metrics behind a numeric rejection are recorded.
  bool garbage_metrics = false;
  for (const ProbeOutcome& p : find(v, "test.fault.garbage_at_33.v1").probes)
    if (p.tokens == 33 && !p.passed && p.normalized_error > 0.01) garbage_metrics = true;
  EXPECT_TRUE(garbage_metrics);

  // The fastest qualified backend is chosen in every bucket: the reference beats the slow one.
  ASSERT_EQ(v.chosen.size(), 3u);
  for (const auto& bucket : v.chosen) EXPECT_EQ(bucket.backend, "cpu.reference.v1") << bucket.tokens;
  EXPECT_EQ(v.backend_for(5), "cpu.reference.v1");

  // The report names every rejection.
  const std::string table = verdict_table(v);
  if (std::getenv("FP4MOE_TEST_PRINT")) std::printf("%s\n", table.c_str());
  EXPECT_NE(table.find("REJECTED: crash: killed by signal SIGSEGV"), std::string::npos) << table;
  const std::string svg = verdict_svg(v);
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("test.slow_but_correct.v1"), std::string::npos);
}

TEST(Qualification, RefusesAnAbsurdTimeLimitBeforeRunningAnyBackend) {
  // NaN disabled the limit; 0 or less timed out every backend and the verdict was cached.
  for (double limit : {std::nan(""), 0.0, -5.0, 0.5, 1e300, kMaxQualifyTimeoutSeconds * 2}) {
    QualifyRequest request = tiny_request({"cpu.reference.v1"});
    request.timeout_seconds = limit;
    try {
      run_qualification(request);
      ADD_FAILURE() << "a time limit of " << limit << " s was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--timeout must be a number of seconds in [1, 604800]"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_NO_THROW(check_qualify_timeout(1.0));
  EXPECT_NO_THROW(check_qualify_timeout(kMaxQualifyTimeoutSeconds));
}

// A bug in a kernel variant that only serves batch sizes between the standard probes: the standard
// set alone lets it through, the probes at the backend's declared variant switches reject it.
TEST(Qualification, ProbesEveryDeclaredKernelVariant) {
  const std::vector<std::string> ids = {"cpu.reference.v1", "test.fault.broken_middle_variant.v1"};
  QualifyRequest request = tiny_request(ids);
  const std::vector<int64_t> variants =
      collect_variant_tokens(ids, testing::make_test_backend, request.problem, request.max_tokens, DeviceInfo{});
  EXPECT_EQ(variants, (std::vector<int64_t>{1, 40, 64}));

  const Verdict without = run_qualification(request);
  EXPECT_TRUE(find(without, "test.fault.broken_middle_variant.v1").qualified)
      << "the standard probes now reach [40, 64): pick another range for this fault";

  request.variant_tokens = variants;
  const Verdict with = run_qualification(request);
  const BackendVerdict& broken = find(with, "test.fault.broken_middle_variant.v1");
  EXPECT_FALSE(broken.qualified);
  EXPECT_NE(broken.failure.find("random/T=40"), std::string::npos) << broken.failure;
  EXPECT_TRUE(find(with, "cpu.reference.v1").qualified) << find(with, "cpu.reference.v1").failure;
  for (const auto& bucket : with.chosen) EXPECT_EQ(bucket.backend, "cpu.reference.v1") << bucket.tokens;
}

TEST(Probes, VariantTokensAreAddedOnceAndKeepTheStandardSeeds) {
  const std::vector<Probe> standard = default_probes(256, 7);
  const std::vector<Probe> with = default_probes(256, 7, {1, 40, 64, 200});
  ASSERT_EQ(with.size(), standard.size() + 2) << "1 and 64 are standard random probes already";
  for (size_t i = 0; i < standard.size(); ++i) {
    EXPECT_EQ(with[i].name, standard[i].name);
    EXPECT_EQ(with[i].seed, standard[i].seed);
  }
  EXPECT_EQ(with[standard.size()].name, "random/T=40");
  EXPECT_EQ(with[standard.size() + 1].name, "random/T=200");
  EXPECT_THROW(default_probes(256, 7, {300}), Error);
  EXPECT_THROW(default_probes(256, 7, {0}), Error);
}

TEST(Qualification, W4A4ReferenceQualifiesAndSwappedGateUpIsRejected) {
  const Verdict v = run_qualification(tiny_request({"cpu.reference.v1", "test.fault.swap_gate_up.v1"},
                                                   ActivationMode::kW4A4));
  EXPECT_TRUE(find(v, "cpu.reference.v1").qualified) << find(v, "cpu.reference.v1").failure;
  EXPECT_FALSE(find(v, "test.fault.swap_gate_up.v1").qualified);
}

TEST(Qualification, VerdictSurvivesTheCacheRoundTrip) {
  QualifyRequest request = tiny_request({"cpu.reference.v1", "test.fault.nan.v1"});
  request.timing_tokens = {1, 64};
  const Verdict v = run_qualification(request);
  const std::string dir = (std::filesystem::temp_directory_path() / "fp4moe-test-cache").string();
  setenv("FP4MOE_CACHE_DIR", dir.c_str(), 1);
  const std::string path = store_verdict(v);
  EXPECT_TRUE(std::filesystem::exists(path));
  std::optional<Verdict> loaded = load_cached_verdict(v.key);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(verdict_to_json(*loaded), verdict_to_json(v));
  VerdictKey other = v.key;
  other.driver_version += 1;  // a CUDA driver update invalidates the verdict
  EXPECT_FALSE(load_cached_verdict(other).has_value());
  VerdictKey new_kernel_driver = v.key;
  new_kernel_driver.kernel_driver = "999.1.2";  // so does a kernel driver update with the same CUDA API
  EXPECT_FALSE(load_cached_verdict(new_kernel_driver).has_value());
  std::filesystem::remove_all(dir);
  unsetenv("FP4MOE_CACHE_DIR");
}

// --model: qualification runs on one layer of a real ModelOpt-style checkpoint, the exact quantized
// values that will be served, not on synthetic ones.
TEST(Qualification, UsesTheCheckpointLayerWeightsWithModel) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "fp4moe-test-qualify-model";
  std::filesystem::remove_all(dir);
  ModelConfig tiny = with_layers(model_preset("tiny"), 2);
  SynthOptions synth;
  synth.seed = 7;
  synth.progress = false;
  synth_checkpoint(tiny, dir, synth);
  const MoeProblem problem = moe_problem_for(tiny, ActivationMode::kW4A4);

  WeightSource source;
  source.model_dir = dir.string();
  source.layer = 1;
  const MoeWeights from_source = make_probe_weights(problem, ProbeWeights::kStandard, source);
  const MoeWeights from_checkpoint = open_nvfp4_checkpoint(dir).load_moe_layer(1);
  EXPECT_EQ(from_source.w13_packed, from_checkpoint.w13_packed);
  EXPECT_EQ(from_source.w2_scales, from_checkpoint.w2_scales);
  EXPECT_EQ(from_source.up_scale2, from_checkpoint.up_scale2);
  EXPECT_EQ(from_source.w13_input_scale, from_checkpoint.w13_input_scale);
  EXPECT_NE(from_source.w13_packed, make_probe_weights(problem, ProbeWeights::kStandard, WeightSource{}).w13_packed);
  source.layer = 5;  // beyond the checkpoint's layers: a clear error, not a silent fallback
  EXPECT_THROW(make_probe_weights(problem, ProbeWeights::kStandard, source), Error);
  source.layer = 1;

  QualifyRequest request = tiny_request({"cpu.reference.v1", "test.fault.swap_gate_up.v1"}, ActivationMode::kW4A4,
                                        tiny.hidden, tiny.moe_inter);
  request.problem = problem;
  request.key.problem = problem.describe();
  request.weights = source;
  std::vector<std::string> log;
  request.log = [&](const std::string& line) { log.push_back(line); };
  const Verdict v = run_qualification(request);
  EXPECT_TRUE(find(v, "cpu.reference.v1").qualified) << find(v, "cpu.reference.v1").failure;
  EXPECT_FALSE(find(v, "test.fault.swap_gate_up.v1").qualified);
  bool loaded = false;
  for (const std::string& line : log) loaded |= line.find("of layer 1 of " + dir.string()) != std::string::npos;
  EXPECT_TRUE(loaded) << "the parent did not say it loaded the checkpoint's layer";
  std::filesystem::remove_all(dir);
}

TEST(Dispatch, ExplicitChoiceIsHonouredWithAWarningWhenUnqualified) {
  Verdict v;
  BackendVerdict good, bad;
  good.id = "a";
  good.supported = good.qualified = true;
  good.timings = {{1, 10.0, 0.0}, {64, 50.0, 0.0}};
  bad.id = "b";
  bad.supported = true;
  bad.failure = "NaN/Inf in output";
  v.backends = {good, bad};
  v.choose();
  std::vector<std::string> log;
  auto logger = [&](const std::string& line) { log.push_back(line); };

  MoeDispatch from_verdict = MoeDispatch::create(v, "", logger);
  EXPECT_EQ(from_verdict.source(), MoeDispatch::Source::kVerdict);
  EXPECT_EQ(from_verdict.backend_for(1), "a");
  EXPECT_EQ(from_verdict.backend_for(4096), "a");
  EXPECT_TRUE(log.empty());

  MoeDispatch explicit_bad = MoeDispatch::create(v, "b", logger);
  EXPECT_EQ(explicit_bad.backend_for(7), "b");
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("REJECTED"), std::string::npos) << log[0];

  log.clear();
  MoeDispatch no_verdict = MoeDispatch::create(std::nullopt, "", logger);
  EXPECT_EQ(no_verdict.source(), MoeDispatch::Source::kDefault);
  EXPECT_EQ(no_verdict.backend_for(1), std::string(kDefaultMoeBackend));
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("safe default"), std::string::npos) << log[0];
  EXPECT_THROW(no_verdict.backend_for(-1), Error);
}

TEST(Verdict, ChoosesTheFastestPerBucketAndMapsTokenCountsToBuckets) {
  Verdict v;
  BackendVerdict a, b;
  a.id = "decode";
  b.id = "prefill";
  a.supported = a.qualified = b.supported = b.qualified = true;
  a.timings = {{1, 10, 0}, {8, 20, 0}, {64, 400, 0}};
  b.timings = {{1, 30, 0}, {8, 40, 0}, {64, 100, 0}};
  v.backends = {a, b};
  v.choose();
  EXPECT_EQ(v.backend_for(1), "decode");
  EXPECT_EQ(v.backend_for(8), "decode");
  EXPECT_EQ(v.backend_for(9), "prefill");
  EXPECT_EQ(v.backend_for(100000), "prefill");
  EXPECT_THROW(verdict_from_json("{\"format\": \"something else\"}"), Error);
  EXPECT_THROW(verdict_from_json("not json"), Error);
}

// GPU faults: an illegal address and a hung kernel in the child; the parent survives and the
// pipeline backend is still chosen.
TEST(QualificationGpu, RejectsCudaFaultsAndKeepsThePipeline) {
  DeviceList devices = query_cuda_devices();
  if (devices.devices.empty()) GTEST_SKIP() << "no GPU: " << devices.why_none;
  std::vector<std::string> ids = {std::string(kDefaultMoeBackend)};
  for (const std::string& id : testing::cuda_fault_backend_ids()) ids.push_back(id);
  // The pipeline backend needs H and I to be multiples of 128.
  QualifyRequest request = tiny_request(ids, ActivationMode::kW4A16, 256, 128);
  request.max_tokens = 300;
  request.timeout_seconds = 30.0;  // the hung kernel costs this much
  const Verdict v = run_qualification(request);
  const BackendVerdict& pipeline = find(v, std::string(kDefaultMoeBackend));
  EXPECT_TRUE(pipeline.qualified) << pipeline.failure << pipeline.support_reason;
  const BackendVerdict& illegal = find(v, "test.fault.cuda_illegal_address.v1");
  EXPECT_FALSE(illegal.qualified);
  EXPECT_NE(illegal.failure.find("T=64"), std::string::npos) << illegal.failure;
  EXPECT_NE(illegal.failure.find("cudaError"), std::string::npos) << illegal.failure;
  const BackendVerdict& hang = find(v, "test.fault.cuda_hang.v1");
  EXPECT_FALSE(hang.qualified);
  EXPECT_NE(hang.failure.find("hang"), std::string::npos) << hang.failure;
  EXPECT_FALSE(find(v, "test.fault.cuda_nan.v1").qualified);
  for (const auto& bucket : v.chosen) EXPECT_EQ(bucket.backend, std::string(kDefaultMoeBackend));
}

}  // namespace
}  // namespace fp4moe

int main(int argc, char** argv) {
  // Worker mode: the qualification parent runs this very binary as its child.
  if (argc == 4 && std::strcmp(argv[1], "--qualify-worker") == 0 && std::strcmp(argv[2], "--job") == 0) {
    return fp4moe::qualify_worker_main(argv[3], fp4moe::testing::make_test_backend);
  }
  // In sanitizer builds, let a fault backend's SIGSEGV kill its worker as it would in a normal
  // build (ASan would otherwise catch it and exit with 1); the workers inherit the environment.
  const char* asan = std::getenv("ASAN_OPTIONS");
  const std::string options = std::string(asan && *asan ? asan : "") + (asan && *asan ? ":" : "") + "handle_segv=0";
  setenv("ASAN_OPTIONS", options.c_str(), 1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
