// patterns/gemm: one GEMM (or batched GEMM) with the epilogue chain its single-reader
// successors form (see README.md).
#include "patterns/gemm/discover/chain.hpp"
#include "fact/discover/rule.hpp"

namespace fact::discover {
using namespace fact::gemm;  // NOLINT: the GEMM pattern's chain and problem types
namespace {

std::optional<RuleResult> match_gemm(const RuleContext& context, const graph::Node& anchor,
                                     const Binding&) {
  GemmChain chain = gemm_chain_from_node(context.graph, anchor);
  absorb_epilogue(context.graph, chain, EpilogueOptions{.claimed = &context.claimed});
  std::string name = chain.problem.fusion_name();
  return gemm_rule_result(context, {chain}, std::move(name), "gemm");
}

const RuleRegistrar kGemmRule{Rule{
    .name = "gemm_epilogue",
    .pattern = "gemm",
    .priority = 10,
    .has_template = true,
    .root = Pattern::op({"fact.gemm"}).as("gemm"),
    .check = match_gemm,
}};

}  // namespace
}  // namespace fact::discover
