// The rule DSL of stage 1 (docs/architecture.md). A rule is data: a name, the pattern folder
// that owns it, a pattern tree with named roles, and a check. The check turns a structural
// match into a Match (accepted, pending, or declined with a reason) or returns nothing when
// the rule does not apply after all. Pattern folders add their rules to the registry through a
// static RuleRegistrar in their rule.cpp; nothing else lists them.
//
//   // softmax(masked(q·kᵀ)) with optional casts around the softmax
//   auto scores = Pattern::op({"fact.gemm"}).as("qk");
//   auto probs = Pattern::op({"aten.softmax", "aten._softmax"}, {scores}).as("softmax");
//   auto root = Pattern::op({"fact.gemm"}, {Pattern::cast(probs), Pattern::any().as("v")});
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "fact/discover/discover.hpp"
#include "fact/discover/match.hpp"
#include "fact/graph/graph.hpp"

namespace fact::discover {

// "aten.add.Tensor" -> "aten.add"; "fact.gemm" stays "fact.gemm".
std::string_view op_base(std::string_view target);
// True when `node.target` is `name` exactly or `name` is its base ("aten.add" matches
// "aten.add.Tensor" and "aten.add.Scalar").
bool target_is(const graph::Node& node, std::string_view name);
bool target_in(const graph::Node& node, const std::vector<std::string>& names);

// Roles bound by a match: values (and, for op patterns, the node that produced the value).
struct Binding {
  std::map<std::string, graph::ValueId> values;
  std::map<std::string, graph::NodeId> nodes;
  std::vector<graph::NodeId> matched;  // every node an op pattern matched, root first
  bool has(const std::string& role) const { return values.count(role) != 0; }
};

// A pattern tree over the canonical graph. Patterns are values: the builder methods return a
// modified copy.
class Pattern {
 public:
  using NodeCheck = std::function<bool(const graph::Node&, const graph::Graph&)>;
  using ValueCheck = std::function<bool(const graph::Value&, const graph::Graph&)>;

  // A node whose target is one of `targets` (base names allowed, see target_is); `args`
  // constrain its tensor arguments in order (tensor arguments past the list are free).
  static Pattern op(std::vector<std::string> targets, std::vector<Pattern> args = {});
  // Any value (a leaf).
  static Pattern any();
  // The first alternative that matches.
  static Pattern one_of(std::vector<Pattern> alternatives);
  // `inner`, optionally wrapped in one dtype conversion (aten.to / aten._to_copy).
  static Pattern cast(Pattern inner);

  // Binds the matched value (and its producer node, for op patterns) to `role`. A role bound
  // twice must bind the same value.
  Pattern as(std::string role) const;
  // The first two argument patterns may match in either order.
  Pattern commutative() const;
  // For an op pattern with one argument pattern: the node may be absent, the argument pattern
  // then matches the value itself.
  Pattern optional() const;
  // Extra conditions on the matched node / value.
  Pattern where(NodeCheck check) const;
  Pattern where_value(ValueCheck check) const;
  // By default a non-root op pattern only matches a value read by exactly one node (and not a
  // graph output), so the matched nodes can be replaced together; shared() lifts that.
  Pattern shared() const;

  // Matches with `root` as the root node of the pattern (an op pattern). `seed` pre-binds
  // roles (a role bound there must match that value).
  std::optional<Binding> match_node(const graph::Node& root, const graph::Graph& g,
                                    const Binding& seed = {}) const;
  // Matches the pattern against a value (op patterns look at its producer).
  std::optional<Binding> match_value(const graph::ValueId& value, const graph::Graph& g,
                                     const Binding& seed = {}) const;

  bool is_op() const { return kind_ == Kind::Op; }
  const std::vector<std::string>& targets() const { return targets_; }

 private:
  enum class Kind { Op, Any, OneOf };
  bool match_into(const graph::ValueId& value, const graph::Graph& g, bool is_root,
                  Binding& binding) const;
  bool match_op_node(const graph::Node& node, const graph::ValueId& value, const graph::Graph& g,
                     Binding& binding) const;
  bool match_args(const std::vector<graph::ValueId>& tensor_args, const graph::Graph& g,
                  Binding& binding) const;
  bool bind(const graph::ValueId& value, const graph::Node* node, Binding& binding) const;

