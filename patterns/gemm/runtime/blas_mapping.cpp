#include "patterns/gemm/runtime/blas_mapping.hpp"

namespace fact::gemm {

using Kind = EpilogueStep::Kind;

ColumnMajorGemm map_to_column_major(const GemmProblem& p) {
  ColumnMajorGemm g;
  g.k = p.k;
  g.ld_out = p.d.ld;
  g.stride_out = p.d.batch_stride;
  if (p.d.layout == Layout::RowMajor) {
    // Dᵀ (N×M) = Bᵀ·Aᵀ. A row-major B read column-major is already Bᵀ; likewise A.
    g.first_is_b = true;
    g.m = p.n;
    g.n = p.m;
    g.transpose_first = p.b.layout == Layout::ColumnMajor;
    g.transpose_second = p.a.layout == Layout::ColumnMajor;
    g.ld_first = p.b.ld;
    g.ld_second = p.a.ld;
    g.stride_first = p.b.batch_stride;
    g.stride_second = p.a.batch_stride;
  } else {
    // D (M×N) = A·B. A column-major A is A itself; a row-major one reads as Aᵀ.
    g.first_is_b = false;
    g.m = p.m;
    g.n = p.n;
    g.transpose_first = p.a.layout == Layout::RowMajor;
    g.transpose_second = p.b.layout == Layout::RowMajor;
    g.ld_first = p.a.ld;
    g.ld_second = p.b.ld;
    g.stride_first = p.a.batch_stride;
    g.stride_second = p.b.batch_stride;
  }
  return g;
}

static LtEpilogue combine(bool bias, Activation act) {
  switch (act) {
    case Activation::ReLU: return bias ? LtEpilogue::ReluBias : LtEpilogue::Relu;
    case Activation::GeluTanh: return bias ? LtEpilogue::GeluBias : LtEpilogue::Gelu;
    default: return bias ? LtEpilogue::Bias : LtEpilogue::Default;
  }
}

LtEpiloguePlan plan_cublaslt_epilogue(const GemmProblem& p) {
  LtEpiloguePlan plan;
  bool bias = false, residual = false;
  Activation act = Activation::Identity;
  bool has_act = false;
  size_t consumed = 0;
  for (size_t index = 0; index < p.epilogue.size(); ++index) {
    const EpilogueStep& step = p.epilogue[index];
    bool fits = false;
    if (!has_act) {
      switch (step.kind) {
        case Kind::Bias:
          fits = !bias && p.d.layout == Layout::RowMajor && step.value == 1.0;
          if (fits) plan.bias_step = static_cast<int>(index);
          bias = bias || fits;
          break;
        case Kind::Residual:
          fits = !residual && step.operand_dtype == p.d.dtype;
          if (fits) {
            residual = true;
            plan.uses_c = true;
            plan.residual_step = static_cast<int>(index);
            plan.beta = step.value;
          }
          break;
        case Kind::Activation:
          fits = step.activation == Activation::ReLU || step.activation == Activation::GeluTanh ||
                 step.activation == Activation::Identity;
          if (fits) {
            has_act = true;
            act = step.activation;
          }
          break;
        default:
          break;
      }
    }
    if (!fits) break;
    ++consumed;
  }
  plan.fused_steps = consumed;
  plan.epilogue = combine(bias, act);
  return plan;
}

}  // namespace fact::gemm
