// patterns/swiglu: silu(x·Wg) * (x·Wu) [→ ·Wd], realized as a gate GEMM with a SiLU epilogue,
// an up GEMM with a Multiply epilogue reading the gate's output, and optionally the down GEMM
// with its own epilogue (see README.md).
#include <algorithm>

#include "patterns/gemm/discover/chain.hpp"
#include "fact/discover/rule.hpp"

namespace fact::discover {
using namespace fact::gemm;  // NOLINT: the GEMM pattern's chain and problem types
namespace {

bool is_silu(const graph::Node& node, const graph::Graph&) {
  return node.attrs.value("kind", std::string()) == "silu";
}

Pattern swiglu_pattern() {
  const Pattern gate = Pattern::op({"fact.gemm"}).as("gate");
  const Pattern gate_act = Pattern::op({"fact.activation"}, {gate}).where(is_silu).as("gate_act");
  const Pattern up = Pattern::op({"fact.gemm"}).as("up");
  return Pattern::op({"aten.mul"}, {gate_act, up}).commutative().as("product");
}

bool same_operand(const GemmOperand& a, const GemmOperand& b) {
  return a.value == b.value && a.layout == b.layout && a.ld == b.ld && a.batch_stride == b.batch_stride;
}

std::optional<RuleResult> match_swiglu(const RuleContext& context, const graph::Node&,
                                       const Binding& binding) {
  const graph::Graph& g = context.graph;
  GemmChain gate = gemm_chain_from_node(g, *g.node(binding.nodes.at("gate")));
  absorb_epilogue(g, gate, EpilogueOptions{.allow_multiply = false, .claimed = &context.claimed});
  if (gate.output != binding.values.at("gate_act")) return std::nullopt;
  GemmChain up = gemm_chain_from_node(g, *g.node(binding.nodes.at("up")));
  if (!same_operand(gate.problem.a, up.problem.a) || gate.problem.n != up.problem.n)
    return std::nullopt;
  absorb_epilogue(g, up, EpilogueOptions{.allow_multiply = true, .claimed = &context.claimed});
  const bool multiplied = !up.problem.epilogue.empty() &&
                          std::any_of(up.problem.epilogue.begin(), up.problem.epilogue.end(),
                                      [&](const EpilogueStep& s) {
                                        return s.kind == EpilogueStep::Kind::Multiply &&
                                               s.operand == gate.output;
                                      });
  if (!multiplied) return std::nullopt;

  std::vector<GemmChain> chains{gate, up};
  std::map<std::string, graph::ValueId> roles{{"input", gate.roles.at("input")},
                                              {"gate_weight", gate.roles.at("weight")},
                                              {"up_weight", up.roles.at("weight")},
                                              {"gate_output", gate.output},
                                              {"hidden", up.output},
                                              {"output", up.output}};
  std::string name = "swiglu";
  if (single_use(g, up.output)) {
    const graph::Node* reader = g.consumers(up.output).front();
    if (reader->target == "fact.gemm" && tensor_args(*reader).front() == up.output) {
      GemmChain down = gemm_chain_from_node(g, *reader);
      absorb_epilogue(g, down, EpilogueOptions{.claimed = &context.claimed});
      roles["down_weight"] = down.roles.at("weight");
      roles["output"] = down.output;
      if (down.roles.count("residual")) roles["residual"] = down.roles.at("residual");
      chains.push_back(std::move(down));
      name = "swiglu_mlp";
    }
  }
  auto result = gemm_rule_result(context, chains, name, "swiglu", roles);
  if (result.match.status != MatchStatus::Accepted) return std::nullopt;
  return result;
}

const RuleRegistrar kSwigluRule{Rule{
    .name = "swiglu",
    .pattern = "swiglu",
    .priority = 90,
    .has_template = true,
    .root = swiglu_pattern(),
    .check = match_swiglu,
}};

}  // namespace
}  // namespace fact::discover
