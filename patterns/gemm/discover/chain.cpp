#include "patterns/gemm/discover/chain.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <stdexcept>

#include "fact/discover/graph_rewrite.hpp"
#include "fact/discover/rule.hpp"
#include "fact/discover/strided_view.hpp"
#include "patterns/gemm/discover/step_spellings.hpp"

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
  operand.outer_batch_stride = o.value("outer_batch_stride", int64_t{0});
  return operand;
}

const graph::TensorDesc& desc_of(const Graph& g, const ValueId& id) { return g.value(id).desc; }

bool is_full_operand(const graph::TensorDesc& d, const graph::TensorDesc& acc) {
  return d.shape == acc.shape && d.is_contiguous() && graph::is_floating(d.dtype);
}

// The batch strides (batch, outer batch) of an epilogue operand `d` whose dims before its last
// two are batch dims: (0, 0) when they are all 1 (one operand for every batch); per batch when
// the accumulator `acc` is laid out like the product ([batch dims][M][N], rows not folded) and
// the operand's batch dims broadcast to the product's (batch_mode_strides).
std::optional<std::pair<int64_t, int64_t>> operand_batch_strides(const GemmChain& chain,
                                                                 const graph::TensorDesc& acc,
                                                                 const graph::TensorDesc& d) {
  const int64_t lead = std::max<int64_t>(d.rank() - 2, 0);
  const std::vector<int64_t> shape(d.shape.begin(), d.shape.begin() + lead);
  const std::vector<int64_t> stride(d.stride.begin(), d.stride.begin() + lead);
  if (std::all_of(shape.begin(), shape.end(), [](int64_t s) { return s == 1; })) {
    return std::make_pair(int64_t{0}, int64_t{0});
  }
  const BatchDims& dims = chain.batch_dims;
  const GemmProblem& p = chain.problem;
  const int64_t r = acc.rank();
  if (r != int64_t(dims.shape.size()) + 2 || acc.shape[r - 2] != p.m || acc.shape[r - 1] != p.n ||
      !std::equal(dims.shape.begin(), dims.shape.end(), acc.shape.begin())) {
    return std::nullopt;
  }
  return batch_mode_strides(dims, shape, stride);
}

// A length-N vector along the rows of the output (shape [..., 1, N] or [N]), shared by every
// batch or one per batch: its batch strides.
std::optional<std::pair<int64_t, int64_t>> row_vector_strides(const GemmChain& chain,
                                                              const graph::TensorDesc& acc,
                                                              const graph::TensorDesc& d) {
  const int64_t r = d.rank();
  const int64_t n = chain.problem.n;
  if (r < 1 || d.shape[r - 1] != n || (d.stride[r - 1] != 1 && n != 1)) return std::nullopt;
  if (r >= 2 && d.shape[r - 2] != 1) return std::nullopt;
  if (!graph::is_floating(d.dtype)) return std::nullopt;
  if (r == 1) return std::make_pair(int64_t{0}, int64_t{0});
  return operand_batch_strides(chain, acc, d);
}

// An M×N operand read in place with a leading dimension (row-major: unit stride along N) whose
// batch dims broadcast to the product's (an additive attention mask [1, 1, T, T] or [B, 1, T, T]
// added to [B, H, T, T] scores): its leading dimension and batch strides.
struct MatrixOperand {
  int64_t ld = 0, batch_stride = 0, outer_batch_stride = 0;
};
std::optional<MatrixOperand> broadcast_matrix(const GemmChain& chain, const graph::TensorDesc& acc,
                                              const graph::TensorDesc& d) {
  const int64_t r = d.rank();
  const GemmProblem& p = chain.problem;
  if (r < 2 || !graph::is_floating(d.dtype)) return std::nullopt;
  if (d.shape[r - 2] != p.m || d.shape[r - 1] != p.n) return std::nullopt;
  if (d.stride[r - 1] != 1 && p.n != 1) return std::nullopt;
  const int64_t ld = leading_dimension(p.m, p.n, d.stride[r - 2]);
  if (ld < p.n) return std::nullopt;
  auto strides = operand_batch_strides(chain, acc, d);
  if (!strides) return std::nullopt;
  return MatrixOperand{ld, strides->first, strides->second};
}

