#include "fact/realize/bench_results.hpp"

#include <cctype>

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
  return {{"suite", suite},
          {"date", date},
          {"device", device},
          {"versions",
           {{"driver", versions.driver},
            {"cuda", versions.cuda},
            {"torch", versions.torch},
            {"cutlass", versions.cutlass},
            {"fact", versions.fact}}},
          {"cases", case_list}};
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
