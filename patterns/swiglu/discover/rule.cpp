// patterns/swiglu: act(x·Wg) * (x·Wu) [→ ·Wd] with act SiLU (SwiGLU) or GELU (GeGLU). In bf16 /
// fp16 it is realized as ONE GEMM over the gate and up weights interleaved row by row at plan
// time (a derived operand, operand_transform.hpp) whose last epilogue step, glu(act), writes
// the half-width product; otherwise (float32, biases, anything the one-GEMM form does not
// cover) as a gate GEMM with the activation, an up GEMM with a Multiply epilogue reading the
// gate's output, the reason recorded in extra.one_gemm_declined. Optionally the down GEMM with
// its own epilogue joins either form. A second rule, `swiglu_chunked`, takes the fused-projection
// spelling `gate, up = linear(x, W).chunk(2, -1)` (Phi-3, GeGLU feed-forwards) to the same one
// GEMM, the halves of W (and of its bias) interleaved (see README.md).
#include <algorithm>

#include "patterns/gemm/discover/chain.hpp"
#include "fact/discover/graph_rewrite.hpp"
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
  if (p.alpha != up.problem.alpha) return std::string("the gate and up GEMMs scale their products differently");
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

// The down projection reading `hidden` (its only reader, a fact.gemm taking it as A) with its
// greedily grown epilogue; adds its roles and "_mlp" to `name`. nullopt when there is none.
std::optional<GemmChain> down_projection(const RuleContext& context, const graph::ValueId& hidden,
                                         std::map<std::string, graph::ValueId>& roles, std::string& name) {
  const graph::Graph& g = context.graph;
  if (!single_use(g, hidden)) return std::nullopt;
  const graph::Node* reader = g.consumers(hidden).front();
  if (reader->target != "fact.gemm" || tensor_args(*reader).front() != hidden) return std::nullopt;
  GemmChain down = gemm_chain_from_node(g, *reader);
  absorb_epilogue(g, down, EpilogueOptions{.claimed = &context.claimed});
  roles["down_weight"] = down.roles.at("weight");
  roles["output"] = down.output;
  if (down.roles.count("residual")) roles["residual"] = down.roles.at("residual");
  name += "_mlp";
  return down;
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
  std::optional<GemmChain> down = down_projection(context, up.output, roles, name);

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
      result.match.derived.insert(result.match.derived.begin(), weight);
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

// --- the fused projection: gate, up = linear(x, W).chunk(2, -1) ----------------------------------

Pattern chunked_pattern() {
  const Pattern gemm = Pattern::op({"fact.gemm"}).as("gemm");
  const Pattern gate_piece = Pattern::op({"aten.chunk"}, {gemm}).as("gate_piece");
  const Pattern gate_act = Pattern::op({"fact.activation", "fact.gelu_tanh", "fact.gelu_erf"}, {gate_piece})
                               .where(is_gate_activation)
                               .as("gate_act");
  const Pattern up_piece = Pattern::op({"aten.chunk"}, {gemm}).as("up_piece");
  return Pattern::op({"aten.mul"}, {gate_act, up_piece}).commutative().as("product");
}

// The halves [index·I, (index+1)·I) of `value`'s first dim, gate's then up's, interleaved row by
// row (stack on dim 1, then the two first dims merged): shape {2I, rest...}.
DerivedOperand interleaved_halves(const graph::Graph& g, const std::string& id, const std::string& what,
                                  const graph::ValueId& value, int64_t half, int gate_index) {
  const graph::TensorDesc& desc = g.value(value).desc;
  DerivedOperand d;
  d.value = std::string(kDerivedPrefix) + id + "." + what;
  d.from = {value};
  ProgramBuilder program;
  const std::string gate = program.slice(source_ref(0), 0, gate_index * half, (gate_index + 1) * half);
  const std::string up = program.slice(source_ref(0), 0, (1 - gate_index) * half, (2 - gate_index) * half);
  const std::string stacked = program.stack({gate, up}, 1);
  d.shape = desc.shape;
  program.reshape(stacked, d.shape);
  d.ops = std::move(program.ops);
  d.dtype = desc.dtype;
  d.purpose = "gate and up halves of the fused projection's " + what.substr(8) +
              " interleaved row by row (one GEMM, glu epilogue)";
  return d;
}

// Why the fused projection cannot run as one gated GEMM, or nullopt.
std::optional<std::string> chunked_unsupported(const graph::Graph& g, const GemmChain& c,
                                               const graph::Node& chunk, const graph::ValueId& product) {
  const GemmProblem& p = c.problem;
  if (!is_16bit(p.a.dtype) || p.b.dtype != p.a.dtype || p.d.dtype != p.a.dtype)
    return "dtype " + std::string(graph::dtype_name(p.a.dtype)) + ": the glu kernel writes bf16/fp16";
  if (p.batch != 1 || p.outer_batch != 1) return std::string("a batched projection");
  if (p.epilogue.size() > 1 || (p.epilogue.size() == 1 && (p.epilogue[0].kind != EpilogueStep::Kind::Bias ||
                                                           p.epilogue[0].value != 1.0)))
    return std::string("the projection has more than a bias");
  const graph::TensorDesc& out = g.value(c.output).desc;
  if (out.rank() < 1 || !out.is_contiguous() || out.shape.back() != p.n || p.n % 2 != 0)
    return std::string("the projection's output is not a dense [.., 2I] tensor");
  const graph::Arg* chunks = detail::argument(chunk, 1, "chunks");
  const graph::Arg* dim = detail::argument(chunk, 2, "dim");
  const auto chunk_count = chunks ? detail::number_constant(*chunks) : std::nullopt;
  const auto chunk_dim = dim ? detail::number_constant(*dim) : std::optional<double>(0.0);
  if (!chunk_count || *chunk_count != 2 || !chunk_dim ||
      (*chunk_dim != -1 && *chunk_dim != static_cast<double>(out.rank() - 1)))
    return std::string("not two halves of the last dim");
  std::vector<graph::ValueId> operands{p.b.value};
  if (!p.epilogue.empty()) operands.push_back(p.epilogue[0].operand);
  for (const auto& id : operands) {
    const graph::Value& v = g.value(id);
    if (v.kind != graph::ValueKind::Parameter && v.kind != graph::ValueKind::Buffer &&
        v.kind != graph::ValueKind::Constant)
      return "'" + id + "' is computed by the graph (interleaving needs a parameter)";
    if (!v.desc.is_contiguous() || v.desc.shape.empty() || v.desc.shape.front() != p.n)
      return "'" + id + "' is not a contiguous tensor of 2I rows";
  }
  if (p.b.layout != Layout::ColumnMajor || p.b.ld != p.k) return std::string("the weight is not an nn.Linear weight");
  const graph::TensorDesc& hidden = g.value(product).desc;
  if (!hidden.is_contiguous() || hidden.shape.back() != p.n / 2 || hidden.dtype != p.a.dtype)
    return std::string("the product is not a dense [.., I] tensor of the operands' dtype");
  return std::nullopt;
}

std::optional<RuleResult> match_swiglu_chunked(const RuleContext& context, const graph::Node&,
                                               const Binding& binding) {
  const graph::Graph& g = context.graph;
  const graph::NodeId chunk_id = binding.nodes.at("gate_piece");
  if (binding.nodes.at("up_piece") != chunk_id) return std::nullopt;  // the halves of one chunk
  const graph::Node& chunk = *g.node(chunk_id);
  if (chunk.outputs.size() != 2) return std::nullopt;
  const graph::ValueId& gate_piece = binding.values.at("gate_piece");
  const graph::ValueId& up_piece = binding.values.at("up_piece");
  if (gate_piece == up_piece) return std::nullopt;
  const int gate_index = chunk.outputs[0] == gate_piece ? 0 : 1;
  const graph::ValueId product = binding.values.at("product");

  GemmChain c = gemm_chain_from_node(g, *g.node(binding.nodes.at("gemm")));
  const graph::Node& act = *g.node(binding.nodes.at("gate_act"));
  if (chunked_unsupported(g, c, chunk, product)) return std::nullopt;  // the GEMM rule takes it
  // The activation: the node's kind as absorb_epilogue spells steps (silu, gelu_tanh, gelu_erf).
  Activation activation = Activation::SiLU;
  if (act.target == "fact.gelu_tanh") activation = Activation::GeluTanh;
  if (act.target == "fact.gelu_erf") activation = Activation::GeluErf;

  const int64_t half = c.problem.n / 2;
  std::vector<DerivedOperand> derived{
      interleaved_halves(g, product, "gate_up_weight", c.problem.b.value, half, gate_index)};
  GemmProblem& p = c.problem;
  p.b.value = derived[0].value;
  if (!p.epilogue.empty()) {
    derived.push_back(interleaved_halves(g, product, "gate_up_bias", p.epilogue[0].operand, half, gate_index));
    p.epilogue[0].operand = derived[1].value;
  }
  EpilogueStep glu;
  glu.kind = EpilogueStep::Kind::Glu;
  glu.activation = activation;
  p.epilogue.push_back(glu);
  p.d.value = product;
  p.d.ld = half;
  c.nodes = {binding.nodes.at("gemm"), chunk_id, act.id, binding.nodes.at("product")};
  c.output = product;

  std::string name = activation == Activation::SiLU ? "swiglu_chunked" : "geglu_chunked";
  std::map<std::string, graph::ValueId> roles{{"input", c.roles.at("input")},
                                              {"gate_up_weight", c.roles.at("weight")},
                                              {"hidden", product},
                                              {"output", product}};
  std::vector<GemmChain> chains{c};
  if (auto down = down_projection(context, product, roles, name)) chains.push_back(*down);
  auto result = gemm_rule_result(context, chains, name, "swiglu", roles);
  if (result.match.status != MatchStatus::Accepted) return std::nullopt;
  result.match.derived.insert(result.match.derived.begin(), derived.begin(), derived.end());
  return result;
}

const RuleRegistrar kSwigluChunkedRule{Rule{
    .name = "swiglu_chunked",
    .pattern = "swiglu",
    .priority = 90,
    .has_template = true,
    .root = chunked_pattern(),
    .check = match_swiglu_chunked,
}};

}  // namespace
}  // namespace fact::discover
