// A GEMM problem as one call: FactGemmArgs (gemm_abi.h) with its address slots (docs/plan.md).
#pragma once
#include "fact/graph/graph.hpp"
#include "fact/problem/arg_image.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/kind/problem.hpp"

namespace fact::gemm {

// FactGemmArgs for `p` with every address NULL; the epilogue as kernel_epilogue(p) runs it.
FactGemmArgs gemm_args(const GemmProblem& p);

// The argument image of `p`: operands A, B and every epilogue operand (graph values, deduplicated),
// one result D with the shape and strides `captured` gives it. Throws std::invalid_argument when
// D is not a dense row-major tensor of every batch's M×N matrix in `captured` (batches in
// either mode order), or an operand has no graph value.
ArgImage pack_gemm(const GemmProblem& p, const graph::Graph& captured);

}  // namespace fact::gemm
