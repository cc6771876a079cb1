#include "fact/realize/realizer.hpp"

#include <algorithm>
#include <stdexcept>

namespace fact::realize {

RealizerRegistry& RealizerRegistry::global() {
  static RealizerRegistry registry;
  return registry;
}

void RealizerRegistry::add(std::unique_ptr<Realizer> realizer) {
  if (!realizer) throw std::logic_error("RealizerRegistry::add: null realizer");
  if (find(realizer->pattern()) != nullptr) {
    throw std::logic_error("pattern '" + realizer->pattern() + "' registers two realizers");
  }
  realizers_.push_back(std::move(realizer));
}

const Realizer* RealizerRegistry::find(std::string_view pattern) const {
  for (const auto& r : realizers_) {
    if (r->pattern() == pattern) return r.get();
  }
  return nullptr;
}

const Realizer& RealizerRegistry::for_problem(const Problem& problem,
                                              core::PrecisionMode precision) const {
  std::vector<const Realizer*> candidates;
  for (const auto& r : realizers_) {
    if (r->kind() == problem.kind) candidates.push_back(r.get());
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Realizer* a, const Realizer* b) { return a->priority() > b->priority(); });
  std::string reasons;
  for (const Realizer* r : candidates) {
    auto why = r->declines(problem, precision);
    if (!why) return *r;
    reasons += (reasons.empty() ? "" : "; ") + r->pattern() + ": " + *why;
  }
  if (candidates.empty()) {
    throw std::invalid_argument("no template realizes problems of kind '" + problem.kind + "'");
  }
  throw std::invalid_argument(reasons);
}

std::vector<std::string> RealizerRegistry::patterns() const {
  std::vector<std::string> out;
  for (const auto& r : realizers_) out.push_back(r->pattern());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace fact::realize
