// patterns/attention: a canonical fact.attention node becomes a match, accepted when the
// attention kernel computes it (kind/problem.hpp's attention_decline_reason: the same checks
// the realizer makes), declined with the reason otherwise; a decomposed attention that
// canonicalization left to its GEMMs (no kernel computes it) is reported as declined with the
// reason, claiming nothing (see README.md).
#include "fact/discover/rule.hpp"
#include "patterns/attention/discover/canonicalize.hpp"
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
  if (m.status == MatchStatus::Accepted && m.dtype == graph::DType::Float32) {
    // The float32 kernel's products, as the GEMM rules name theirs (the report's dtype column).
    m.extra["math"] = core::precision_info(context.options.precision == core::PrecisionMode::Tf32
                                               ? core::PrecisionMode::Tf32 : core::PrecisionMode::Strict).float32_math;
  }
  m.problems.push_back(Problem{attention::kKindName, std::move(desc)});
  result.claims = {anchor.id};
  result.outputs = anchor.outputs;
  return result;
}

// A decomposed attention whose output product is `anchor`, left as GEMMs by canonicalization:
// a declined match (a report: it claims nothing, so the GEMM rule still composes the products).
std::optional<RuleResult> report_left_attention(const RuleContext& context, const graph::Node& anchor,
                                                const Binding&) {
  const auto left = attention::left_attention(context.graph, anchor);
  if (!left) return std::nullopt;
  RuleResult result;
  Match& m = result.match;
  m.pattern = "attention";
  m.status = MatchStatus::Declined;
  m.classification = Classification::Adapt;
  m.dtype = context.graph.value(left->output).desc.dtype;
  try {
    const AttentionProblem problem = attention::attention_problem_from_json(left->problem);
    m.rule = problem.mask == attention::MaskKind::None ? "attention" : "attention_causal";
    m.reason = attention::attention_decline_reason(problem, context.options.precision).value_or("");
  } catch (const std::invalid_argument& e) {
    m.rule = "attention";
    m.reason = e.what();
  }
  if (m.reason.empty()) return std::nullopt;
  m.reason += " (its products stay GEMMs)";
  const char* names[] = {"q", "k", "v", "mask"};
  for (size_t i = 0; i < left->args.size() && i < 4; ++i) {
    if (left->args[i].is_tensor()) m.roles[names[i]] = left->args[i].tensor;
  }
  m.roles["output"] = left->output;
  m.extra = left->problem;
  m.extra["precision"] = context.options.precision;
  m.problems.push_back(Problem{attention::kKindName, left->problem});
  m.nodes = left->nodes;
  result.outputs = {left->output};
  return result;
}

const RuleRegistrar kLeftAttentionRule{Rule{
    .name = "attention_left_to_gemms",
    .pattern = "attention",
    .priority = 101,
    .has_template = true,
    .root = Pattern::op({"fact.gemm", "aten.einsum"}).as("product"),
    .check = report_left_attention,
}};

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
