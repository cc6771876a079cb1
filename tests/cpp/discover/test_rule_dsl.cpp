// The rule DSL: pattern trees with roles, the registry, and run_rules' claiming.
#include <gtest/gtest.h>

#include "fact/discover/rule.hpp"
#include "tests/cpp/discover/discover_test_util.hpp"

namespace fact::discover {
namespace {

using namespace ::fact::gemm;  // NOLINT: the GEMM problem types these tests look at
using testing::gemms;

using graph::C;
using graph::DType;
using graph::GraphBuilder;
using graph::T;

// y = relu(a + b) * 2, z = neg(a)
graph::Graph small_graph() {
  GraphBuilder b(DType::Float32);
  auto a = b.input("a", {4});
  auto c = b.input("b", {4});
  auto sum = b.op("aten.add.Tensor", {T(a), T(c)}, {4});
  auto r = b.op("aten.relu.default", {T(sum)}, {4});
  auto y = b.op("aten.mul.Tensor", {T(r), C(2.0)}, {4});
  auto z = b.op("aten.neg.default", {T(a)}, {4});
  return b.finish({y, z});
}

TEST(OpBase, StripsTheOverload) {
  EXPECT_EQ(op_base("aten.add.Tensor"), "aten.add");
  EXPECT_EQ(op_base("aten.add"), "aten.add");
  EXPECT_EQ(op_base("fact.gemm"), "fact.gemm");
  graph::Node n;
  n.target = "aten.addmm.default";
  EXPECT_TRUE(target_is(n, "aten.addmm"));
  EXPECT_FALSE(target_is(n, "aten.add"));
  EXPECT_TRUE(target_in(n, {"aten.mm", "aten.addmm.default"}));
}

TEST(Pattern, BindsRolesThroughTheTree) {
  auto g = small_graph();
  auto p = Pattern::op({"aten.mul"}, {Pattern::op({"aten.relu"}, {Pattern::op({"aten.add"}, {Pattern::any().as("lhs"), Pattern::any().as("rhs")}).as("sum")}).as("act")}).as("out");
  auto binding = p.match_node(*g.node("mul"), g);
  ASSERT_TRUE(binding);
  EXPECT_EQ(binding->values.at("lhs"), "a");
  EXPECT_EQ(binding->values.at("rhs"), "b");
  EXPECT_EQ(binding->nodes.at("sum"), "add");
  EXPECT_EQ(binding->nodes.at("act"), "relu");
  EXPECT_EQ(binding->matched, (std::vector<std::string>{"mul", "relu", "add"}));
  EXPECT_FALSE(p.match_node(*g.node("neg"), g));
}

TEST(Pattern, CommutativeOptionalOneOfWhere) {
  auto g = small_graph();
  // "b" first only matches when the arguments may swap.
  auto ordered = Pattern::op({"aten.add"}, {Pattern::any().where_value([](const graph::Value& v, const graph::Graph&) { return v.id == "b"; }), Pattern::any()});
  EXPECT_FALSE(ordered.match_node(*g.node("add"), g));
  EXPECT_TRUE(ordered.commutative().match_node(*g.node("add"), g));
  // An optional node may be missing.
  auto relu_maybe = Pattern::op({"aten.mul"}, {Pattern::op({"aten.sigmoid"}, {Pattern::op({"aten.relu"}).as("r")}).optional()});
  auto binding = relu_maybe.match_node(*g.node("mul"), g);
  ASSERT_TRUE(binding);
  EXPECT_EQ(binding->nodes.at("r"), "relu");
  // The first alternative that matches wins.
  auto alternatives = Pattern::op({"aten.mul"}, {Pattern::one_of({Pattern::op({"aten.sigmoid"}).as("s"), Pattern::op({"aten.relu"}).as("r")})});
  binding = alternatives.match_node(*g.node("mul"), g);
  ASSERT_TRUE(binding);
  EXPECT_FALSE(binding->has("s"));
  EXPECT_TRUE(binding->has("r"));
  // Node checks.
  auto never = Pattern::op({"aten.mul"}).where([](const graph::Node&, const graph::Graph&) { return false; });
  EXPECT_FALSE(never.match_node(*g.node("mul"), g));
}

TEST(Pattern, RoleBoundTwiceMustBeTheSameValue) {
  GraphBuilder b(DType::Float32);
  auto x = b.input("x", {4});
  auto y = b.input("y", {4});
  auto sq = b.op("aten.mul.Tensor", {T(x), T(x)}, {4});
  auto xy = b.op("aten.mul.Tensor", {T(x), T(y)}, {4});
  auto g = b.finish({sq, xy});
  auto square = Pattern::op({"aten.mul"}, {Pattern::any().as("x"), Pattern::any().as("x")});
  EXPECT_TRUE(square.match_node(*g.node(sq), g));
  EXPECT_FALSE(square.match_node(*g.node(xy), g));
  // A seeded role constrains the match.
  Binding seed;
  seed.values["x"] = y;
  auto product = Pattern::op({"aten.mul"}, {Pattern::any().as("x"), Pattern::any()}).commutative();
  auto binding = product.match_node(*g.node(xy), g, seed);
  ASSERT_TRUE(binding);
  EXPECT_FALSE(product.match_node(*g.node(sq), g, seed));
}

TEST(Pattern, InnerNodesMustHaveOneReaderUnlessShared) {
  GraphBuilder b(DType::Float32);
  auto x = b.input("x", {4});
  auto r = b.op("aten.relu.default", {T(x)}, {4});
  auto y = b.op("aten.neg.default", {T(r)}, {4});
  auto g = b.finish({y, r});  // relu's output is also returned
  auto p = Pattern::op({"aten.neg"}, {Pattern::op({"aten.relu"})});
  EXPECT_FALSE(p.match_node(*g.node(y), g));
  auto shared = Pattern::op({"aten.neg"}, {Pattern::op({"aten.relu"}).shared()});
  EXPECT_TRUE(shared.match_node(*g.node(y), g));
}

TEST(RuleRegistry, PriorityOrderAndDuplicateNames) {
  RuleRegistry registry;
  registry.add(Rule{.name = "small", .pattern = "p", .priority = 1, .root = Pattern::op({"aten.relu"})});
  registry.add(Rule{.name = "big", .pattern = "q", .priority = 5, .has_template = true, .root = Pattern::op({"aten.relu"})});
  EXPECT_THROW(registry.add(Rule{.name = "big", .pattern = "q"}), std::invalid_argument);
  auto ordered = registry.by_priority();
  ASSERT_EQ(ordered.size(), 2u);
  EXPECT_EQ(ordered[0]->name, "big");
  EXPECT_TRUE(registry.pattern_has_template("q"));
  EXPECT_FALSE(registry.pattern_has_template("p"));
  EXPECT_EQ(registry.find("nope"), nullptr);
}

TEST(RuleRegistry, PatternFoldersRegisterThemselves) {
  const auto& registry = RuleRegistry::global();
  for (const char* name : {"gemm_epilogue", "mlp", "swiglu", "attention"}) {
    EXPECT_NE(registry.find(name), nullptr) << name;
  }
  auto ordered = registry.by_priority();
  EXPECT_EQ(ordered.front()->pattern, "attention");
  EXPECT_TRUE(registry.pattern_has_template("gemm"));
  EXPECT_TRUE(registry.pattern_has_template("attention"));
}

RuleResult claim(std::vector<std::string> nodes, std::vector<std::string> outputs,
                 const std::string& rule) {
  RuleResult r;
  r.match.rule = rule;
  r.claims = std::move(nodes);
  r.outputs = std::move(outputs);
  return r;
}

TEST(RunRules, HigherPriorityClaimsFirstAndEscapesAreRefused) {
  auto g = small_graph();
  Rule act_and_scale{.name = "act_scale", .pattern = "x", .priority = 2,
                     .root = Pattern::op({"aten.mul"}, {Pattern::op({"aten.relu"}).as("act")}),
                     .check = [](const RuleContext&, const graph::Node& anchor, const Binding& b) {
                       return std::optional(claim({b.nodes.at("act"), anchor.id}, anchor.outputs, "act_scale"));
                     }};
  Rule single{.name = "single", .pattern = "y", .priority = 1,
              .root = Pattern::op({"aten.relu", "aten.add", "aten.neg"}),
              .check = [](const RuleContext&, const graph::Node& anchor, const Binding&) {
                return std::optional(claim({anchor.id}, anchor.outputs, "single"));
              }};
  // Claims "add" but says nothing about its output, which relu reads: refused.
  Rule leaky{.name = "leaky", .pattern = "z", .priority = 3, .root = Pattern::op({"aten.add"}),
             .check = [](const RuleContext&, const graph::Node& anchor, const Binding&) {
               return std::optional(claim({anchor.id, "neg"}, {}, "leaky"));
             }};
  DiscoverOptions options;
  auto results = run_rules(g, options, {&leaky, &act_and_scale, &single});
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].match.rule, "act_scale");
  EXPECT_EQ(results[0].match.nodes, (std::vector<std::string>{"relu", "mul"}));
  EXPECT_EQ(results[0].match.pattern, "x");
  EXPECT_EQ(results[1].match.nodes, std::vector<std::string>{"add"});
  EXPECT_EQ(results[2].match.nodes, std::vector<std::string>{"neg"});
}

