#include "patterns/gemm/kind/padding.hpp"

#include <exception>
#include <sstream>

#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/kind/pack.hpp"

namespace fact::gemm {

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

GemmPadding gemm_padding(const GemmProblem& p) {
  GemmPadding out;
  // A D given padded rows (GemmOperand::padded) is written in place at the padded N by the
  // aligned kernel, never by the direct-store variant.
  out.d_direct = !p.d.padded && !direct_store_obstacle(p).has_value();
  try {
    out.plan = padding::plan(gemm_args(p), out.d_direct, nullptr);
  } catch (const std::exception&) {
    // No argument struct (more steps than a call carries, a dtype without an ABI code): no
    // call either, nothing to pad.
    out.plan = padding::Plan{};
    out.plan.extents = {p.m, p.n, p.k};
  }
  return out;
}

padding::Extents padded_extents(const GemmProblem& p) { return gemm_padding(p).plan.extents; }

std::string padding_summary(const GemmProblem& p) {
  const GemmPadding pad = gemm_padding(p);
  if (pad.plan.status != FACT_OK) return "";
  if (!pad.any()) return "";
  std::ostringstream s;
  const char* sep = "";
  auto extent = [&](const char* name, int64_t from, int64_t to) {
    if (from == to) return;
    s << sep << name << " padded " << from << "\u2192" << to;
    sep = ", ";
  };
  extent("K", p.k, pad.plan.extents.k);
  extent("N", p.n, pad.plan.extents.n);
  extent("M", p.m, pad.plan.extents.m);
  const bool extents_padded =
      pad.plan.extents.k != p.k || pad.plan.extents.n != p.n || pad.plan.extents.m != p.m;
  if (!extents_padded) {
    // Only strides: name what is copied and its strides.
    auto staged = [&](const char* name, const char* ld, const GemmOperand& o) {
      s << sep << name << " staged (" << ld << '=' << o.ld;
      if (p.batch > 1) s << ", batch stride " << o.batch_stride;
      if (p.outer_batch > 1) s << ", outer batch stride " << o.outer_batch_stride;
      s << ')';
      sep = ", ";
    };
    if (pad.staged_a()) staged("A", "lda", p.a);
    if (pad.staged_b()) staged("B", "ldb", p.b);
    if (pad.staged_d()) staged("D", "ldd", p.d);
    if (std::string(sep).empty()) s << "epilogue operands staged (unaligned strides)";
  }
  return s.str();
}

std::optional<std::string> give_d_padded_rows(GemmProblem& p) {
  if (p.d.padded) return std::string("D already has padded rows");
  if (p.d.layout != Layout::RowMajor || p.d.offset != 0)
    return std::string("D is not a row-major matrix at its value's start");
  if (p.outer_batch > 1) return std::string("two batch modes");
  for (const auto& step : kernel_epilogue(p).steps) {
    const StepOp& op = step_op(step.kind);
    if (op.stores_d || op.operand == OperandShape::TABLES)
      return "a " + std::string(op.name) + " step stores D itself or reads tables by row and column";
  }
  const int64_t bytes = graph::dtype_bytes(p.d.dtype);
  const int64_t cols = p.d_cols();
  if (bytes <= 0) return std::string("D's dtype has no size");
  if ((cols * bytes) % padding::kAlignBytes == 0) return std::string("D's rows are aligned");
  if (p.d.ld != cols || (p.batch > 1 && p.d.batch_stride != p.m * cols))
    return std::string("D is not dense");
  GemmProblem q = p;
  q.d.padded = true;
  q.d.ld = padding::round_up(cols, padding::kAlignBytes / bytes);
  q.d.batch_stride = p.batch > 1 ? p.m * q.d.ld : 0;
  const GemmPadding pad = gemm_padding(q);
  if (pad.plan.status != FACT_OK) return std::string("the call cannot run padded");
  // A run padded along M (a column-major A) would write rows past M: D staged as before.
  if (pad.staged_d() || pad.plan.extents.m != p.m) return std::string("the run is padded along M");
  p = std::move(q);
  return std::nullopt;
}

std::optional<std::string> padding_obstacle(const GemmProblem& p) {
  const GemmPadding pad = gemm_padding(p);
  if (pad.plan.status == FACT_OK) return std::nullopt;
  for (const auto& step : kernel_epilogue(p).steps) {
    if (step_op(step.kind).operand == OperandShape::TABLES) {
      return "a " + std::string(step_op(step.kind).name) +
             " step reads tables by row and column, which padding M or N would move";
    }
  }
  return std::string("the call cannot run padded");
}

}  // namespace fact::gemm
