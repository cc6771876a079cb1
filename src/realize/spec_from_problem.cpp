#include "fact/realize/spec_from_problem.hpp"

#include <stdexcept>
#include <string>
#include <vector>

#include "fact/realize/cutlass_names.hpp"
#include "patterns/gemm/space.hpp"
#include "patterns/gemm_f32_strict/render_strict.hpp"

namespace fact::realize {

MathMode math_mode_for(DType operand_dtype, std::string_view precision) {
  if (precision != "strict" && precision != "tf32" && precision != "native") {
    throw std::invalid_argument("unknown precision mode '" + std::string(precision) +
                                "' (strict, tf32, native)");
  }
  switch (operand_dtype) {
    case DType::BFloat16:
    case DType::Float16:
      return MathMode::Native;
    case DType::Float32:
      return precision == "tf32" ? MathMode::Tf32 : MathMode::Tf32x3;
    default:
      throw std::invalid_argument("no GEMM math mode for operand dtype " +
                                  std::string(dtype_token(operand_dtype)));
  }
}

int operand_alignment(const discover::GemmOperand& operand, int64_t rows, int64_t cols,
                      int64_t batch) {
  const int bytes = graph::dtype_bytes(operand.dtype);
  if (bytes <= 0) return 1;
  const int64_t extent = operand.layout == Layout::RowMajor ? cols : rows;
  int alignment = 16 / bytes;
  auto divides_all = [&](int a) {
    return extent % a == 0 && operand.ld % a == 0 &&
           (batch <= 1 || operand.batch_stride % a == 0);
  };
  while (alignment > 1 && !divides_all(alignment)) alignment /= 2;
  return alignment;
}

KernelSpec spec_from_problem(const discover::GemmProblem& problem, std::string_view precision) {
  KernelSpec spec;
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
                                std::string(dtype_token(problem.a.dtype)) + " and " +
                                std::string(dtype_token(problem.b.dtype)));
  }
  spec.math = math_mode_for(problem.a.dtype, precision);
  spec.batched = problem.batch > 1;
  spec.align_a = operand_alignment(problem.a, problem.m, problem.k, problem.batch);
  spec.align_b = operand_alignment(problem.b, problem.k, problem.n, problem.batch);
  spec.align_d = operand_alignment(problem.d, problem.m, problem.n, problem.batch);

  bool leading = true;
  int biases = 0, sources = 0;
  for (const auto& step : problem.epilogue) {
    using Kind = EpilogueStep::Kind;
    if (step.kind == Kind::Scale) {
      if (!leading) {
        throw std::invalid_argument("a Scale step after another epilogue step has no run-time "
                                    "argument (only leading scales fold into alpha)");
      }
      continue;
    }
    leading = false;
    if (step.kind == Kind::Activation && step.activation == Activation::Identity) continue;
    if (step.kind == Kind::Bias && ++biases > 1) {
      throw std::invalid_argument("two bias steps: a kernel reads one bias vector");
    }
    if ((step.kind == Kind::Residual || step.kind == Kind::Multiply) && ++sources > 1) {
      throw std::invalid_argument("two steps read an M x N operand: a kernel reads C once");
    }
    EpilogueOpSpec op;
    op.kind = step.kind;
    op.activation = step.kind == Kind::Activation ? step.activation : Activation::Identity;
    op.operand_dtype = step.kind == Kind::Activation || step.kind == Kind::Scale
                           ? DType::Unknown
                           : (step.operand_dtype != DType::Unknown ? step.operand_dtype
                                                                   : problem.d.dtype);
    spec.epilogue.push_back(op);
  }
  if (spec.math == MathMode::Tf32x3) {
    // Strict float32: the gemm_f32_strict pattern's kernels, its first candidate as default.
    // When none fits (an epilogue it cannot fuse) the spec keeps the pattern and rendering
    // reports why.
    spec.pattern = "gemm_f32_strict";
    const std::vector<KernelSpec> candidates = f32_strict_candidates(spec);
    if (!candidates.empty()) return candidates.front();
  }
  gemm::apply_default_config(spec, problem.m, problem.n, problem.k, problem.batch);
  return spec;
}

}  // namespace fact::realize
