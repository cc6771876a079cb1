// patterns/attention: a canonical fact.attention node becomes a match, accepted when the
// attention kernel computes it (kind/problem.hpp's attention_decline_reason: the same checks
// the realizer makes), declined with the reason otherwise (see README.md).
#include "fact/discover/rule.hpp"
#include "patterns/attention/kind/problem.hpp"

namespace fact::discover {
namespace {

using attention::AttentionProblem;

std::optional<RuleResult> match_attention(const RuleContext& context, const graph::Node& anchor,
                                          const Binding&) {
  const graph::Graph& g = context.graph;
  RuleResult result;
  Match& m = result.match;
  nlohmann::json desc = anchor.attrs;
  m.dtype = g.value(anchor.outputs.front()).desc.dtype;
  desc["dtype"] = graph::dtype_name(m.dtype);
  AttentionProblem problem;
  try {
    problem = attention::attention_problem_from_json(desc);
  } catch (const std::invalid_argument& e) {
    m.status = MatchStatus::Declined;
    m.reason = e.what();
  }
  m.rule = problem.mask == attention::MaskKind::None ? "attention" : "attention_causal";
  m.pattern = "attention";
  m.classification = Classification::Adapt;
  if (m.reason.empty()) {
    if (auto why = attention::attention_decline_reason(problem, context.options.precision)) {
      m.status = MatchStatus::Declined;
      m.reason = *why;
    } else {
      m.status = MatchStatus::Accepted;
    }
  }
  const auto args = tensor_args(anchor);
  const char* names[] = {"q", "k", "v", "mask"};
  for (size_t i = 0; i < args.size() && i < 4; ++i) m.roles[names[i]] = args[i];
  m.roles["output"] = anchor.outputs.front();
  m.extra = anchor.attrs;
  m.extra["precision"] = context.options.precision;
  m.problems.push_back(Problem{attention::kKindName, std::move(desc)});
  result.claims = {anchor.id};
  result.outputs = anchor.outputs;
  return result;
}

const RuleRegistrar kAttentionRule{Rule{
    .name = "attention",
    .pattern = "attention",
    .priority = 100,
    .has_template = true,
    .root = Pattern::op({"fact.attention"}).as("attention"),
    .check = match_attention,
}};

}  // namespace
}  // namespace fact::discover
