#include "fact/runtime/run_options.hpp"

#include <algorithm>
#include <stdexcept>

namespace fact::runtime {

std::vector<std::string> parse_baseline_list(std::string_view text) {
  std::vector<std::string> names;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view name = text.substr(start, end - start);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    start = end + 1;
    if (name.empty()) continue;
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      throw std::invalid_argument("baseline '" + std::string(name) + "' given twice");
    }
    names.emplace_back(name);
  }
  return names;
}

void check_baselines(const std::vector<std::string>& names, const std::vector<std::string>& registered,
                     const std::string& kind) {
  for (const std::string& name : names) {
    if (std::find(registered.begin(), registered.end(), name) != registered.end()) continue;
    std::string known;
    for (const std::string& r : registered) known += (known.empty() ? "" : ", ") + r;
    throw std::invalid_argument("unknown baseline '" + name + "' for kind '" + kind + "' (" +
                                (known.empty() ? std::string("it registers none") : "expected " + known) + ")");
  }
}

void validate(const RunKernelOptions& o) {
  if (o.problem.empty() && o.problem_json.empty()) {
    throw std::invalid_argument("--problem or --problem-json is required");
  }
  if (o.baseline_only) {
    if (!o.lib.empty()) throw std::invalid_argument("--baseline-only takes no kernel library");
  } else if (o.lib.empty()) {
    throw std::invalid_argument("a kernel library (--lib) is required unless --baseline-only");
  }
  if (o.timing.min_runs < 1 || o.timing.max_runs < o.timing.min_runs) {
    throw std::invalid_argument("timing needs 1 <= min_runs <= max_runs");
  }
}

uint64_t check_seed(uint64_t base_seed, int index) {
  uint64_t x = base_seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index + 1);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace fact::runtime
