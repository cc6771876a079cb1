// patterns/rmsnorm: an RMSNorm folded into the projections that read it, a
// prologue rule (Rule::attach, rule.hpp) that runs after the GEMM-family rules (gemm_epilogue,
// swiglu, rope) over their matches. It recognizes Llama's RMSNorm in the canonical graph,
//
//   x_f = x.to(float32)                              (absent when x is float32)
//   rstd = rsqrt(mean(x_f ** 2 | x_f * x_f, dim=-1, keepdim=True) + eps)
//   y = g * (x_f * rstd).to(x.dtype)                 (either operand order of both muls)
//
// and Gemma's, whose weight multiplies in float32 before the cast and is offset by a constant:
//
//   y = ((x_f * rstd) * (w.to(float32) + c)).to(x.dtype)      (c = 1: g = 1 + w)
//
// and, when every reader of y is a GEMM of an accepted match that reads y as its A operand,
// rewrites each such GEMM to read x instead: B becomes the derived operand W·diag(g) (computed
// once at plan time in float32 and rounded to W's dtype, operand_transform.hpp) and the
// epilogue gains a first RowScale step by rstd[m] (FACT_STEP_ROW_SCALE), so
//   GEMM(y, W) = rstd[m] · Σ_k x[m, k] · g[k] · W[n, k]
// exactly up to rounding. The rsqrt stays in the graph (the remainder computes it with one read
// of x); the matches are merged into one, which also claims the norm's last three nodes. See
// README.md for the declines and the tolerance.
#include <algorithm>
#include <map>
#include <set>

#include "fact/discover/graph_rewrite.hpp"
#include "fact/discover/rule.hpp"
#include "fact/problem/operand_transform.hpp"
#include "patterns/gemm/discover/chain.hpp"
#include "patterns/gemm/gemm_abi.h"

