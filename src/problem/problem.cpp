#include "fact/problem/problem.hpp"

#include <algorithm>
#include <mutex>
#include <stdexcept>

namespace fact {

nlohmann::json problem_to_json(const Problem& problem) {
  nlohmann::json j = problem.desc.is_object() ? problem.desc : nlohmann::json::object();
  j["kind"] = problem.kind;
  return j;
}

Problem problem_from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("kind") || !j.at("kind").is_string()) {
    throw std::invalid_argument("problem: missing string field 'kind'");
  }
  Problem problem;
  problem.kind = j.at("kind").get<std::string>();
  problem.desc = j;
  problem.desc.erase("kind");
  return problem;
}

KindRegistry& KindRegistry::global() {
  static KindRegistry registry;
  return registry;
}

void KindRegistry::add(std::unique_ptr<ProblemKind> kind) {
  if (!kind) throw std::logic_error("KindRegistry::add: null kind");
  if (find(kind->name()) != nullptr) {
    throw std::logic_error("problem kind '" + kind->name() + "' is registered twice");
  }
  kinds_.push_back(std::move(kind));
}

const ProblemKind* KindRegistry::find(std::string_view name) const {
  for (const auto& kind : kinds_) {
    if (kind->name() == name) return kind.get();
  }
  return nullptr;
}

const ProblemKind& KindRegistry::get(std::string_view name) const {
  if (const ProblemKind* kind = find(name)) return *kind;
  std::string known;
  for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown problem kind '" + std::string(name) + "' (registered: " +
                              (known.empty() ? "none" : known) + ")");
}

const ProblemKind* KindRegistry::find_by_id(uint32_t kind_id) const {
  for (const auto& kind : kinds_) {
    if (fact_kind_id(kind->name().c_str()) == kind_id) return kind.get();
  }
  return nullptr;
}

std::vector<std::string> KindRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& kind : kinds_) out.push_back(kind->name());
  std::sort(out.begin(), out.end());
  return out;
}

KindRegistrar::KindRegistrar(std::unique_ptr<ProblemKind> kind) {
  KindRegistry::global().add(std::move(kind));
}

const ProblemKind& kind_of(const Problem& problem) { return KindRegistry::global().get(problem.kind); }

std::string problem_summary(const Problem& problem) {
  const ProblemKind& kind = kind_of(problem);
  return kind.fusion(problem.desc) + " " + kind.shape(problem.desc) + " " +
         std::string(graph::dtype_name(kind.dtype(problem.desc)));
}

int reference_call(const FactCallHeader* args) {
  if (args == nullptr || args->abi_version != FACT_ABI_VERSION) return FACT_ERR_INVALID_ARGS;
  const ProblemKind* kind = KindRegistry::global().find_by_id(args->kind);
  if (kind == nullptr) return FACT_ERR_INVALID_ARGS;
  try {
    return kind->reference(args);
  } catch (...) {
    return FACT_ERR_INTERNAL;
  }
}

}  // namespace fact
