#include "fact/discover/discover.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "fact/discover/canonicalize.hpp"
#include "fact/discover/rank.hpp"
#include "fact/discover/rule.hpp"

namespace fact::discover {

core::PrecisionMode default_precision(const graph::Graph& g) {
  // A bf16/fp16 model keeps some float32 parameters (norms) and still runs in its 16-bit dtype.
  for (const auto& [id, value] : g.values()) {
    if (value.kind != graph::ValueKind::Input && value.kind != graph::ValueKind::Parameter) continue;
    const core::PrecisionMode mode = core::default_precision(value.desc.dtype);
    if (mode == core::PrecisionMode::Native) return mode;
  }
  return core::PrecisionMode::Strict;
}

Discovery discover(const graph::Graph& g, const DiscoverOptions& options) {
  Discovery discovery;
  discovery.canonical = canonicalize(g);
  const RuleRegistry& registry = RuleRegistry::global();
  std::map<graph::NodeId, size_t> position;
  for (size_t i = 0; i < g.nodes().size(); ++i) position[g.nodes()[i].id] = i;
  for (auto& result : run_rules(discovery.canonical, options, registry.by_priority())) {
    Match m = std::move(result.match);
    std::stable_sort(m.nodes.begin(), m.nodes.end(), [&](const auto& a, const auto& b) {
      return position[a] < position[b];
    });
    estimate(m, g, options);
    m.classification = classify(m, registry.pattern_has_template(m.pattern), options);
    if (options.classify_match) {
      const DiscoverOptions::Classified c = options.classify_match(m, g, options);
      m.classification = c.classification;
      m.classification_reason = c.reason;
      m.registry_entry = c.entry;
    }
    discovery.matches.push_back(std::move(m));
  }
  rank_matches(discovery.matches);
  return discovery;
}

}  // namespace fact::discover
