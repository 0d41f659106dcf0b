#include "qualify/verdict.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "fp4moe_build_info.h"

namespace fp4moe {

using nlohmann::json;

std::string VerdictKey::hash() const {
  const std::string text = detail::concat(device_name, '\n', sm, '\n', driver_version, '\n', kernel_driver, '\n',
                                          runtime_version, '\n',
                                          build_id, '\n', problem, '\n', max_tokens);
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a 64
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  char buffer[17];
  std::snprintf(buffer, sizeof(buffer), "%016llx", static_cast<unsigned long long>(h));
  return buffer;
}

std::string this_build_id() {
  return detail::concat(build_info::kVersion, "+", build_info::kGitCommit, " ", build_info::kBuildType, " archs=",
                        build_info::kCudaArchs[0] ? build_info::kCudaArchs : "none");
}

VerdictKey make_verdict_key(const DeviceInfo& device, const MoeProblem& problem, int64_t max_tokens) {
  VerdictKey key;
  key.device_name = device.name;
  key.sm = device.sm();
  key.driver_version = device.driver_version;
  key.kernel_driver = device.kernel_driver;
  key.runtime_version = device.runtime_version;
  key.build_id = this_build_id();
  key.problem = problem.describe();
  key.max_tokens = max_tokens;
  return key;
}

std::string Verdict::backend_for(int64_t tokens) const {
  if (chosen.empty()) return {};
  for (const Bucket& bucket : chosen) {
    if (tokens <= bucket.tokens) return bucket.backend;
  }
  return chosen.back().backend;
}

void Verdict::choose() {
  chosen.clear();
  std::vector<int64_t> token_counts;
  for (const BackendVerdict& b : backends) {
    if (!b.qualified) continue;
    for (const TimingPoint& t : b.timings) token_counts.push_back(t.tokens);
  }
  std::sort(token_counts.begin(), token_counts.end());
  token_counts.erase(std::unique(token_counts.begin(), token_counts.end()), token_counts.end());
  for (int64_t tokens : token_counts) {
    const BackendVerdict* best = nullptr;
    double best_us = 0.0;
    for (const BackendVerdict& b : backends) {
      if (!b.qualified) continue;
      for (const TimingPoint& t : b.timings) {
        // Strictly faster wins; on a tie the earlier (more preferred) backend stays.
        if (t.tokens == tokens && t.microseconds > 0.0 && (!best || t.microseconds < best_us)) {
          best = &b;
          best_us = t.microseconds;
        }
      }
    }
    if (best) chosen.push_back({tokens, best->id});
  }
}

namespace {

json key_to_json(const VerdictKey& k) {
  return {{"device_name", k.device_name}, {"sm", k.sm}, {"driver_version", k.driver_version},
          {"kernel_driver", k.kernel_driver}, {"runtime_version", k.runtime_version}, {"build_id", k.build_id}, {"problem", k.problem},
          {"max_tokens", k.max_tokens}};
}

template <typename T>
T field(const json& j, const char* name, const char* where) {
  FP4MOE_CHECK(j.is_object() && j.contains(name), "verdict JSON: ", where, " has no field '", name, "'");
  try {
    return j.at(name).get<T>();
  } catch (const json::exception& e) {
    fail("verdict JSON: ", where, ".", name, " has the wrong type: ", e.what());
  }
}

}  // namespace

std::string verdict_to_json(const Verdict& v) {
  json backends = json::array();
  for (const BackendVerdict& b : v.backends) {
    json probes = json::array();
    for (const ProbeOutcome& p : b.probes) {
      probes.push_back({{"probe", p.probe}, {"tokens", p.tokens}, {"passed", p.passed}, {"reason", p.reason},
                        {"normalized_error", p.normalized_error}, {"max_abs_error", p.max_abs_error},
                        {"nan_or_inf", p.nan_or_inf}, {"unwritten", p.unwritten}});
    }
    json timings = json::array();
    for (const TimingPoint& t : b.timings) {
      timings.push_back({{"tokens", t.tokens}, {"microseconds", t.microseconds},
                         {"floor_microseconds", t.floor_microseconds}});
    }
    backends.push_back({{"id", b.id}, {"supported", b.supported}, {"support_reason", b.support_reason},
                        {"qualified", b.qualified}, {"failure", b.failure}, {"seconds", b.seconds},
                        {"probes", probes}, {"timings", timings}});
  }
  json chosen = json::array();
  for (const auto& c : v.chosen) chosen.push_back({{"tokens", c.tokens}, {"backend", c.backend}});
  json j = {{"format", "fp4moe-verdict-v1"}, {"key", key_to_json(v.key)}, {"created_at", v.created_at},
            {"copy_bandwidth_gbps", v.copy_bandwidth_gbps}, {"backends", backends}, {"chosen", chosen}};
  return j.dump(2);
}

Verdict verdict_from_json(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    fail("verdict JSON does not parse: ", e.what());
  }
  FP4MOE_CHECK(field<std::string>(j, "format", "verdict") == "fp4moe-verdict-v1",
               "verdict JSON: unknown format (expected fp4moe-verdict-v1)");
  Verdict v;
  const json& k = j.at("key");
  v.key.device_name = field<std::string>(k, "device_name", "key");
  v.key.sm = field<int>(k, "sm", "key");
  v.key.driver_version = field<int>(k, "driver_version", "key");
  v.key.kernel_driver = field<std::string>(k, "kernel_driver", "key");
  v.key.runtime_version = field<int>(k, "runtime_version", "key");
  v.key.build_id = field<std::string>(k, "build_id", "key");
  v.key.problem = field<std::string>(k, "problem", "key");
  v.key.max_tokens = field<int64_t>(k, "max_tokens", "key");
  v.created_at = field<std::string>(j, "created_at", "verdict");
  v.copy_bandwidth_gbps = field<double>(j, "copy_bandwidth_gbps", "verdict");
  for (const json& b : field<json>(j, "backends", "verdict")) {
    BackendVerdict bv;
    bv.id = field<std::string>(b, "id", "backend");
    bv.supported = field<bool>(b, "supported", "backend");
    bv.support_reason = field<std::string>(b, "support_reason", "backend");
    bv.qualified = field<bool>(b, "qualified", "backend");
    bv.failure = field<std::string>(b, "failure", "backend");
    bv.seconds = field<double>(b, "seconds", "backend");
    for (const json& p : field<json>(b, "probes", "backend")) {
      ProbeOutcome po;
      po.probe = field<std::string>(p, "probe", "probe");
      po.tokens = field<int64_t>(p, "tokens", "probe");
      po.passed = field<bool>(p, "passed", "probe");
      po.reason = field<std::string>(p, "reason", "probe");
      po.normalized_error = field<double>(p, "normalized_error", "probe");
      po.max_abs_error = field<double>(p, "max_abs_error", "probe");
      po.nan_or_inf = field<int64_t>(p, "nan_or_inf", "probe");
      po.unwritten = field<int64_t>(p, "unwritten", "probe");
      bv.probes.push_back(po);
    }
    for (const json& t : field<json>(b, "timings", "backend")) {
      bv.timings.push_back({field<int64_t>(t, "tokens", "timing"), field<double>(t, "microseconds", "timing"),
                            field<double>(t, "floor_microseconds", "timing")});
    }
    v.backends.push_back(std::move(bv));
  }
  for (const json& c : field<json>(j, "chosen", "verdict")) {
    v.chosen.push_back({field<int64_t>(c, "tokens", "chosen"), field<std::string>(c, "backend", "chosen")});
  }
  return v;
}

