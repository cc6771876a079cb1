#include <array>
#include <sstream>

#include "fact/problem/operand_transform.hpp"
#include "patterns/gemm/discover/chain.hpp"
#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/kind/padding.hpp"

namespace fact::gemm {

namespace {

using discover::Match;
using discover::MatchStatus;

using graph::DType;

bool device_is_usable(const std::string& device) {
  return device.empty() || device == "cpu" || device == "meta" || device.rfind("cuda", 0) == 0;
}

// Alignment declines nothing any more: a GEMM whose rows are not 16-byte aligned (an unaligned
// K, lda / ldb, batch strides, N or M where an operand is contiguous along them, an epilogue
// operand's ld) runs zero-padded (kind/padding.hpp, gemm_padding.h), an unaligned D of a bf16 /
// fp16 GEMM by the direct-store variant where it can. What padding cannot change: a step that
// reads tables by row and column over padded rows or columns.
std::optional<std::string> check_alignment(const GemmProblem& p) {
  if (graph::dtype_bytes(p.a.dtype) == 0) return std::nullopt;
  if (auto why = padding_obstacle(p)) {
    const padding::Extents e = padded_extents(p);
    std::ostringstream reason;
    reason << "alignment: " << (e.n != p.n ? "N=" + std::to_string(p.n) : "M=" + std::to_string(p.m))
           << " would be padded for TMA's 16-byte rows, but " << *why;
    return reason.str();
  }
  return std::nullopt;
}

// True when every use of `value` (a tensor whose last dimension holds `cols` elements) is a
// graph output, directly or through views that keep the last dimension whole (view, reshape,
// unsqueeze, squeeze, alias, detach whose own last dimension is `cols`, and their uses in turn).
// Such a value may be any strided view whose rows are dense: a reshape that keeps the last
// dimension only regroups whole rows, which the leading dims of [.., M, ld] allow.
bool leaves_graph_whole(const graph::Graph& g, const graph::ValueId& value, int64_t cols, int depth = 0) {
  if (depth > 16) return false;
  for (const graph::Node* user : g.consumers(value)) {
    if (!discover::target_in(*user, {"aten.view", "aten.reshape", "aten._unsafe_view", "aten.unsqueeze",
                           "aten.squeeze", "aten.alias", "aten.detach"}))
      return false;
    if (user->outputs.size() != 1 || !g.has_value(user->outputs[0])) return false;
    const graph::TensorDesc& out = g.value(user->outputs[0]).desc;
    if (out.shape.empty() || out.shape.back() != cols) return false;
    if (!leaves_graph_whole(g, user->outputs[0], cols, depth + 1)) return false;
  }
  return g.is_graph_output(value) || !g.consumers(value).empty();
}

// A GEMM result with padded rows (patterns/gemm/README.md, "Alignment: padding"). The rule: D
// row-major with N * dtype bytes not a multiple of 16 (an LM head's vocabulary of 50257), one
// batch mode, no step that stores D itself or reads tables, D dense as the graph has it, and its
// value flowing only into the graph's outputs (leaves_graph_whole): then D is planned with ld =
// N rounded up to 16 bytes and the call allocates it as a dense [.., M, ld] tensor whose
// [..., :N] view is the value (docs/plan.md, "alloc_shape"). The kernel runs aligned at the
// padded N (B padded once when a weight, by pad_weight_once below; staged per call otherwise)
// and writes the padding columns into the allocation's own padding: nothing staged or copied
// for D. Why: the direct-store variant's element-wise stores took 2.19 ms for GPT-2's LM head on
// an H200 against cuBLAS's 0.88 ms on the padded vocabulary (torch.compile returns a view of its
// padded result the same way). Any other use of D (a softmax over the rows, a flatten, another
// GEMM) reads a dense tensor: D stays as it is (direct store, or staged and copied back).
void pad_result_rows(const graph::Graph& g, const DiscoverOptions& options, GemmProblem& p) {
  if (!options.padded_results || is_derived_value(p.d.value) || !g.has_value(p.d.value)) return;
  const graph::TensorDesc& d = g.value(p.d.value).desc;
  if (!d.is_contiguous() || d.shape.empty() || d.shape.back() != p.d_cols() ||
      d.numel() != p.batches() * p.m * p.d_cols())
    return;
  if (!leaves_graph_whole(g, p.d.value, p.d_cols())) return;
  GemmProblem q = p;
  if (!give_d_padded_rows(q).has_value()) p = std::move(q);
}

// A weight B the plan pads once (a derived operand, operand_transform.hpp's `pad`) instead of
// the entry staging it on every call: B a parameter, buffer or constant read whole (a 2-D
// contiguous value, shared by every batch), whose call would stage it. `p` then reads the
// padded value in place (GemmOperand::padded). nullopt when B stays as it is.
std::optional<DerivedOperand> pad_weight_once(const graph::Graph& g, const graph::ValueId& output,
                                              GemmProblem& p) {
  const GemmPadding pad = gemm_padding(p);
  if (!pad.staged_b() || is_derived_value(p.b.value) || !g.has_value(p.b.value)) return std::nullopt;
  const graph::Value& v = g.value(p.b.value);
  if (v.kind != graph::ValueKind::Parameter && v.kind != graph::ValueKind::Buffer &&
      v.kind != graph::ValueKind::Constant)
    return std::nullopt;
  const bool col = p.b.layout == Layout::ColumnMajor;  // [N, K] (a Linear's weight) or [K, N]
  const std::vector<int64_t> shape = col ? std::vector<int64_t>{p.n, p.k} : std::vector<int64_t>{p.k, p.n};
  if (v.desc.shape != shape || !v.desc.is_contiguous() || p.b.offset != 0 || p.b.ld != shape[1] ||
      (p.batch > 1 && p.b.batch_stride != 0) || (p.outer_batch > 1 && p.b.outer_batch_stride != 0))
    return std::nullopt;
  const padding::Extents e = pad.plan.extents;
  const std::vector<int64_t> padded = col ? std::vector<int64_t>{e.n, e.k} : std::vector<int64_t>{e.k, e.n};
  DerivedOperand d;
  d.value = std::string(kDerivedPrefix) + output + ".padded_weight";
  d.from = {p.b.value};
  ProgramBuilder program;
  std::string x = source_ref(0);
  for (int dim = 0; dim < 2; ++dim) {
    if (padded[dim] != shape[dim]) x = program.pad(x, dim, padded[dim]);
  }
  d.ops = std::move(program.ops);
  d.dtype = v.desc.dtype;
  d.shape = padded;
  std::ostringstream purpose;
  purpose << "weight " << p.b.value << " zero-padded once from [" << shape[0] << ", " << shape[1]
          << "] to [" << padded[0] << ", " << padded[1] << "] (" << padding_summary(p) << ")";
  d.purpose = purpose.str();
  GemmProblem q = p;
  q.b.value = d.value;
  q.b.ld = padded[1];
  q.b.padded = true;
  if (gemm_padding(q).staged_b()) return std::nullopt;
  p = std::move(q);
  return d;
}

}  // namespace

std::string math_mode(DType dtype, core::PrecisionMode precision) {
  if (dtype == DType::BFloat16 || dtype == DType::Float16) return "native";
  if (dtype == DType::Float32 && precision != core::PrecisionMode::Native) {
    return std::string(core::precision_info(precision).float32_math);  // "3xtf32", "tf32"
  }
  return "";
}

std::optional<std::string> check_gemm(const graph::Graph& g, const GemmChain& chain,
                                      const DiscoverOptions& options) {
  const GemmProblem& p = chain.problem;
  if (!chain.unsupported.empty()) return "layout: " + chain.unsupported;
  // x[:, None] * y[None, :] spelled as a matmul (e.g. frequencies times positions).
  if (p.k == 1) return "an outer product (K=1) is not worth a GEMM kernel";
  if (p.a.dtype != p.b.dtype) {
    return "operand dtypes differ (A " + std::string(graph::dtype_name(p.a.dtype)) + ", B " +
           std::string(graph::dtype_name(p.b.dtype)) + ")";
  }
  const DType t = p.a.dtype;
  if (t != DType::BFloat16 && t != DType::Float16 && t != DType::Float32)
    return "dtype " + std::string(graph::dtype_name(t)) + " has no template";
  if (math_mode(t, options.precision).empty()) {
    if (options.precision == core::PrecisionMode::Native) {
      return "a float32 GEMM in a native run stays PyTorch's (precision 'native' runs the "
             "model's bf16/fp16 GEMMs; float32 ones run with --precision strict or tf32)";
    }
    return "float32 GEMMs need --precision strict (3xTF32) or tf32, not '" +
           std::string(core::precision_name(options.precision)) + "'";
  }
  if (p.epilogue.size() > FACT_GEMM_MAX_STEPS) {
    return "epilogue of " + std::to_string(p.epilogue.size()) + " steps (a kernel takes at most " +
           std::to_string(FACT_GEMM_MAX_STEPS) + ")";
  }
  for (const auto& step : p.epilogue) {
    if (!step.operand.empty() && !graph::is_floating(step.operand_dtype)) {
      return "epilogue " + std::string(epilogue_kind_name(step.kind)) + " operand '" + step.operand +
             "' has dtype " + std::string(graph::dtype_name(step.operand_dtype));
    }
  }
  if (!graph::is_floating(p.d.dtype) || p.d.dtype == DType::Float64)
    return "output dtype " + std::string(graph::dtype_name(p.d.dtype)) + " has no template";
  for (const auto& id : {p.a.value, p.b.value, p.d.value}) {
    // A derived operand (operand_transform.hpp) is no graph value: the rule that makes it
    // checks its sources.
    if (is_derived_value(id)) continue;
    const std::string& device = g.value(id).desc.device;
    if (!device_is_usable(device)) return "tensor '" + id + "' is on device '" + device + "', not CUDA";
  }
  return check_alignment(p);
}


RuleResult gemm_rule_result(const RuleContext& context, const std::vector<GemmChain>& chains,
                            std::string rule, std::string pattern,
                            std::map<std::string, graph::ValueId> roles) {
  RuleResult result;
  Match& m = result.match;
  m.rule = std::move(rule);
  m.pattern = std::move(pattern);
  m.status = MatchStatus::Accepted;
  std::vector<std::string> padding;
  for (const auto& chain : chains) {
    GemmProblem problem = chain.problem;
    result.claims.insert(result.claims.end(), chain.nodes.begin(), chain.nodes.end());
    if (m.status == MatchStatus::Accepted) {
      if (auto reason = check_gemm(context.graph, chain, context.options)) {
        m.status = MatchStatus::Declined;
        m.reason = *reason;
      } else {
        // An unaligned D that only leaves the graph gets padded rows; then rows that are not
        // 16-byte aligned run zero-padded: weights padded once here.
        pad_result_rows(context.graph, context.options, problem);
        if (auto weight = pad_weight_once(context.graph, chain.output, problem)) {
          m.derived.push_back(std::move(*weight));
        }
        if (std::string summary = padding_summary(problem); !summary.empty()) {
          padding.push_back(std::move(summary));
        }
      }
    }
    m.problems.push_back(to_problem(problem));
  }
  if (m.status == MatchStatus::Accepted && !padding.empty()) {
    std::string joined;
    for (const auto& s : padding) joined += (joined.empty() ? "" : "; ") + s;
    m.extra["note"] = joined;
  } else {
    m.derived.clear();
  }
  if (!chains.empty()) {
    result.outputs = {chains.back().output};
    m.dtype = chains.front().problem.a.dtype;
    m.roles = roles.empty() ? chains.front().roles : std::move(roles);
    m.extra["precision"] = context.options.precision;
    const std::string math = math_mode(m.dtype, context.options.precision);
    if (!math.empty()) m.extra["math"] = math;
  }
  return result;
}

}  // namespace fact::gemm
