#include <array>
#include <sstream>

#include "fact/problem/operand_transform.hpp"
#include "patterns/gemm/discover/chain.hpp"
#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/gemm_abi.h"

namespace fact::gemm {

namespace {

using discover::Match;
using discover::MatchStatus;

using graph::DType;

constexpr int kTmaAlignmentBytes = 16;

bool device_is_usable(const std::string& device) {
  return device.empty() || device == "cpu" || device == "meta" || device.rfind("cuda", 0) == 0;
}

std::optional<std::string> misaligned(const char* what, int64_t value, int64_t align, DType dtype) {
  if (value % align == 0) return std::nullopt;
  std::ostringstream reason;
  reason << what << '=' << value << " not a multiple of " << align << " for " << dtype_label(dtype)
         << " (TMA needs 16-byte aligned rows)";
  return reason.str();
}

// Why the direct-store variant (an unaligned row-major D written without TMA) cannot run `p`,
// or nullopt when it can: bf16/fp16 operands (the native sm90 template; float32 runs on other
// kernels), no step that stores D itself or reads tables (the variant computes the chain per
// element), and one batch mode (the outer mode's launches move D's pointer by an unaligned
// stride, which the entry refuses). Epilogue operands are checked after this, as ever.
std::optional<std::string> direct_store_obstacle(const GemmProblem& p) {
  if (p.a.dtype != DType::BFloat16 && p.a.dtype != DType::Float16) {
    return std::string("an unaligned D is stored without TMA only by bf16/fp16 GEMMs");
  }
  for (const auto& step : kernel_epilogue(p).steps) {
    const StepOp& descriptor = step_op(step.kind);
    if (descriptor.stores_d || descriptor.operand == OperandShape::TABLES) {
      return "an unaligned D is stored without TMA only by a chain computed per element, not "
             "with a " + std::string(descriptor.name) + " step";
    }
  }
  if (p.outer_batch > 1) {
    return std::string("an unaligned D is stored without TMA only by a GEMM with one batch mode");
  }
  return std::nullopt;
}

std::optional<std::string> check_alignment(const GemmProblem& p) {
  const int bytes = graph::dtype_bytes(p.a.dtype);
  if (bytes == 0) return std::nullopt;
  const int64_t align = kTmaAlignmentBytes / bytes;
  const DType t = p.a.dtype;
  // Contiguous extents: K first (the usual culprit), then N, then M.
  if (p.a.layout == Layout::RowMajor || p.b.layout == Layout::ColumnMajor) {
    if (auto r = misaligned("K", p.k, align, t)) return r;
  }
  if (p.b.layout == Layout::RowMajor) {
    if (auto r = misaligned("N", p.n, align, t)) return r;
  }
  if (p.d.layout == Layout::RowMajor) {
    // Only D's rows are unaligned (A and B stay TMA-read: TMA needs aligned strides, not
    // extents): the direct-store variant writes such a D without TMA (space.hpp,
    // stores_d_directly), when nothing else stands in its way.
    if (auto r = misaligned("N", p.n, align, t)) {
      if (auto why = direct_store_obstacle(p)) {
        r->pop_back();  // the closing parenthesis: the obstacle joins the explanation
        return *r + "; " + *why + ")";
      }
    }
  }
  if (p.a.layout == Layout::ColumnMajor) {
    if (auto r = misaligned("M", p.m, align, t)) return r;
  }
  if (auto r = misaligned("lda", p.a.ld, align, t)) return r;
  if (auto r = misaligned("ldb", p.b.ld, align, t)) return r;
  if (p.batch > 1) {
    if (auto r = misaligned("batch stride of A", p.a.batch_stride, align, t)) return r;
    if (auto r = misaligned("batch stride of B", p.b.batch_stride, align, t)) return r;
  }
  if (p.outer_batch > 1) {
    if (auto r = misaligned("outer batch stride of A", p.a.outer_batch_stride, align, t)) return r;
    if (auto r = misaligned("outer batch stride of B", p.b.outer_batch_stride, align, t)) return r;
  }
  // Epilogue operands: biases are read in 16-byte vectors per batch, further M×N operands
  // straight into registers with 16-byte vectors (gemm_epilogue.cuh).
  for (const auto& step : p.epilogue) {
    const int operand_bytes = graph::dtype_bytes(step.operand_dtype);
    if (!reads_operand(step.kind) || operand_bytes == 0) continue;
    const int64_t v = kTmaAlignmentBytes / operand_bytes;
    const std::string what = std::string(epilogue_kind_name(step.kind)) + " operand";
    const DType ot = step.operand_dtype;
    // Only an M×N operand has a leading dimension to align (vectors have none; tables are read
    // element by element).
    if (step_op(step.kind).operand == OperandShape::MATRIX) {
      if (auto r = misaligned((what + " ld").c_str(), step.operand_ld, v, ot)) return r;
    }
    if (p.batch > 1) {
      if (auto r = misaligned((what + " batch stride").c_str(), step.operand_batch_stride, v, ot))
        return r;
    }
    if (p.outer_batch > 1) {
      if (auto r = misaligned((what + " outer batch stride").c_str(),
                              step.operand_outer_batch_stride, v, ot))
        return r;
    }
  }
  return std::nullopt;
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
  for (const auto& chain : chains) {
    m.problems.push_back(to_problem(chain.problem));
    result.claims.insert(result.claims.end(), chain.nodes.begin(), chain.nodes.end());
    if (m.status == MatchStatus::Accepted) {
      if (auto reason = check_gemm(context.graph, chain, context.options)) {
        m.status = MatchStatus::Declined;
        m.reason = *reason;
      }
    }
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
