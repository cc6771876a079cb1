// patterns/mlp: GEMM → activation → GEMM, realized as two GEMM kernels with the activation
// fused into the first (see README.md).
#include "patterns/gemm/discover/chain.hpp"
#include "fact/discover/rule.hpp"

namespace fact::discover {
using namespace fact::gemm;  // NOLINT: the GEMM pattern's chain and problem types
namespace {

std::optional<Activation> last_activation(const GemmChain& chain) {
  std::optional<Activation> found;
  for (const auto& step : chain.problem.epilogue) {
    if (step.kind == EpilogueStep::Kind::Activation) found = step.activation;
  }
  return found;
}

std::optional<RuleResult> match_mlp(const RuleContext& context, const graph::Node& anchor,
                                    const Binding&) {
  const graph::Graph& g = context.graph;
  GemmChain up = gemm_chain_from_node(g, anchor);
  absorb_epilogue(g, up, EpilogueOptions{.claimed = &context.claimed});
  const auto activation = last_activation(up);
  if (!activation || !single_use(g, up.output)) return std::nullopt;
  const graph::Node* reader = g.consumers(up.output).front();
  if (reader->target != "fact.gemm" || tensor_args(*reader).front() != up.output) return std::nullopt;
  GemmChain down = gemm_chain_from_node(g, *reader);
  absorb_epilogue(g, down, EpilogueOptions{.claimed = &context.claimed});

  std::map<std::string, graph::ValueId> roles{{"input", up.roles.at("input")},
                                              {"up_weight", up.roles.at("weight")},
                                              {"hidden", up.output},
                                              {"down_weight", down.roles.at("weight")},
                                              {"output", down.output}};
  if (up.roles.count("bias")) roles["up_bias"] = up.roles.at("bias");
  if (down.roles.count("bias")) roles["down_bias"] = down.roles.at("bias");
  if (down.roles.count("residual")) roles["residual"] = down.roles.at("residual");
  auto result = gemm_rule_result(context, {up, down},
                                 "mlp_" + std::string(activation_name(*activation)), "mlp", roles);
  // A composite only stands when both kernels can be built; otherwise the gemm rule reports
  // each GEMM on its own, with its own reason.
  if (result.match.status != MatchStatus::Accepted) return std::nullopt;
  return result;
}

const RuleRegistrar kMlpRule{Rule{
    .name = "mlp",
    .pattern = "mlp",
    .priority = 80,
    .has_template = true,
    .root = Pattern::op({"fact.gemm"}).as("up"),
    .check = match_mlp,
}};

}  // namespace
}  // namespace fact::discover
