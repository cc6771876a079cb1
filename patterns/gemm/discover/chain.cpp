#include "patterns/gemm/discover/chain.hpp"

#include <functional>
#include <limits>
#include <stdexcept>

#include "fact/discover/graph_rewrite.hpp"
#include "fact/discover/rule.hpp"

namespace fact::gemm {

namespace {

using discover::Binding;
using discover::Pattern;
using discover::single_use;
using discover::target_is;
using discover::tensor_args;
namespace detail = discover::detail;

using graph::Graph;
using graph::Node;
using graph::ValueId;
using nlohmann::json;

GemmOperand operand_from_attrs(const json& o) {
  GemmOperand operand;
  operand.value = o.at("value").get<std::string>();
  operand.dtype = graph::parse_dtype(o.at("dtype").get<std::string>());
  operand.layout = o.at("layout").get<std::string>() == "col" ? Layout::ColumnMajor : Layout::RowMajor;
  operand.ld = o.at("ld").get<int64_t>();
  operand.batch_stride = o.at("batch_stride").get<int64_t>();
  return operand;
}

const graph::TensorDesc& desc_of(const Graph& g, const ValueId& id) { return g.value(id).desc; }

bool is_row_vector(const graph::TensorDesc& d, int64_t n) {
  const int64_t r = d.rank();
  if (r < 1 || d.shape[r - 1] != n || (d.stride[r - 1] != 1 && n != 1)) return false;
  for (int64_t i = 0; i + 1 < r; ++i) {
    if (d.shape[i] != 1) return false;
  }
  return true;
}

bool is_full_operand(const graph::TensorDesc& d, const graph::TensorDesc& acc) {
  return d.shape == acc.shape && d.is_contiguous() && graph::is_floating(d.dtype);
}

std::optional<double> alpha_of(const Graph& g, const Node& node) {
  const graph::Arg* alpha = detail::argument(node, 2, "alpha");
  if (alpha == nullptr) return 1.0;
  return detail::scalar_operand(g, *alpha);
}

// "bias", then "bias_2", "bias_3", ... for further steps of the same kind.
std::string next_role(const GemmChain& chain, const std::string& base) {
  if (!chain.roles.count(base)) return base;
  for (int i = 2;; ++i) {
    const std::string name = base + "_" + std::to_string(i);
    if (!chain.roles.count(name)) return name;
  }
}

// A full M×N operand read like D: row-major, leading dimension N, one matrix per batch.
void set_full_operand(EpilogueStep& step, const GemmChain& chain) {
  step.operand_ld = chain.problem.n;
  step.operand_batch_stride = chain.problem.batch > 1 ? chain.problem.m * chain.problem.n : 0;
}

// One kind of epilogue step: a pattern rooted at the reader of the accumulator (role "acc",
// pre-bound) and how it becomes a step. `build` returns false when the match is not that step.
struct StepRule {
  const char* name;
  Pattern pattern;
  std::function<bool(const Graph&, const Node&, const Binding&, GemmChain&, const EpilogueOptions&)> build;
};

const std::vector<StepRule>& step_rules() {
  static const std::vector<StepRule> rules = [] {
    const Pattern acc = Pattern::any().as("acc");
    const Pattern operand = Pattern::any().as("operand");
    std::vector<StepRule> r;
    r.push_back({"activation", Pattern::op({"fact.activation", "fact.gelu_tanh", "fact.gelu_erf"}, {acc}),
                 [](const Graph&, const Node& node, const Binding&, GemmChain& chain, const EpilogueOptions&) {
                   EpilogueStep step;
                   step.kind = EpilogueStep::Kind::Activation;
                   if (node.target == "fact.gelu_tanh") {
                     step.activation = Activation::GeluTanh;
                   } else if (node.target == "fact.gelu_erf") {
                     step.activation = Activation::GeluErf;
                   } else {
                     auto act = parse_activation(node.attrs.at("kind").get<std::string>());
                     if (!act) return false;
                     step.activation = *act;
                     step.p0 = node.attrs.value("p0", 0.0);
                     step.p1 = node.attrs.value("p1", 0.0);
                     if (node.attrs.contains("p0") && node.attrs["p0"].is_null())
                       step.p0 = -std::numeric_limits<double>::infinity();
                     if (node.attrs.contains("p1") && node.attrs["p1"].is_null())
                       step.p1 = std::numeric_limits<double>::infinity();
                   }
                   chain.problem.epilogue.push_back(step);
                   return true;
                 }});
    r.push_back({"scale", Pattern::op({"fact.scale"}, {acc}),
                 [](const Graph&, const Node& node, const Binding&, GemmChain& chain, const EpilogueOptions&) {
                   EpilogueStep step;
                   step.kind = EpilogueStep::Kind::Scale;
                   step.value = node.attrs.at("value").get<double>();
                   chain.problem.epilogue.push_back(step);
                   return true;
                 }});
    r.push_back({"add_scalar", Pattern::op({"fact.add_scalar"}, {acc}),
                 [](const Graph&, const Node& node, const Binding&, GemmChain& chain, const EpilogueOptions&) {
                   EpilogueStep step;
                   step.kind = EpilogueStep::Kind::AddScalar;
                   step.value = node.attrs.at("value").get<double>();
                   chain.problem.epilogue.push_back(step);
                   return true;
                 }});
    r.push_back({"bias", Pattern::op({"aten.add"}, {acc, operand}).commutative(),
                 [](const Graph& g, const Node& node, const Binding& b, GemmChain& chain, const EpilogueOptions&) {
                   const ValueId& bias = b.values.at("operand");
                   if (bias == b.values.at("acc")) return false;
                   if (alpha_of(g, node) != std::optional<double>(1.0)) return false;
                   const auto& d = desc_of(g, bias);
                   if (!is_row_vector(d, chain.problem.n) || !graph::is_floating(d.dtype)) return false;
                   EpilogueStep step;
                   step.kind = EpilogueStep::Kind::Bias;
                   step.operand = bias;
                   step.operand_dtype = d.dtype;
                   chain.roles[next_role(chain, "bias")] = bias;
                   chain.problem.epilogue.push_back(step);
                   return true;
                 }});
    r.push_back({"residual", Pattern::op({"aten.add", "aten.sub"}, {acc, operand}).commutative(),
                 [](const Graph& g, const Node& node, const Binding& b, GemmChain& chain, const EpilogueOptions&) {
                   const ValueId& residual = b.values.at("operand");
                   if (residual == b.values.at("acc")) return false;
                   if (!is_full_operand(desc_of(g, residual), desc_of(g, chain.output))) return false;
                   auto alpha = alpha_of(g, node);
                   if (!alpha) return false;
                   const bool acc_first = tensor_args(node).front() == b.values.at("acc");
                   double value = *alpha;
                   if (!acc_first && *alpha != 1.0) return false;  // r + alpha*acc
                   if (target_is(node, "aten.sub")) {
                     if (acc_first) {
                       value = -value;  // acc - alpha*r
                     } else {
                       // r - acc: negate the accumulator, then add r.
                       EpilogueStep negate;
                       negate.kind = EpilogueStep::Kind::Scale;
                       negate.value = -1.0;
                       chain.problem.epilogue.push_back(negate);
                     }
                   }
                   EpilogueStep step;
                   step.kind = EpilogueStep::Kind::Residual;
                   step.value = value;
                   step.operand = residual;
                   step.operand_dtype = desc_of(g, residual).dtype;
                   set_full_operand(step, chain);
                   chain.roles[next_role(chain, "residual")] = residual;
                   chain.problem.epilogue.push_back(step);
                   return true;
                 }});
    r.push_back({"multiply", Pattern::op({"aten.mul"}, {acc, operand}).commutative(),
                 [](const Graph& g, const Node&, const Binding& b, GemmChain& chain, const EpilogueOptions& options) {
                   const ValueId& other = b.values.at("operand");
                   if (!options.allow_multiply || other == b.values.at("acc")) return false;
                   if (!is_full_operand(desc_of(g, other), desc_of(g, chain.output))) return false;
                   EpilogueStep step;
                   step.kind = EpilogueStep::Kind::Multiply;
                   step.operand = other;
                   step.operand_dtype = desc_of(g, other).dtype;
                   set_full_operand(step, chain);
                   chain.roles[next_role(chain, "multiplier")] = other;
                   chain.problem.epilogue.push_back(step);
                   return true;
                 }});
    return r;
  }();
  return rules;
}

void set_output(const Graph& g, GemmChain& chain, const ValueId& out) {
  chain.output = out;
  chain.problem.d.value = out;
  chain.problem.d.dtype = desc_of(g, out).dtype;
  chain.roles["output"] = out;
}

}  // namespace

GemmChain gemm_chain_from_node(const Graph& g, const Node& gemm) {
  if (gemm.target != "fact.gemm" || gemm.outputs.size() != 1)
    throw std::invalid_argument("node '" + gemm.id + "' is not a fact.gemm");
  const json& attrs = gemm.attrs;
  GemmChain chain;
  GemmProblem& p = chain.problem;
  p.m = attrs.at("m").get<int64_t>();
  p.n = attrs.at("n").get<int64_t>();
  p.k = attrs.at("k").get<int64_t>();
  p.batch = attrs.at("batch").get<int64_t>();
  p.alpha = attrs.value("alpha", 1.0);
  p.a = operand_from_attrs(attrs.at("a"));
  p.b = operand_from_attrs(attrs.at("b"));
  p.d.layout = Layout::RowMajor;
  p.d.ld = attrs.at("d").at("ld").get<int64_t>();
  p.d.batch_stride = attrs.at("d").at("batch_stride").get<int64_t>();
  p.accumulate = p.a.dtype == graph::DType::Float64 ? graph::DType::Float64 : graph::DType::Float32;
  chain.nodes = {gemm.id};
  chain.roles["input"] = p.a.value;
  chain.roles["weight"] = p.b.value;
  chain.unsupported = attrs.value("unsupported", std::string());
  set_output(g, chain, gemm.outputs.front());
  const json& bias = attrs.at("bias");
  if (!bias.is_null()) {
    EpilogueStep step;
    step.operand = bias.at("value").get<std::string>();
    step.operand_dtype = graph::parse_dtype(bias.at("dtype").get<std::string>());
    const std::string broadcast = bias.at("broadcast").get<std::string>();
    const double beta = bias.value("beta", 1.0);
    if (broadcast == "full") {
      step.kind = EpilogueStep::Kind::Residual;
      step.value = beta;
      set_full_operand(step, chain);
      chain.roles["residual"] = step.operand;
    } else {
      step.kind = EpilogueStep::Kind::Bias;
      chain.roles["bias"] = step.operand;
      if (beta != 1.0 && chain.unsupported.empty())
        chain.unsupported = "addmm with beta=" + std::to_string(beta) + " on a vector bias";
    }
    p.epilogue.push_back(step);
  }
  return chain;
}

void absorb_epilogue(const Graph& g, GemmChain& chain, const EpilogueOptions& options) {
  while (single_use(g, chain.output) && chain.problem.epilogue.size() < options.max_steps) {
    const Node* reader = g.consumers(chain.output).front();
    if (reader->outputs.size() != 1) return;
    if (options.claimed && options.claimed->count(reader->id)) return;
    bool absorbed = false;
    for (const auto& rule : step_rules()) {
      Binding seed;
      seed.values["acc"] = chain.output;
      auto binding = rule.pattern.match_node(*reader, g, seed);
      if (!binding) continue;
      if (rule.build(g, *reader, *binding, chain, options)) {
        chain.nodes.push_back(reader->id);
        set_output(g, chain, reader->outputs.front());
        absorbed = true;
        break;
      }
    }
    if (!absorbed) return;
  }
}

}  // namespace fact::gemm
