#include "fact/realize/bench_suite.hpp"

#include <map>
#include <mutex>
#include <stdexcept>

namespace fact::realize {
namespace {

struct SuiteRegistry {
  std::mutex mutex;
  std::map<std::string, BenchSuiteFactory> factories;
};

SuiteRegistry& registry() {
  static SuiteRegistry instance;
  return instance;
}

}  // namespace

void register_bench_suite(const std::string& name, BenchSuiteFactory factory) {
  std::lock_guard lock(registry().mutex);
  if (!registry().factories.emplace(name, factory).second) {
    throw std::logic_error("bench suite '" + name + "' is registered twice");
  }
}

BenchSuite bench_suite(const std::string& name) {
  BenchSuiteFactory factory = nullptr;
  {
    std::lock_guard lock(registry().mutex);
    auto it = registry().factories.find(name);
    if (it != registry().factories.end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const auto& n : bench_suite_names()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown suite '" + name + "' (available: " + known + ")");
  }
  return factory();
}

std::vector<std::string> bench_suite_names() {
  std::lock_guard lock(registry().mutex);
  std::vector<std::string> names;
  for (const auto& [name, factory] : registry().factories) names.push_back(name);
  return names;
}

}  // namespace fact::realize
