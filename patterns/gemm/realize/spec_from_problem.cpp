#include "patterns/gemm/realize/spec_from_problem.hpp"

#include "patterns/gemm/epilogue/op_table.hpp"

#include <stdexcept>
#include <string>
#include <vector>

#include "patterns/gemm/kind/padding.hpp"
#include "patterns/gemm/realize/cutlass_names.hpp"
#include "patterns/gemm/realize/space.hpp"

namespace fact::gemm {

MathMode math_mode_for(DType operand_dtype, core::PrecisionMode precision) {
  switch (operand_dtype) {
    case DType::BFloat16:
    case DType::Float16:
      return MathMode::Native;
    case DType::Float32:
      return precision == core::PrecisionMode::Tf32 ? MathMode::Tf32 : MathMode::Tf32x3;
    default:
      throw std::invalid_argument("no GEMM math mode for operand dtype " +
                                  std::string(graph::dtype_label(operand_dtype)));
  }
}

int operand_alignment(const GemmOperand& operand, int64_t rows, int64_t cols,
                      int64_t batch, int64_t outer_batch) {
  const int bytes = graph::dtype_bytes(operand.dtype);
  if (bytes <= 0) return 1;
  const int64_t extent = operand.layout == Layout::RowMajor ? cols : rows;
  int alignment = 16 / bytes;
  auto divides_all = [&](int a) {
    return extent % a == 0 && operand.ld % a == 0 &&
           (batch <= 1 || operand.batch_stride % a == 0) &&
           (outer_batch <= 1 || operand.outer_batch_stride % a == 0);
  };
  while (alignment > 1 && !divides_all(alignment)) alignment /= 2;
  return alignment;
}

GemmProblem kernel_view(const GemmProblem& problem) {
  const GemmPadding pad = gemm_padding(problem);
  if (!pad.any()) return problem;
  const FactGemmArgs& a = pad.plan.args;
  GemmProblem view = problem;
  view.m = a.m;
  view.n = a.n;
  view.k = a.k;
  auto set = [](GemmOperand& o, int64_t ld, int64_t batch_stride, int64_t outer_stride) {
    o.ld = ld;
    o.batch_stride = batch_stride;
    o.outer_batch_stride = outer_stride;
  };
  set(view.a, a.lda, a.stride_a, a.outer_stride_a);
  set(view.b, a.ldb, a.stride_b, a.outer_stride_b);
  set(view.d, a.ldd, a.stride_d, a.outer_stride_d);
  return view;
}

GemmSpec spec_from_problem(const GemmProblem& problem, core::PrecisionMode precision) {
  GemmSpec spec;
  spec.pattern = "gemm";
  spec.a_dtype = problem.a.dtype;
  spec.b_dtype = problem.b.dtype;
  spec.d_dtype = problem.d.dtype;
  spec.accumulate = problem.accumulate;
  spec.a_layout = problem.a.layout;
  spec.b_layout = problem.b.layout;
  spec.d_layout = problem.d.layout;
  if (problem.a.dtype != problem.b.dtype) {
    throw std::invalid_argument("operand dtypes differ: " +
                                std::string(graph::dtype_label(problem.a.dtype)) + " and " +
                                std::string(graph::dtype_label(problem.b.dtype)));
  }
  spec.math = math_mode_for(problem.a.dtype, precision);
  spec.batched = problem.batch > 1;
  // The outer batch mode runs as launches whose pointers move by the outer strides: those must
  // keep each operand's alignment too.
  // The alignments of the call the kernel runs: a call whose rows are not 16-byte aligned runs
  // zero-padded (kind/padding.hpp), its staged operands compact and aligned.
  const GemmProblem view = kernel_view(problem);
  spec.align_a = operand_alignment(view.a, view.m, view.k, view.batch, view.outer_batch);
  spec.align_b = operand_alignment(view.b, view.k, view.n, view.batch, view.outer_batch);
  spec.align_d = operand_alignment(view.d, view.m, view.d_cols(), view.batch, view.outer_batch);

  for (const auto& step : kernel_epilogue(problem).steps) {
    EpilogueOpSpec op;
    op.kind = step.kind;
    op.activation = step_op(step.kind).constants == StepConstantsRead::ACTIVATION
                        ? step.activation
                        : Activation::Identity;
    op.operand_dtype = reads_operand(step.kind)
                           ? (step.operand_dtype != DType::Unknown ? step.operand_dtype : problem.d.dtype)
                           : DType::Unknown;
    spec.epilogue.push_back(op);
  }
  apply_default_config(spec, problem.m, problem.n, problem.k, problem.batch);
  return spec;
}

}  // namespace fact::gemm