// aten.dropout(x, p, train) that returns x: train is a constant false, or p a constant 0, and
// the result has x's dtype and shape.
bool is_identity_dropout(const Graph& g, const Node& node) {
  const graph::Arg* p = detail::argument(node, 1, "p");
  const graph::Arg* train = detail::argument(node, 2, "train");
  const bool evaluating = train != nullptr && train->kind == graph::Arg::Kind::Constant &&
                          train->constant.is_boolean() && !train->constant.get<bool>();
  const bool drops_nothing = p != nullptr && detail::number_constant(*p) == std::optional<double>(0.0);
  if (!evaluating && !drops_nothing) return false;
  const auto args = tensor_args(node);
  if (args.empty() || node.outputs.size() != 1) return false;
  const auto& in = desc_of(g, args.front());
  const auto& out = desc_of(g, node.outputs.front());
  return in.shape == out.shape && in.dtype == out.dtype;
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

// A full M×N operand read like D: row-major, leading dimension N, D's batch strides in both
// batch modes (a contiguous tensor of the output's shape).
void set_full_operand(EpilogueStep& step, const GemmChain& chain) {
  step.operand_ld = chain.problem.n;
  step.operand_batch_stride = chain.problem.d.batch_stride;
  step.operand_outer_batch_stride = chain.problem.d.outer_batch_stride;
}

// How an M×N step operand is read: like D (a contiguous tensor of the output's shape), or in
// place with its own leading dimension and broadcast batch strides (broadcast_matrix); nullopt
// when neither. `full` is then true for the first.
struct StepOperandLayout {
  bool full = false;
  MatrixOperand broadcast;
};
std::optional<StepOperandLayout> step_operand_layout(const Graph& g, const GemmChain& chain, const ValueId& operand) {
  const auto& acc = desc_of(g, chain.output);
  if (is_full_operand(desc_of(g, operand), acc)) return StepOperandLayout{true, {}};
  if (auto broadcast = broadcast_matrix(chain, acc, desc_of(g, operand))) return StepOperandLayout{false, *broadcast};
  return std::nullopt;
}

// Makes `step` read `operand` with `layout` (step_operand_layout's).
void set_matrix_operand(EpilogueStep& step, const GemmChain& chain, const Graph& g, const ValueId& operand,
                        const StepOperandLayout& layout) {
  step.operand = operand;
  step.operand_dtype = desc_of(g, operand).dtype;
  set_full_operand(step, chain);
  if (!layout.full) {
    step.operand_ld = layout.broadcast.ld;
    step.operand_batch_stride = layout.broadcast.batch_stride;
    step.operand_outer_batch_stride = layout.broadcast.outer_batch_stride;
  }
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
    // Dropout that drops nothing (evaluation mode, or p = 0: what `model.eval()` exports between
    // a Linear and its residual add) is the identity: absorbed as no step, so that the chain
    // goes on to the add behind it and the replacement covers the dropout node too.
    r.push_back({"identity_dropout", Pattern::op({"aten.dropout"}, {acc}),
                 [](const Graph& g, const Node& node, const Binding&, GemmChain&, const EpilogueOptions&) {
                   return is_identity_dropout(g, node);
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
                   const auto strides = row_vector_strides(chain, desc_of(g, chain.output), d);
                   if (!strides) return false;
                   EpilogueStep step;
                   step.kind = EpilogueStep::Kind::Bias;
                   step.operand = bias;
                   step.operand_dtype = d.dtype;
                   step.operand_batch_stride = strides->first;
                   step.operand_outer_batch_stride = strides->second;
                   chain.roles[next_role(chain, "bias")] = bias;
                   chain.problem.epilogue.push_back(step);
                   return true;
                 }});
    r.push_back({"residual", Pattern::op({"aten.add", "aten.sub"}, {acc, operand}).commutative(),
                 [](const Graph& g, const Node& node, const Binding& b, GemmChain& chain, const EpilogueOptions&) {
                   const ValueId& residual = b.values.at("operand");
                   if (residual == b.values.at("acc")) return false;
                   const std::optional<StepOperandLayout> layout = step_operand_layout(g, chain, residual);
                   if (!layout) return false;
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
                   set_matrix_operand(step, chain, g, residual, *layout);
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
    // A step the op table spells in aten (step_spellings.hpp): an activation's backward op over
    // a dgrad GEMM's result, its second tensor the step's M×N operand (the saved forward tensor,
    // read in place like a residual).
    r.push_back({"spelled", Pattern::op(spelled_step_targets(), {acc, operand}),
                 [](const Graph& g, const Node& node, const Binding& b, GemmChain& chain, const EpilogueOptions&) {
                   const StepOp* op = spelled_step(node);
                   const ValueId& saved = b.values.at("operand");
                   if (op == nullptr || op->operand != OperandShape::MATRIX || saved == b.values.at("acc"))
                     return false;
                   // the result keeps the output's shape (the operand does not broadcast it)
                   if (desc_of(g, node.outputs.front()).shape != desc_of(g, chain.output).shape) return false;
                   const std::optional<StepOperandLayout> layout = step_operand_layout(g, chain, saved);
                   if (!layout) return false;
                   EpilogueStep step;
                   step.kind = op->kind;
                   set_matrix_operand(step, chain, g, saved, *layout);
                   chain.roles[next_role(chain, "saved")] = saved;
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

int64_t leading_dimension(int64_t outer, int64_t inner, int64_t outer_stride) {
  if (outer != 1) return outer_stride;
  return outer_stride >= inner ? outer_stride : inner;
}

BatchDims batch_dims_of(const Node& gemm) {
  BatchDims dims;
  if (!gemm.attrs.contains("batch_dims")) return dims;
  const json& j = gemm.attrs.at("batch_dims");
  dims.shape = j.at("shape").get<std::vector<int64_t>>();
  dims.modes = j.at("modes").get<std::vector<int>>();
  return dims;
}

std::optional<std::pair<int64_t, int64_t>> batch_mode_strides(const BatchDims& dims,
                                                              const std::vector<int64_t>& shape,
                                                              const std::vector<int64_t>& stride) {
  const size_t nb = dims.shape.size();
  if (dims.modes.size() != nb || stride.size() != shape.size()) return std::nullopt;
  for (size_t i = 0; i + nb < shape.size(); ++i) {
    if (shape[i] != 1) return std::nullopt;  // more batch dims than the product has
  }
  discover::StridedView mode[2];
  for (size_t i = 0; i < nb; ++i) {
    const size_t from_end = nb - i;  // this dim's position counted from the last batch dim
    const bool present = from_end <= shape.size();
    const int64_t size = present ? shape[shape.size() - from_end] : 1;
    const int64_t step = present && size != 1 ? stride[shape.size() - from_end] : 0;
    if (size != 1 && size != dims.shape[i]) return std::nullopt;
    if (dims.modes[i] < 0) {
      if (size != 1 && dims.shape[i] != 1) return std::nullopt;  // varies over rows folded into M
      continue;
    }
    mode[dims.modes[i]].shape.push_back(dims.shape[i]);
    mode[dims.modes[i]].stride.push_back(step);
  }
  const auto inner = discover::collapse_dims(mode[0], 0, mode[0].rank());
  const auto outer = discover::collapse_dims(mode[1], 0, mode[1].rank());
  if (!inner || !outer) return std::nullopt;
  return std::make_pair(*inner, *outer);
}

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
  p.outer_batch = attrs.value("outer_batch", int64_t{1});
  p.alpha = attrs.value("alpha", 1.0);
  p.a = operand_from_attrs(attrs.at("a"));
  p.b = operand_from_attrs(attrs.at("b"));
  p.d.layout = Layout::RowMajor;
  p.d.ld = attrs.at("d").at("ld").get<int64_t>();
  p.d.batch_stride = attrs.at("d").at("batch_stride").get<int64_t>();
  p.d.outer_batch_stride = attrs.at("d").value("outer_batch_stride", int64_t{0});
  p.accumulate = p.a.dtype == graph::DType::Float64 ? graph::DType::Float64 : graph::DType::Float32;
  chain.batch_dims = batch_dims_of(gemm);
  chain.nodes = {gemm.id};
  chain.roles["input"] = p.a.value;
  chain.roles["weight"] = p.b.value;
  chain.unsupported = attrs.value("unsupported", std::string());
  set_output(g, chain, gemm.outputs.front());
  const json& bias = attrs.at("bias");
  // beta = 0 ignores the input (NaN and inf in it included), as torch.addmm does.
  if (!bias.is_null() && bias.value("beta", 1.0) != 0.0) {
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
      // beta · bias[n] (addmm's beta; 1 for linear), one vector per batch or shared.
      step.kind = EpilogueStep::Kind::Bias;
      step.value = beta;
      step.operand_batch_stride = bias.value("batch_stride", int64_t{0});
      step.operand_outer_batch_stride = bias.value("outer_batch_stride", int64_t{0});
      chain.roles["bias"] = step.operand;
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