namespace fact::discover {
using namespace fact::gemm;  // NOLINT: the GEMM pattern's problem types
namespace {

using graph::Graph;
using graph::Node;
using graph::ValueId;

const Node* producer_of(const Graph& g, const ValueId& v, std::initializer_list<std::string_view> targets) {
  const Node* n = g.producer(v);
  if (n == nullptr) return nullptr;
  for (auto t : targets) {
    if (target_is(*n, t)) return n;
  }
  return nullptr;
}

bool is_stored(const graph::Value& v) {
  return v.kind == graph::ValueKind::Parameter || v.kind == graph::ValueKind::Buffer ||
         v.kind == graph::ValueKind::Constant;
}

bool is_16bit(graph::DType t) { return t == graph::DType::BFloat16 || t == graph::DType::Float16; }

// One recognized RMSNorm y = g * cast(x_f * rstd). `declined` says why it cannot be folded when
// the structure is an RMSNorm but something about it is not (the reduction's dim).
struct RmsNorm {
  ValueId x;           // the pre-norm input (x_f's source, or x_f itself without a cast)
  ValueId rstd;        // rsqrt(mean(x²) + eps): [..., 1] float32, stays in the graph
  ValueId gamma;       // the norm's weight g; for Gemma's g = w.to(float32) + c, the stored w
  double gamma_offset = 0.0;  // that c (0: g itself)
  ValueId normalized;  // y, what the projections read
  double eps = 0.0;
  std::vector<graph::NodeId> tail;  // x_f * rstd, its cast (if any), g * ...: claimed when fused
  std::vector<graph::NodeId> head;  // x_f's cast, the square, mean, + eps, rsqrt (reports only)
  std::optional<std::string> declined;
};

// x_f · x_f or x_f ** 2: x_f, or nothing.
std::optional<ValueId> squared_value(const Graph& g, const ValueId& v, const Node** square) {
  const Node* n = producer_of(g, v, {"aten.pow", "aten.mul"});
  if (n == nullptr) return std::nullopt;
  const auto args = tensor_args(*n);
  *square = n;
  if (target_is(*n, "aten.mul")) {
    if (args.size() == 2 && args[0] == args[1]) return args[0];
    return std::nullopt;
  }
  const graph::Arg* exponent = detail::argument(*n, 1, "exponent");
  if (args.size() != 1 || exponent == nullptr || detail::number_constant(*exponent) != std::optional<double>(2.0))
    return std::nullopt;
  return args[0];
}

// The RMSNorm whose weight multiply is `anchor`, or nothing when it is not one.
std::optional<RmsNorm> rms_norm_of(const Graph& g, const Node& anchor) {
  const auto args = tensor_args(anchor);
  if (args.size() != 2 || anchor.outputs.size() != 1) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    RmsNorm norm;
    norm.gamma = args[1 - side];
    norm.normalized = anchor.outputs.front();
    ValueId scaled = args[side];
    const Node* cast = producer_of(g, scaled, {"aten.to", "aten._to_copy"});
    if (cast != nullptr) scaled = tensor_args(*cast).front();
    const Node* scale = producer_of(g, scaled, {"aten.mul"});
    if (scale == nullptr) continue;
    const auto factors = tensor_args(*scale);
    if (factors.size() != 2) continue;
    for (int r = 0; r < 2; ++r) {
      const Node* rsqrt = producer_of(g, factors[r], {"aten.rsqrt"});
      if (rsqrt == nullptr) continue;
      const ValueId x_f = factors[1 - r];
      const Node* add_eps = producer_of(g, tensor_args(*rsqrt).front(), {"fact.add_scalar"});
      if (add_eps == nullptr) continue;
      const Node* mean = producer_of(g, tensor_args(*add_eps).front(), {"aten.mean"});
      if (mean == nullptr) continue;
      const Node* square = nullptr;
      if (squared_value(g, tensor_args(*mean).front(), &square) != x_f) continue;
      norm.rstd = factors[r];
      norm.eps = add_eps->attrs.value("value", 0.0);
      norm.x = x_f;
      const Node* widen = producer_of(g, x_f, {"aten.to", "aten._to_copy"});
      if (widen != nullptr) {
        norm.x = tensor_args(*widen).front();
        norm.head.push_back(widen->id);
      }
      norm.head.insert(norm.head.end(), {square->id, mean->id, add_eps->id, rsqrt->id});
      norm.tail.push_back(scale->id);
      if (cast != nullptr) norm.tail.push_back(cast->id);
      norm.tail.push_back(anchor.id);
      if (cast == nullptr) {
        // Gemma: the weight multiplies in float32 and the product is cast back to x's dtype.
        const auto readers = g.consumers(norm.normalized);
        if (readers.size() == 1 && !g.is_graph_output(norm.normalized) && readers.front()->outputs.size() == 1 &&
            (target_is(*readers.front(), "aten.to") || target_is(*readers.front(), "aten._to_copy") ||
             target_is(*readers.front(), "aten.type_as")) &&
            tensor_args(*readers.front()).front() == norm.normalized) {
          norm.normalized = readers.front()->outputs.front();
          norm.tail.push_back(readers.front()->id);
        }
      }
      // g = w.to(float32) + c (Gemma's 1 + w), computed in forward from a stored w.
      if (const Node* offset = producer_of(g, norm.gamma, {"fact.add_scalar"}); offset != nullptr) {
        ValueId source = tensor_args(*offset).front();
        if (const Node* widen_w = producer_of(g, source, {"aten.to", "aten._to_copy"}); widen_w != nullptr &&
            g.value(source).desc.dtype == graph::DType::Float32) {
          source = tensor_args(*widen_w).front();
        }
        if (is_stored(g.value(source))) {
          norm.gamma = source;
          norm.gamma_offset = offset->attrs.value("value", 0.0);
        }
      }
      // The mean over the last dim, kept: one scale per row of the projections' A.
      const int64_t rank = g.value(x_f).desc.rank();
      const graph::Arg* dims = detail::argument(*mean, 1, "dim");
      const graph::Arg* keep = detail::argument(*mean, 2, "keepdim");
      std::optional<int64_t> dim;
      if (dims != nullptr && dims->kind == graph::Arg::Kind::Constant) {
        const nlohmann::json& c = dims->constant;
        const nlohmann::json* only = c.is_array() ? (c.size() == 1 ? &c[0] : nullptr) : &c;
        if (only != nullptr && only->is_number_integer()) dim = only->get<int64_t>();
      }
      const bool kept = keep != nullptr && keep->kind == graph::Arg::Kind::Constant &&
                        keep->constant.is_boolean() && keep->constant.get<bool>();
      if (!dim || (*dim != -1 && *dim != rank - 1)) {
        norm.declined = "the mean of squares runs over " +
                        (dims ? "dims " + dims->constant.dump() : std::string("every dim")) +
                        ", not the last: the row scale is one value per row of the projection";
      } else if (!kept) {
        norm.declined = std::string("the mean of squares drops the reduced dim (keepdim=False): the "
                                    "scale does not broadcast over the row");
      }
      return norm;
    }
  }
  return std::nullopt;
}

// Which rule made a result (for reports and the merged match's roles).
std::string rule_of(const RuleResult& r) { return r.match.rule; }

RuleResult report(const Graph& g, const RmsNorm& norm, const std::string& reason, graph::DType dtype) {
  RuleResult result;
  Match& m = result.match;
  m.rule = "rmsnorm";
  m.pattern = "rmsnorm";
  m.status = MatchStatus::Declined;
  m.reason = reason;
  m.dtype = dtype;
  m.roles = {{"input", norm.x}, {"rstd", norm.rstd}, {"norm_weight", norm.gamma}, {"output", norm.normalized}};
  std::vector<graph::NodeId> nodes = norm.head;
  nodes.insert(nodes.end(), norm.tail.begin(), norm.tail.end());
  m.nodes = detail::origin_of(g, nodes);
  m.extra["eps"] = norm.eps;
  result.outputs = {norm.normalized};
  return result;
}

// B·diag(g): the projection weight `weight` ([N, K], the B operand read column-major) with
// column k scaled by g[k], computed in float32 and rounded once to the weight's dtype. When the
// weight is itself derived (SwiGLU's interleaved gate/up weight, the rope's permuted rows) its
// program is extended, so the fold applies to what the kernel reads.
DerivedOperand folded_weight(const Graph& g, const std::string& id, const ValueId& weight,
                             const DerivedOperand* derived, const ValueId& gamma, double gamma_offset) {
  DerivedOperand d;
  d.value = std::string(kDerivedPrefix) + id + ".rmsnorm_weight";
  ProgramBuilder program;
  std::string w;
  if (derived != nullptr) {
    d.from = derived->from;
    program.ops = derived->ops;
    w = "%" + std::to_string(program.ops.size() - 1);
    d.dtype = derived->dtype;
    d.shape = derived->shape;
  } else {
    d.from = {weight};
    w = source_ref(0);
    d.dtype = g.value(weight).desc.dtype;
    d.shape = g.value(weight).desc.shape;
  }
  d.from.push_back(gamma);
  std::string scale = source_ref(d.from.size() - 1);
  if (d.dtype != graph::DType::Float32) w = program.to(w, graph::DType::Float32);
  if (g.value(gamma).desc.dtype != graph::DType::Float32) scale = program.to(scale, graph::DType::Float32);
  if (gamma_offset != 0.0) scale = program.add_scalar(scale, gamma_offset);  // Gemma's 1 + w, in float32
  const std::string product = program.mul(w, scale);
  if (d.dtype != graph::DType::Float32) program.to(product, d.dtype);
  d.ops = std::move(program.ops);
  d.purpose = std::string("projection weight with the RMSNorm weight folded into its columns (W·diag(") +
              (gamma_offset != 0.0 ? "w + " + nlohmann::json(gamma_offset).dump() : std::string("g")) +
              "), float32 product rounded once)" +
              std::string(derived ? "; " + derived->purpose : "");
  return d;
}

bool reads_value(const GemmProblem& p, const ValueId& v) {
  if (p.a.value == v || p.b.value == v) return true;
  return std::any_of(p.epilogue.begin(), p.epilogue.end(),
                     [&](const EpilogueStep& s) { return s.operand == v || s.operand2 == v; });
}

std::optional<PrologueResult> attach_rmsnorm(const RuleContext& context, const Node& anchor, const Binding&,
                                             const std::vector<RuleResult>& results) {
  const Graph& g = context.graph;
  std::optional<RmsNorm> found = rms_norm_of(g, anchor);
  if (!found) return std::nullopt;
  const RmsNorm& norm = *found;
  const graph::TensorDesc& x = g.value(norm.x).desc;
  const graph::TensorDesc& y = g.value(norm.normalized).desc;
  const graph::TensorDesc& rstd = g.value(norm.rstd).desc;
  const graph::TensorDesc& gamma = g.value(norm.gamma).desc;
  auto decline = [&](const std::string& reason) {
    return std::optional<PrologueResult>(PrologueResult{report(g, norm, reason, x.dtype), {}});
  };
  if (norm.declined) return decline(*norm.declined);
  if (!is_16bit(x.dtype)) {
    return decline("dtype " + std::string(graph::dtype_name(x.dtype)) +
                   ": the fold runs bf16/fp16 projections (the strict float32 kernels have no "
                   "row-scale step)");
  }
  if (y.dtype != x.dtype) {
    return decline("the normalized value is " + std::string(graph::dtype_name(y.dtype)) + ", not the input's " +
                   std::string(graph::dtype_name(x.dtype)) +
                   " (the weight multiplies after a cast to another dtype): the projection would not read x");
  }
  if (!is_stored(g.value(norm.gamma))) {
    return decline("norm weight '" + norm.gamma +
                   "' is computed by the graph (folding it into the projection weights needs a parameter, "
                   "or a parameter plus a constant)");
  }
  const int64_t k = x.rank() > 0 ? x.shape.back() : 0;
  if (gamma.shape != std::vector<int64_t>{k} || !gamma.is_contiguous()) {
    return decline("norm weight '" + norm.gamma + "' " + gamma.to_string() + " is not one value per feature [" +
                   std::to_string(k) + "]");
  }
  if (x.shape != y.shape || !x.is_contiguous() || !y.is_contiguous()) {
    return decline("the input " + x.to_string() + " is not a contiguous tensor of the normalized value's shape");
  }
  const int64_t rows = k > 0 ? x.numel() / k : 0;
  if (rstd.dtype != graph::DType::Float32 || !rstd.is_contiguous() || rstd.numel() != rows) {
    return decline("rstd " + rstd.to_string() + " is not one contiguous float32 value per row");
  }
  // The float32 normalized value and its cast feed only the weight multiply.
  for (size_t i = 0; i + 1 < norm.tail.size(); ++i) {
    const ValueId& inner = g.node(norm.tail[i])->outputs.front();
    if (!single_use(g, inner)) {
      return decline("the normalized value before the weight ('" + inner +
                     "') is read elsewhere: the norm would still be computed");
    }
  }
  if (g.is_graph_output(norm.normalized)) {
    return decline("the normalized value is an output of the graph: the norm would still be computed");
  }

  // Every reader of y belongs to an accepted GEMM-family match.
  std::vector<size_t> absorbed;
  for (const Node* reader : g.consumers(norm.normalized)) {
    std::optional<size_t> owner;
    for (size_t i = 0; i < results.size() && !owner; ++i) {
      const RuleResult& r = results[i];
      if (r.match.status == MatchStatus::Accepted &&
          std::find(r.claims.begin(), r.claims.end(), reader->id) != r.claims.end()) {
        owner = i;
      }
    }
    if (!owner) {
      return decline("the normalized value is also read by '" + reader->id + "' (" + reader->target +
                     "), which no accepted GEMM match replaces: the norm would still be computed");
    }
    if (std::find(absorbed.begin(), absorbed.end(), *owner) == absorbed.end()) absorbed.push_back(*owner);
  }
  if (absorbed.empty()) return std::nullopt;
  std::sort(absorbed.begin(), absorbed.end());

  RuleResult merged;
  Match& m = merged.match;
  m.pattern = "rmsnorm";
  m.status = MatchStatus::Accepted;
  m.dtype = x.dtype;
  m.roles = {{"input", norm.x}, {"rstd", norm.rstd}, {"norm_weight", norm.gamma}, {"normalized", norm.normalized}};
  merged.claims = norm.tail;
  nlohmann::json fused_into = nlohmann::json::array();
  std::vector<DerivedOperand> derived;
  int folded = 0;
  std::map<ValueId, ValueId> folded_from;  // a weight (or derived weight) -> its folded operand
  for (size_t index : absorbed) {
    const RuleResult& r = results[index];
    fused_into.push_back(rule_of(r));
    merged.claims.insert(merged.claims.end(), r.claims.begin(), r.claims.end());
    merged.outputs.insert(merged.outputs.end(), r.outputs.begin(), r.outputs.end());
    for (const auto& [role, value] : r.match.roles) {
      std::string name = rule_of(r) + "." + role;
      for (int n = 2; m.roles.count(name); ++n) name = rule_of(r) + "_" + std::to_string(n) + "." + role;
      m.roles[name] = value;
    }
    derived.insert(derived.end(), r.match.derived.begin(), r.match.derived.end());
    if (m.extra.empty()) m.extra = r.match.extra;
    for (const Problem& problem : r.match.problems) {
      if (problem.kind != kKindName) {
        return decline("match '" + rule_of(r) + "' reading the normalized value runs a " + problem.kind +
                       " call (only GEMMs take the fold)");
      }
      GemmProblem p = gemm_problem_of(problem);
      if (!reads_value(p, norm.normalized)) {
        m.problems.push_back(problem);
        continue;
      }
      if (p.a.value != norm.normalized || p.b.value == norm.normalized ||
          std::any_of(p.epilogue.begin(), p.epilogue.end(), [&](const EpilogueStep& s) {
            return s.operand == norm.normalized || s.operand2 == norm.normalized;
          })) {
        return decline("match '" + rule_of(r) + "' reads the normalized value other than as a projection's input");
      }
      if (p.a.layout != Layout::RowMajor || p.a.ld != k || p.a.offset != 0 || p.k != k || p.m != rows ||
          p.batch != 1 || p.outer_batch != 1) {
        return decline("match '" + rule_of(r) + "' reads the normalized value as a " + p.shape_string() +
                       " operand, not as the rows of one projection");
      }
      const auto existing = std::find_if(derived.begin(), derived.end(),
                                         [&](const DerivedOperand& d) { return d.value == p.b.value; });
      const bool is_derived = existing != derived.end();
      const std::vector<int64_t> weight_shape =
          is_derived ? existing->shape : g.value(p.b.value).desc.shape;
      if (!is_derived && !is_stored(g.value(p.b.value))) {
        return decline("weight '" + p.b.value + "' is computed by the graph (folding the norm weight needs a parameter)");
      }
      if (p.b.layout != Layout::ColumnMajor || p.b.ld != k || p.b.offset != 0 ||
          weight_shape != std::vector<int64_t>{p.n, k} ||
          (!is_derived && !g.value(p.b.value).desc.is_contiguous())) {
        return decline("weight '" + p.b.value + "' is not a contiguous [N, K] nn.Linear weight");
      }
      if (p.epilogue.size() + 1 > FACT_GEMM_MAX_STEPS) {
        return decline("match '" + rule_of(r) + "' has a full epilogue (no room for the row scale)");
      }
      const DerivedOperand weight =
          folded_weight(g, p.d.value, p.b.value, is_derived ? &*existing : nullptr, norm.gamma, norm.gamma_offset);
      folded_from[p.b.value] = weight.value;
      p.a.value = norm.x;
      p.b.value = weight.value;
      EpilogueStep row_scale;
      row_scale.kind = EpilogueStep::Kind::RowScale;
      row_scale.operand = norm.rstd;
      row_scale.operand_dtype = rstd.dtype;
      p.epilogue.insert(p.epilogue.begin(), row_scale);
      derived.push_back(weight);
      m.problems.push_back(to_problem(p));
      ++folded;
    }
  }
  for (auto& [role, value] : m.roles) {
    if (const auto it = folded_from.find(value); it != folded_from.end() && is_derived_value(value)) value = it->second;
  }
  // Keep the derived operands some call still reads (a folded weight replaces the one it extends).
  std::set<ValueId> read;
  for (const Problem& problem : m.problems) {
    const GemmProblem p = gemm_problem_of(problem);
    read.insert({p.a.value, p.b.value});
    for (const auto& s : p.epilogue) read.insert({s.operand, s.operand2});
  }
  for (const auto& d : derived) {
    if (read.count(d.value) && std::none_of(m.derived.begin(), m.derived.end(),
                                            [&](const DerivedOperand& e) { return e.value == d.value; })) {
      m.derived.push_back(d);
    }
  }
  m.rule = "rmsnorm_" + (absorbed.size() == 1 ? rule_of(results[absorbed.front()])
                                              : std::to_string(absorbed.size()) + "_matches");
  m.extra["eps"] = norm.eps;
  m.extra["fused_into"] = fused_into;
  m.extra["folded_projections"] = folded;
  return PrologueResult{std::move(merged), absorbed};
}

// Opt-in (README.md, "Status"): the gain is small (the remainder still reads x once for rstd)
// and measured once, timed one after the other, so by default the norm stays PyTorch's and the
// projections plain GEMMs.
constexpr const char* kOptInReason =
    "fused rmsnorm is opt-in (name it: fact.optimize(..., patterns=['rmsnorm', ...]) / fact plan --patterns "
    "rmsnorm,... ; a selection composes only the patterns it names, so list the others too, e.g. "
    "['rmsnorm', 'gemm', 'attention', 'swiglu', 'mlp']): its gain is measured once, 4% on the Llama block on an "
    "H200 (bench/results/blocks-nvidia-h200-2026-11-26-llama-rmsnorm.json), inside that run's spread";

const RuleRegistrar kRmsNormRule{Rule{
    .name = "rmsnorm",
    .pattern = "rmsnorm",
    .priority = 50,
    .has_template = true,
    .root = Pattern::op({"aten.mul"}),
    .opt_in = true,
    .opt_in_reason = kOptInReason,
    .attach = attach_rmsnorm,
}};

}  // namespace
}  // namespace fact::discover
