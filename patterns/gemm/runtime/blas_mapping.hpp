// How a FACT GEMM (row- or column-major operands) maps onto cuBLAS/cuBLASLt, which are
// column-major, and which part of an epilogue cuBLASLt can fuse. Pure logic, no CUDA.
#pragma once
#include <cstddef>
#include <cstdint>

#include "patterns/gemm/kind/problem.hpp"

namespace fact::gemm {

// Arguments of one column-major GEMM Out = op(First) · op(Second), Out m×n with ld_out.
// A row-major D (M×N, ld N) is, read column-major, Dᵀ (N×M): then First = B, Second = A and
// cuBLAS computes Dᵀ = Bᵀ·Aᵀ. A column-major D is computed directly: First = A, Second = B.
struct ColumnMajorGemm {
  bool first_is_b = true;       // First holds the B buffer (row-major D) or the A buffer
  bool transpose_first = false;  // op(First) = Firstᵀ
  bool transpose_second = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t ld_first = 0, ld_second = 0, ld_out = 0;
  int64_t stride_first = 0, stride_second = 0, stride_out = 0;
  // Stored (column-major) shape of First and Second, as cuBLASLt matrix layouts want them.
  int64_t first_rows() const { return transpose_first ? k : m; }
  int64_t first_cols() const { return transpose_first ? m : k; }
  int64_t second_rows() const { return transpose_second ? n : k; }
  int64_t second_cols() const { return transpose_second ? k : n; }
};

ColumnMajorGemm map_to_column_major(const GemmProblem& problem);

// cuBLASLt's fused epilogue: D = act(alpha·A·B + beta·C + bias), act ∈ {none, ReLU, GELU
// (tanh approximation)}, bias broadcast along the rows of its column-major output.
enum class LtEpilogue { Default, Bias, Relu, ReluBias, Gelu, GeluBias };

struct LtEpiloguePlan {
  LtEpilogue epilogue = LtEpilogue::Default;
  bool uses_c = false;  // a Residual step folded into beta·C
  double beta = 0.0;
  int bias_step = -1;      // the step whose operand is the bias (-1: none)
  int residual_step = -1;  // the step whose operand is C (-1: none)
  size_t fused_steps = 0;  // the prefix of problem.epilogue cuBLASLt computes
};

// The longest prefix of `problem.epilogue` (in kernel form: leading scales are alpha) that
// cuBLASLt computes in one call: additive steps (one Bias, one Residual whose C has D's dtype)
// in any order, then at most one ReLU or tanh-GELU, nothing after it. A Bias needs a row-major
// D (the bias runs along N, cuBLASLt's rows of Dᵀ) and a multiplier (value) of 1. Scale, AddScalar, Multiply, a second bias or
// residual and other activations end the prefix.
LtEpiloguePlan plan_cublaslt_epilogue(const GemmProblem& problem);

}  // namespace fact::gemm