  Kind kind_ = Kind::Any;
  std::vector<std::string> targets_;
  std::vector<Pattern> args_;
  std::string role_;
  bool commutative_ = false;
  bool optional_ = false;
  bool shared_ = false;
  std::vector<NodeCheck> node_checks_;
  std::vector<ValueCheck> value_checks_;
};

// The tensor arguments of a node, in order (tensor-list entries are not included).
std::vector<graph::ValueId> tensor_args(const graph::Node& node);
// True when exactly one node reads `value` and it is not a graph output.
bool single_use(const graph::Graph& g, const graph::ValueId& value);

struct RuleContext {
  const graph::Graph& graph;  // canonical graph
  const DiscoverOptions& options;
  const std::set<graph::NodeId>& claimed;  // canonical nodes earlier matches took
};

// What a rule's check produces for one anchor.
struct RuleResult {
  Match match;                          // rule, pattern, status, reason, roles, gemms, dtype
  std::vector<graph::NodeId> claims;    // canonical nodes the match covers (and replaces)
  std::vector<graph::ValueId> outputs;  // values it hands to the rest of the graph
};

// The check: `anchor` is the node the pattern's root matched, `binding` its roles. Returns
// nothing when the rule does not apply after all.
using RuleCheck = std::function<std::optional<RuleResult>(const RuleContext&, const graph::Node&,
                                                          const Binding&)>;

// What a prologue rule (Rule::attach) makes of one anchor: a declined report (claims nothing),
// or one accepted result that replaces the earlier results it names in `absorbed` (indices into
// the results run_rules has so far): e.g. a normalization folded into the projection matches that
// read its output, merged with them into one match, its own nodes claimed with theirs.
struct PrologueResult {
  RuleResult result;
  std::vector<size_t> absorbed;
};

// A prologue's check: like RuleCheck, and also given every result of the ordinary rules (and of
// prologues that ran before it). Returns nothing when the rule does not apply after all.
using PrologueAttach = std::function<std::optional<PrologueResult>(
    const RuleContext&, const graph::Node&, const Binding&, const std::vector<RuleResult>& results)>;

struct Rule {
  std::string name;        // "gemm_epilogue"; unique in the registry
  std::string pattern;     // owning folder: patterns/<pattern>
  int priority = 0;        // higher runs first: bigger patterns claim nodes before their parts
  bool has_template = false;  // a realization template exists (ADAPT) or not (NEW)
  Pattern root;
  RuleCheck check;
  // An opt-in rule (e.g. a fusion measured slower than what it replaces) accepts only when the
  // user's selection names it (DiscoverOptions::opt_in holds its name, its pattern folder or
  // the accepted match's rule name); otherwise run_rules turns each match it would accept into
  // a declined report with `opt_in_reason` (it claims nothing, so other rules take its nodes).
  bool opt_in = false;
  std::string opt_in_reason = {};  // why it is opt-in and how to name it; required when opt_in
  // Set for a prologue rule (then `check` is unused): it runs after every ordinary rule, over
  // their results (PrologueAttach); a computation feeding other matches' operands is folded
  // into them. Opt-in applies as for checks: an accepted result the
  // selection does not name becomes a report and the results it would absorb stay as they are.
  PrologueAttach attach = {};
};

class RuleRegistry {
 public:
  static RuleRegistry& global();
  // Throws std::invalid_argument when a rule of that name is already registered.
  void add(Rule rule);
  // Highest priority first; equal priorities by name.
  std::vector<const Rule*> by_priority() const;
  const Rule* find(std::string_view name) const;
  // True when some rule of pattern folder `pattern` has a template.
  bool pattern_has_template(std::string_view pattern) const;

 private:
  std::vector<std::unique_ptr<Rule>> rules_;
};

// Registers a rule at static-initialization time (one per rule, in the pattern's rule.cpp).
struct RuleRegistrar {
  explicit RuleRegistrar(Rule rule);
};

// Runs `rules` over the canonical graph: rules by priority, anchors in graph order. A
// canonical node is claimed by at most one match; a result whose intermediate values are read
// outside its claims (or are graph outputs) other than its `outputs` is discarded. Each
// result's Match::nodes lists the captured nodes covered (the claims' origins, in canonical
// order). A declined result with no claims is kept as a report: it replaces nothing, claims
// nothing (other rules may match its nodes) and keeps the Match::nodes its rule set. An
// accepted result of an opt-in rule (Rule::opt_in) that options.opt_in does not name becomes
// such a report, with the rule's opt_in_reason and the nodes it would have covered. Prologue
// rules (Rule::attach) run after the ordinary ones, by priority: an accepted result replaces the
// results it absorbs, when its claims overlap no other result's and its intermediates do not
// escape (else it is dropped and they stay).
std::vector<RuleResult> run_rules(const graph::Graph& canonical, const DiscoverOptions& options,
                                  const std::vector<const Rule*>& rules);

}  // namespace fact::discover
