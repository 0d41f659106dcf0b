#include "qualify/job.h"

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace fp4moe {

using nlohmann::json;

std::string job_to_json(const QualifyJob& job) {
  const MoeProblem& p = job.problem;
  json probes = json::array();
  for (const Probe& probe : job.probes) {
    probes.push_back({{"name", probe.name}, {"tokens", probe.tokens}, {"input", to_string(probe.input)},
                      {"weights", to_string(probe.weights)}, {"seed", probe.seed}});
  }
  json j = {{"backend", job.backend},
            {"problem",
             {{"hidden", p.hidden}, {"inter", p.inter}, {"num_experts", p.num_experts}, {"top_k", p.top_k},
              {"routing", to_string(p.routing.method)}, {"n_group", p.routing.n_group},
              {"topk_group", p.routing.topk_group}, {"routed_scaling_factor", p.routing.routed_scaling_factor},
              {"renormalize", p.routing.renormalize}, {"activation", to_string(p.activation_mode)}}},
            {"weight_seed", job.weights.seed},
            {"model_dir", job.weights.model_dir},
            {"model_layer", job.weights.layer},
            {"max_tokens", job.max_tokens},
            {"probes", probes},
            {"output_dir", job.output_dir},
            {"timing_tokens", job.timing_tokens},
            {"timing_replays", job.timing_replays}};
  return j.dump(1);
}

QualifyJob job_from_json(const std::string& text) {
  try {
    json j = json::parse(text);
    QualifyJob job;
    job.backend = j.at("backend").get<std::string>();
    const json& p = j.at("problem");
    job.problem = make_moe_problem(p.at("hidden").get<int64_t>(), p.at("inter").get<int64_t>(),
                                   p.at("num_experts").get<int64_t>(), p.at("top_k").get<int64_t>(),
                                   parse_activation_mode(p.at("activation").get<std::string>()),
                                   parse_routing_method(p.at("routing").get<std::string>()));
    job.problem.routing.n_group = p.at("n_group").get<int>();
    job.problem.routing.topk_group = p.at("topk_group").get<int>();
    job.problem.routing.routed_scaling_factor = p.at("routed_scaling_factor").get<float>();
    job.problem.routing.renormalize = p.at("renormalize").get<bool>();
    job.problem.validate();
    job.weights.seed = j.at("weight_seed").get<uint64_t>();
    job.weights.model_dir = j.at("model_dir").get<std::string>();
    job.weights.layer = j.at("model_layer").get<int64_t>();
    job.max_tokens = j.at("max_tokens").get<int64_t>();
    for (const json& probe : j.at("probes")) {
      Probe pr;
      pr.name = probe.at("name").get<std::string>();
      pr.tokens = probe.at("tokens").get<int64_t>();
      pr.input = parse_probe_input(probe.at("input").get<std::string>());
      pr.weights = parse_probe_weights(probe.at("weights").get<std::string>());
      pr.seed = probe.at("seed").get<uint64_t>();
      job.probes.push_back(pr);
    }
    job.output_dir = j.at("output_dir").get<std::string>();
    job.timing_tokens = j.at("timing_tokens").get<std::vector<int64_t>>();
    job.timing_replays = j.at("timing_replays").get<int>();
    return job;
  } catch (const json::exception& e) {
    fail("qualification job JSON is malformed: ", e.what());
  }
}

}  // namespace fp4moe