// An opt-in rule accepts only when the selection names it (its name, pattern folder or match
// rule); otherwise its accepted match becomes a report with the rule's reason that claims
// nothing, so a lower-priority rule takes the node.
TEST(RunRules, OptInRuleIsAReportUnlessTheSelectionNamesIt) {
  auto g = small_graph();
  Rule fused{.name = "fused", .pattern = "f", .priority = 2, .root = Pattern::op({"aten.neg"}),
             .check = [](const RuleContext&, const graph::Node& anchor, const Binding&) {
               RuleResult r = claim({anchor.id}, anchor.outputs, "fused_neg");
               r.match.status = MatchStatus::Accepted;
               r.match.problems.push_back(Problem{"k", {}});
               return std::optional(r);
             },
             .opt_in = true,
             .opt_in_reason = "fused is opt-in: slower"};
  Rule plain{.name = "plain", .pattern = "p", .priority = 1, .root = Pattern::op({"aten.neg"}),
             .check = [](const RuleContext&, const graph::Node& anchor, const Binding&) {
               RuleResult r = claim({anchor.id}, anchor.outputs, "plain");
               r.match.status = MatchStatus::Accepted;
               return std::optional(r);
             }};
  for (const std::set<std::string>& selection : {std::set<std::string>{}, std::set<std::string>{"p", "other"}}) {
    DiscoverOptions options;
    options.opt_in = selection;
    auto results = run_rules(g, options, {&fused, &plain});
    ASSERT_EQ(results.size(), 2u);
    EXPECT_EQ(results[0].match.rule, "fused_neg");
    EXPECT_EQ(results[0].match.status, MatchStatus::Declined);
    EXPECT_EQ(results[0].match.reason, "fused is opt-in: slower");
    EXPECT_TRUE(results[0].claims.empty());
    EXPECT_TRUE(results[0].match.problems.empty());
    EXPECT_EQ(results[0].match.nodes, std::vector<std::string>{"neg"});
    EXPECT_EQ(results[1].match.rule, "plain");
    EXPECT_EQ(results[1].match.status, MatchStatus::Accepted);
    EXPECT_EQ(results[1].claims, std::vector<std::string>{"neg"});
  }
  for (const char* name : {"fused", "f", "fused_neg"}) {
    DiscoverOptions options;
    options.opt_in = {name};
    auto results = run_rules(g, options, {&fused, &plain});
    ASSERT_EQ(results.size(), 1u) << name;
    EXPECT_EQ(results[0].match.rule, "fused_neg");
    EXPECT_EQ(results[0].match.status, MatchStatus::Accepted);
    EXPECT_EQ(results[0].match.problems.size(), 1u);
  }
}

TEST(RuleRegistry, AnOptInRuleNeedsItsReason) {
  RuleRegistry registry;
  EXPECT_THROW(registry.add(Rule{.name = "quiet", .pattern = "q", .opt_in = true}), std::invalid_argument);
  registry.add(Rule{.name = "loud", .pattern = "q", .opt_in = true, .opt_in_reason = "why"});
  EXPECT_NE(registry.find("loud"), nullptr);
}

}  // namespace
}  // namespace fact::discover
