// patterns/attention: a canonical fact.attention node, reported as pending until the
// attention template lands (see README.md).
#include "fact/discover/rule.hpp"

namespace fact::discover {
namespace {

std::optional<RuleResult> match_attention(const RuleContext& context, const graph::Node& anchor,
                                          const Binding&) {
  const graph::Graph& g = context.graph;
  RuleResult result;
  Match& m = result.match;
  m.rule = anchor.attrs.value("causal", false) ? "attention_causal" : "attention";
  m.pattern = "attention";
  m.status = MatchStatus::Pending;
  m.reason = "no template yet (attention issue)";
  m.classification = Classification::New;
  const auto args = tensor_args(anchor);
  const char* names[] = {"q", "k", "v", "mask"};
  for (size_t i = 0; i < args.size() && i < 4; ++i) m.roles[names[i]] = args[i];
  m.roles["output"] = anchor.outputs.front();
  m.dtype = g.value(anchor.outputs.front()).desc.dtype;
  m.extra = anchor.attrs;
  nlohmann::json desc = anchor.attrs;
  desc["dtype"] = graph::dtype_name(m.dtype);
  m.problems.push_back(Problem{"attention", std::move(desc)});
  result.claims = {anchor.id};
  result.outputs = anchor.outputs;
  return result;
}

const RuleRegistrar kAttentionRule{Rule{
    .name = "attention",
    .pattern = "attention",
    .priority = 100,
    .has_template = false,
    .root = Pattern::op({"fact.attention"}).as("attention"),
    .check = match_attention,
}};

}  // namespace
}  // namespace fact::discover
