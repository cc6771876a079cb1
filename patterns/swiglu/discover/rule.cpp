// patterns/swiglu: act(x·Wg) * (x·Wu) [→ ·Wd] with act SiLU (SwiGLU) or GELU (GeGLU). In bf16 /
// fp16 it is realized as ONE GEMM over the gate and up weights interleaved row by row at plan
// time (a derived operand, operand_transform.hpp) whose last epilogue step, glu(act), writes
// the half-width product; otherwise (float32, biases, anything the one-GEMM form does not
// cover) as a gate GEMM with the activation, an up GEMM with a Multiply epilogue reading the
// gate's output, the reason recorded in extra.one_gemm_declined. Optionally the down GEMM with
// its own epilogue joins either form (see README.md).
#include <algorithm>

#include "patterns/gemm/discover/chain.hpp"
#include "fact/discover/rule.hpp"
#include "fact/problem/operand_transform.hpp"

namespace fact::discover {
using namespace fact::gemm;  // NOLINT: the GEMM pattern's chain and problem types
namespace {

bool is_gate_activation(const graph::Node& node, const graph::Graph&) {
  return node.target != "fact.activation" || node.attrs.value("kind", std::string()) == "silu";
}

Pattern swiglu_pattern() {
  const Pattern gate = Pattern::op({"fact.gemm"}).as("gate");
  const Pattern gate_act = Pattern::op({"fact.activation", "fact.gelu_tanh", "fact.gelu_erf"}, {gate})
                               .where(is_gate_activation)
                               .as("gate_act");
  const Pattern up = Pattern::op({"fact.gemm"}).as("up");
  return Pattern::op({"aten.mul"}, {gate_act, up}).commutative().as("product");
}

bool same_operand(const GemmOperand& a, const GemmOperand& b) {
  return a.value == b.value && a.layout == b.layout && a.ld == b.ld && a.batch_stride == b.batch_stride;
}

bool is_16bit(DType t) { return t == DType::BFloat16 || t == DType::Float16; }

// Why the gate / up pair cannot run as one gated GEMM, or nullopt. `gate` carries exactly its
// activation, `up` exactly the product with the gate's output.
std::optional<std::string> one_gemm_unsupported(const graph::Graph& g, const GemmChain& gate,
                                                const GemmChain& up) {
  const GemmProblem& p = gate.problem;
  if (p.epilogue.size() != 1 || p.epilogue[0].kind != EpilogueStep::Kind::Activation)
    return std::string("the gate GEMM has more than its activation (a bias or a scale)");
  if (up.problem.epilogue.size() != 1) return std::string("the up GEMM has more than the product");
  if (!is_16bit(p.a.dtype) || p.b.dtype != p.a.dtype || up.problem.b.dtype != p.a.dtype ||
      p.d.dtype != p.a.dtype || up.problem.d.dtype != p.a.dtype)
    return "dtype " + std::string(graph::dtype_name(p.a.dtype)) +
           ": the glu kernel writes bf16/fp16 (float32 keeps three GEMMs)";
  if (p.batch != 1 || p.outer_batch != 1 || up.problem.batch != 1)
    return std::string("batched projections");
  for (const GemmChain* chain : {&gate, &up}) {
    const GemmOperand& w = chain->problem.b;
    const graph::Value& v = g.value(w.value);
    if (v.kind != graph::ValueKind::Parameter && v.kind != graph::ValueKind::Buffer &&
        v.kind != graph::ValueKind::Constant)
      return "weight '" + w.value + "' is computed by the graph (interleaving needs a parameter)";
    if (w.layout != Layout::ColumnMajor || v.desc.shape != std::vector<int64_t>{p.n, p.k} ||
        !v.desc.is_contiguous())
      return "weight '" + w.value + "' is not a contiguous [N, K] nn.Linear weight";
  }
  if (up.problem.d.layout != Layout::RowMajor || up.problem.d.ld != p.n)
    return std::string("the product is not a dense row-major M x N tensor");
  return std::nullopt;
}

// The gate and up weights ([I, H] each) interleaved row by row into [2I, H]: row 2j is the
// gate's row j, row 2j+1 the up's, so output columns (2j, 2j+1) of one GEMM are (gate_j, up_j).
DerivedOperand interleaved_weight(const graph::Graph& g, const std::string& id, const GemmChain& gate,
                                  const GemmChain& up) {
  DerivedOperand d;
  d.value = std::string(kDerivedPrefix) + id + ".gate_up_weight";
  d.from = {gate.problem.b.value, up.problem.b.value};
  ProgramBuilder program;
  const std::string stacked = program.stack({source_ref(0), source_ref(1)}, 1);  // [I, 2, H]
  program.reshape(stacked, {2 * gate.problem.n, gate.problem.k});
  d.ops = std::move(program.ops);
  d.dtype = g.value(gate.problem.b.value).desc.dtype;
  d.shape = {2 * gate.problem.n, gate.problem.k};
  d.purpose = "gate and up weights interleaved row by row (one GEMM, glu epilogue)";
  return d;
}

// The one-GEMM chain: the gate's problem over the interleaved weight (N = 2I), epilogue
// [glu(act)], writing the product's value (M x I).
GemmChain gated_chain(const GemmChain& gate, const GemmChain& up, const DerivedOperand& weight) {
  GemmChain c = gate;
  GemmProblem& p = c.problem;
  p.b.value = weight.value;
  p.b.ld = p.k;
  p.n = 2 * gate.problem.n;
  EpilogueStep glu;
  glu.kind = EpilogueStep::Kind::Glu;
  glu.activation = gate.problem.epilogue[0].activation;
  p.epilogue = {glu};
  p.d = up.problem.d;
  c.nodes.insert(c.nodes.end(), up.nodes.begin(), up.nodes.end());
  c.output = up.output;
  c.roles["weight"] = weight.value;
  return c;
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

  const bool silu = gate.problem.epilogue.back().activation == Activation::SiLU;
  std::string name = silu ? "swiglu" : "geglu";
  std::map<std::string, graph::ValueId> roles{{"input", gate.roles.at("input")},
                                              {"gate_weight", gate.roles.at("weight")},
                                              {"up_weight", up.roles.at("weight")},
                                              {"hidden", up.output},
                                              {"output", up.output}};
  std::optional<GemmChain> down;
  if (single_use(g, up.output)) {
    const graph::Node* reader = g.consumers(up.output).front();
    if (reader->target == "fact.gemm" && tensor_args(*reader).front() == up.output) {
      down = gemm_chain_from_node(g, *reader);
      absorb_epilogue(g, *down, EpilogueOptions{.claimed = &context.claimed});
      roles["down_weight"] = down->roles.at("weight");
      roles["output"] = down->output;
      if (down->roles.count("residual")) roles["residual"] = down->roles.at("residual");
      name += "_mlp";
    }
  }

  // One gated GEMM where it applies and every kernel passes the GEMM checks.
  std::optional<std::string> declined = one_gemm_unsupported(g, gate, up);
  if (!declined) {
    const DerivedOperand weight = interleaved_weight(g, binding.nodes.at("product"), gate, up);
    std::vector<GemmChain> chains{gated_chain(gate, up, weight)};
    if (down) chains.push_back(*down);
    auto gated_roles = roles;
    gated_roles["gate_up_weight"] = weight.value;
    auto result = gemm_rule_result(context, chains, name, "swiglu", gated_roles);
    if (result.match.status == MatchStatus::Accepted) {
      result.match.derived = {weight};
      return result;
    }
    declined = result.match.reason;
  }

  // The three-GEMM form: the gate GEMM with its activation, the up GEMM with the product.
  std::vector<GemmChain> chains{gate, up};
  if (down) chains.push_back(*down);
  roles["gate_output"] = gate.output;
  auto result = gemm_rule_result(context, chains, name, "swiglu", roles);
  if (result.match.status != MatchStatus::Accepted) return std::nullopt;
  result.match.extra["one_gemm_declined"] = *declined;
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
