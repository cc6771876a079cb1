#include <algorithm>
#include <set>
#include <stdexcept>

#include "fact/discover/rule.hpp"

namespace fact::discover {

RuleRegistry& RuleRegistry::global() {
  static RuleRegistry registry;
  return registry;
}

void RuleRegistry::add(Rule rule) {
  if (find(rule.name) != nullptr)
    throw std::invalid_argument("rule '" + rule.name + "' is already registered");
  if (rule.opt_in && rule.opt_in_reason.empty())
    throw std::invalid_argument("opt-in rule '" + rule.name + "' gives no opt_in_reason");
  rules_.push_back(std::make_unique<Rule>(std::move(rule)));
}

std::vector<const Rule*> RuleRegistry::by_priority() const {
  std::vector<const Rule*> ordered;
  for (const auto& rule : rules_) ordered.push_back(rule.get());
  std::sort(ordered.begin(), ordered.end(), [](const Rule* a, const Rule* b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    return a->name < b->name;
  });
  return ordered;
}

const Rule* RuleRegistry::find(std::string_view name) const {
  for (const auto& rule : rules_) {
    if (rule->name == name) return rule.get();
  }
  return nullptr;
}

bool RuleRegistry::pattern_has_template(std::string_view pattern) const {
  for (const auto& rule : rules_) {
    if (rule->pattern == pattern && rule->has_template) return true;
  }
  return false;
}

RuleRegistrar::RuleRegistrar(Rule rule) { RuleRegistry::global().add(std::move(rule)); }

namespace {

// True when some value produced by the claimed nodes, other than the declared outputs, is
// read outside the claims or returned by the graph.
bool intermediates_escape(const graph::Graph& g, const RuleResult& result) {
  const std::set<graph::NodeId> claims(result.claims.begin(), result.claims.end());
  const std::set<graph::ValueId> outputs(result.outputs.begin(), result.outputs.end());
  for (const auto& id : result.claims) {
    const graph::Node* node = g.node(id);
    if (node == nullptr) return true;
    for (const auto& produced : node->outputs) {
      if (outputs.count(produced)) continue;
      if (g.is_graph_output(produced)) return true;
      for (const graph::Node* reader : g.consumers(produced)) {
        if (!claims.count(reader->id)) return true;
      }
    }
  }
  return false;
}

std::vector<graph::NodeId> covered_captured_nodes(const graph::Graph& g,
                                                  const std::vector<graph::NodeId>& claims) {
  const std::set<graph::NodeId> claimed(claims.begin(), claims.end());
  std::vector<graph::NodeId> covered;
  for (const auto& node : g.nodes()) {
    if (!claimed.count(node.id)) continue;
    if (node.origin.empty()) covered.push_back(node.id);
    covered.insert(covered.end(), node.origin.begin(), node.origin.end());
  }
  return covered;
}

// True when the user's selection names an opt-in rule: its name, its pattern folder, or the
// match's own rule / pattern name (a rule may name its matches by form: <rule>_<form>).
bool opted_in(const Rule& rule, const Match& match, const DiscoverOptions& options) {
  for (const std::string& name : {rule.name, rule.pattern, match.rule, match.pattern}) {
    if (!name.empty() && options.opt_in.count(name)) return true;
  }
  return false;
}

}  // namespace

std::vector<RuleResult> run_rules(const graph::Graph& canonical, const DiscoverOptions& options,
                                  const std::vector<const Rule*>& rules) {
  std::set<graph::NodeId> claimed;
  std::vector<RuleResult> results;
  const RuleContext context{canonical, options, claimed};
  for (const Rule* rule : rules) {
    if (rule->attach) continue;  // prologues run below, over these results
    for (const auto& node : canonical.nodes()) {
      if (claimed.count(node.id) || !target_in(node, rule->root.targets())) continue;
      auto binding = rule->root.match_node(node, canonical);
      if (!binding) continue;
      auto result = rule->check(context, node, *binding);
      if (!result) continue;
      bool overlaps = false;
      for (const auto& id : result->claims) overlaps = overlaps || claimed.count(id) != 0;
      // A declined result that claims nothing is a report (what was recognized and why it is
      // not replaced); it keeps the nodes its rule names and leaves them to other rules.
      const bool report_only = result->claims.empty() && result->match.status == MatchStatus::Declined;
      if (overlaps || (result->claims.empty() && !report_only) || intermediates_escape(canonical, *result)) continue;
      if (result->match.pattern.empty()) result->match.pattern = rule->pattern;
      if (!report_only) result->match.nodes = covered_captured_nodes(canonical, result->claims);
      if (rule->opt_in && result->match.status == MatchStatus::Accepted && !opted_in(*rule, result->match, options)) {
        // Not named by the selection: a report of what it would replace; other rules take it.
        result->match.status = MatchStatus::Declined;
        result->match.reason = rule->opt_in_reason;
        result->match.problems.clear();
        result->match.derived.clear();
        result->claims.clear();
      }
      result->match.outputs = result->outputs;
      claimed.insert(result->claims.begin(), result->claims.end());
      results.push_back(std::move(*result));
    }
  }
  for (const Rule* rule : rules) {
    if (!rule->attach) continue;
    for (const auto& node : canonical.nodes()) {
      if (!target_in(node, rule->root.targets())) continue;
      auto binding = rule->root.match_node(node, canonical);
      if (!binding) continue;
      auto attached = rule->attach(context, node, *binding, results);
      if (!attached) continue;
      RuleResult& result = attached->result;
      if (result.match.pattern.empty()) result.match.pattern = rule->pattern;
      if (result.match.status != MatchStatus::Accepted) {
        result.claims.clear();  // a report: the results it looked at stay as they are
        result.match.outputs = result.outputs;
        results.push_back(std::move(result));
        continue;
      }
      if (rule->opt_in && !opted_in(*rule, result.match, options)) {
        result.match.status = MatchStatus::Declined;
        result.match.reason = rule->opt_in_reason;
        result.match.problems.clear();
        result.match.derived.clear();
        result.match.nodes = covered_captured_nodes(canonical, result.claims);
        result.claims.clear();
        result.match.outputs = result.outputs;
        results.push_back(std::move(result));
        continue;
      }
      // Its claims may overlap only the claims of the results it absorbs.
      std::set<graph::NodeId> others = claimed;
      std::set<size_t> absorbed(attached->absorbed.begin(), attached->absorbed.end());
      bool valid = !absorbed.empty() && *absorbed.rbegin() < results.size();
      for (size_t index : absorbed) {
        if (!valid) break;
        valid = results[index].match.status == MatchStatus::Accepted;
        for (const auto& id : results[index].claims) others.erase(id);
      }
      for (const auto& id : result.claims) valid = valid && !others.count(id);
      if (!valid || intermediates_escape(canonical, result)) continue;
      result.match.nodes = covered_captured_nodes(canonical, result.claims);
      result.match.outputs = result.outputs;
      for (auto it = absorbed.rbegin(); it != absorbed.rend(); ++it) {
        results.erase(results.begin() + static_cast<std::ptrdiff_t>(*it));
      }
      claimed.insert(result.claims.begin(), result.claims.end());
      results.push_back(std::move(result));
    }
  }
  return results;
}

}  // namespace fact::discover
