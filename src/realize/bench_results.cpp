#include "fact/realize/bench_results.hpp"

#include <cctype>
#include <cmath>
#include <tuple>

namespace fact::realize {
using nlohmann::json;

namespace {
json optional_number(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }
}  // namespace

json BenchCase::to_json() const {
  json baseline_map = json::object();
  json speedup = json::object();
  for (const auto& [name, b] : baselines) {
    baseline_map[name] = {{"ms", optional_number(b.ms)}, {"rel_err", optional_number(b.rel_err)}};
    if (fact_ms && *fact_ms > 0 && b.ms) speedup[name] = *b.ms / *fact_ms;
  }
  json j = {{"name", name},       {"precision", precision},      {"status", status},
            {"fact_ms", optional_number(fact_ms)}, {"rel_err", optional_number(rel_err)},
            {"baselines", baseline_map}, {"speedup", speedup}, {"config", config}};
  if (status != "ok") j["reason"] = reason;
  return j;
}

json BenchResults::to_json() const {
  json case_list = json::array();
  for (const auto& c : cases) case_list.push_back(c.to_json());
  json j = {{"suite", suite},
          {"date", date},
          {"device", device},
          {"versions",
           {{"driver", versions.driver},
            {"cuda", versions.cuda},
            {"torch", versions.torch},
            {"cutlass", versions.cutlass},
            {"fact", versions.fact}}},
          {"cases", case_list}};
  j["summary"] = summary();
  if (tuning_cost) j["tuning_cost"] = tuning_cost->to_json();
  return j;
}

json BenchResults::summary() const {
  std::map<std::string, std::map<std::string, std::pair<double, int>>> logs;  // precision -> baseline -> (sum log, n)
  for (const auto& c : cases) {
    if (!c.fact_ms || *c.fact_ms <= 0) continue;
    for (const auto& [name, b] : c.baselines) {
      if (!b.ms || *b.ms <= 0) continue;
      auto& [sum, n] = logs[c.precision][name];
      sum += std::log(*b.ms / *c.fact_ms);
      ++n;
    }
  }
  // "like_for_like": per case the library call that computes the same thing (cuBLASLt with its
  // fused epilogue where the case has one, else cuBLAS), its geometric mean and the worst case.
  std::map<std::string, std::tuple<double, int, double, std::string>> primary;  // sum log, n, min, min case
  for (const auto& c : cases) {
    if (!c.fact_ms || *c.fact_ms <= 0) continue;
    auto it = c.baselines.find("cublaslt");
    if (it == c.baselines.end() || !it->second.ms) it = c.baselines.find("cublas");
    if (it == c.baselines.end() || !it->second.ms || *it->second.ms <= 0) continue;
    const double speedup = *it->second.ms / *c.fact_ms;
    auto& [sum, n, worst, worst_case] = primary.try_emplace(c.precision, 0.0, 0, speedup, c.name).first->second;
    sum += std::log(speedup);
    ++n;
    if (speedup <= worst) worst = speedup, worst_case = c.name;
  }
  json out = json::object();
  for (const auto& [precision, acc] : primary) {
    const auto& [sum, n, worst, worst_case] = acc;
    out[precision]["like_for_like"] = {{"geomean_speedup", std::exp(sum / n)}, {"cases", n},
                                       {"min_speedup", worst}, {"min_case", worst_case}};
  }
  for (const auto& [precision, by_baseline] : logs) {
    for (const auto& [name, acc] : by_baseline) {
      out[precision][name] = {{"geomean_speedup", std::exp(acc.first / acc.second)}, {"cases", acc.second}};
    }
  }
  return out;
}

json BenchTuningCost::to_json() const {
  return {{"case", case_name},        {"command", command},          {"candidates", candidates},
          {"compile_jobs", compile_jobs}, {"cold_s", optional_number(cold_s)}, {"warm_s", optional_number(warm_s)},
          {"cold_status", cold_status}, {"warm_status", warm_status}};
}

std::string BenchResults::file_name() const {
  return suite + "-" + device_slug(device) + "-" + date + (variant.empty() ? "" : "-" + variant) + ".json";
}

std::string device_slug(const std::string& device_name) {
  std::string slug;
  for (unsigned char c : device_name) {
    if (std::isalnum(c)) {
      slug += static_cast<char>(std::tolower(c));
    } else if (!slug.empty() && slug.back() != '-') {
      slug += '-';
    }
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  return slug.empty() ? "unknown-device" : slug;
}

}  // namespace fact::realize
