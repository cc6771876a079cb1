#include "fact/discover/canonicalize.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

#include "fact/discover/rule.hpp"

namespace fact::discover {

namespace {

// Run-time checks that produce nothing (the capture drops them; older graphs may hold them).
void drop_metadata_checks(graph::Graph& g) {
  auto& nodes = g.mutable_nodes();
  const auto before = nodes.size();
  nodes.erase(std::remove_if(nodes.begin(), nodes.end(),
                             [](const graph::Node& n) {
                               return n.outputs.empty() &&
                                      (n.target.rfind("aten._assert", 0) == 0 ||
                                       n.target.rfind("aten.sym_constrain_range", 0) == 0);
                             }),
              nodes.end());
  if (nodes.size() != before) g.reindex();
}

// Orders every origin list by the captured graph's node order.
void sort_origins(graph::Graph& g, const graph::Graph& captured) {
  std::map<graph::NodeId, size_t> position;
  for (size_t i = 0; i < captured.nodes().size(); ++i) position[captured.nodes()[i].id] = i;
  for (auto& node : g.mutable_nodes()) {
    std::stable_sort(node.origin.begin(), node.origin.end(),
                     [&](const graph::NodeId& a, const graph::NodeId& b) {
                       return position[a] < position[b];
                     });
  }
}

struct PassRegistry {
  std::mutex mutex;
  std::vector<CanonicalPass> passes;
};

PassRegistry& pass_registry() {
  static PassRegistry registry;
  return registry;
}

struct SpellingRegistry {
  std::mutex mutex;
  std::vector<ActivationSpelling> spellings;
};

SpellingRegistry& spelling_registry() {
  static SpellingRegistry registry;
  return registry;
}

}  // namespace

void register_activation_spelling(ActivationSpelling spelling) {
  SpellingRegistry& r = spelling_registry();
  std::lock_guard lock(r.mutex);
  for (const auto& existing : r.spellings) {
    for (const auto& target : spelling.targets) {
      if (existing.name != spelling.name &&
          std::find(existing.targets.begin(), existing.targets.end(), target) != existing.targets.end())
        throw std::logic_error("aten target '" + target + "' spells both '" + existing.name + "' and '" +
                               spelling.name + "'");
    }
  }
  r.spellings.push_back(std::move(spelling));
}

std::vector<ActivationSpelling> activation_spellings() {
  SpellingRegistry& r = spelling_registry();
  std::lock_guard lock(r.mutex);
  return r.spellings;
}

void register_canonical_pass(CanonicalPass pass) {
  PassRegistry& r = pass_registry();
  std::lock_guard lock(r.mutex);
  for (const auto& existing : r.passes) {
    if (existing.name == pass.name)
      throw std::logic_error("canonicalization pass '" + pass.name + "' is registered twice");
  }
  r.passes.push_back(std::move(pass));
}

std::vector<CanonicalPass> canonical_passes() {
  PassRegistry& r = pass_registry();
  std::lock_guard lock(r.mutex);
  std::vector<CanonicalPass> passes = r.passes;
  std::sort(passes.begin(), passes.end(), [](const CanonicalPass& a, const CanonicalPass& b) {
    return a.order != b.order ? a.order < b.order : a.name < b.name;
  });
  return passes;
}

graph::Graph canonicalize(const graph::Graph& captured) {
  graph::Graph g = captured;
  g.reindex();
  drop_metadata_checks(g);
  for (const auto& pass : canonical_passes()) pass.run(g);
  sort_origins(g, captured);
  return g;
}

}  // namespace fact::discover