std::string qualify_cache_dir() {
  if (const char* dir = std::getenv("FP4MOE_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/fp4moe/qualify";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/fp4moe/qualify";
  return "/tmp/fp4moe-cache/qualify";
}

std::string verdict_cache_path(const VerdictKey& key) { return qualify_cache_dir() + "/" + key.hash() + ".json"; }

std::optional<Verdict> load_cached_verdict(const VerdictKey& key) {
  const std::string path = verdict_cache_path(key);
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  try {
    Verdict v = verdict_from_json(text.str());
    if (v.key == key) return v;
  } catch (const Error&) {
    // A damaged cache file is not an error for the caller: it is ignored and rewritten.
  }
  return std::nullopt;
}

std::string store_verdict(const Verdict& verdict) {
  const std::string path = verdict_cache_path(verdict.key);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  FP4MOE_CHECK(!ec, "cannot create the qualification cache directory ", qualify_cache_dir(), ": ", ec.message());
  const std::string temporary = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(temporary);
    FP4MOE_CHECK(out.good(), "cannot write ", temporary);
    out << verdict_to_json(verdict) << "\n";
    FP4MOE_CHECK(out.good(), "writing ", temporary, " failed");
  }
  std::filesystem::rename(temporary, path, ec);
  FP4MOE_CHECK(!ec, "cannot move ", temporary, " to ", path, ": ", ec.message());
  return path;
}

}  // namespace fp4moe
