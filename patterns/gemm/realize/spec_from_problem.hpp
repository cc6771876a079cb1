// From what discovery found (a GemmProblem) to what realization builds (a GemmSpec).
#pragma once
#include <string_view>

#include "fact/core/precision.hpp"
#include "patterns/gemm/kind/problem.hpp"
#include "patterns/gemm/realize/spec.hpp"

namespace fact::gemm {

// The math mode for float32 operands under a run's precision mode: Strict -> Tf32x3
// (float32-accurate), Tf32 -> Tf32, Native -> Tf32x3 (native means bf16/fp16 models run
// in their dtype; float32 operands are never lowered silently). 16-bit operands -> Native in
// every mode. Throws std::invalid_argument for an operand dtype without a math mode.
MathMode math_mode_for(DType operand_dtype, core::PrecisionMode precision);

// Largest alignment (in elements, at most 16 bytes' worth) that every leading dimension,
// contiguous extent and batch stride (of both batch modes) of the operand is a multiple of.
int operand_alignment(const GemmOperand& operand, int64_t rows, int64_t cols, int64_t batch,
                      int64_t outer_batch = 1);

// `problem` as its kernel runs it: padded extents and the staged operands' compact strides
// when its rows are not 16-byte aligned (kind/padding.hpp, gemm_padding.h); `problem` itself
// otherwise.
GemmProblem kernel_view(const GemmProblem& problem);

// The GEMM problem class of `problem` under `precision`: dtypes,
// layouts, alignments (of kernel_view(problem)), batching, math mode, and the epilogue as kernel_epilogue() runs it
// (leading scales in alpha, identity activations dropped: the call's argument image is made
// from the same function); the tuning fields hold the GEMM pattern's default configuration
// for its sizes. The pattern field is "gemm"; patterns/gemm_f32_strict re-targets float32
// strict classes to itself. Throws std::invalid_argument when the problem cannot be expressed
// (operand dtypes that differ, an unsupported dtype or precision).
GemmSpec spec_from_problem(const GemmProblem& problem, core::PrecisionMode precision);

}  // namespace fact::gemm
