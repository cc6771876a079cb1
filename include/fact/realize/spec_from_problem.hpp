// From what discovery found (a GemmProblem) to what realization builds (a KernelSpec).
#pragma once
#include <string_view>

#include "fact/discover/gemm_problem.hpp"
#include "fact/realize/kernel_spec.hpp"

namespace fact::realize {

// The math mode for float32 operands under a run's precision mode: "strict" -> Tf32x3
// (float32-accurate), "tf32" -> Tf32, "native" -> Tf32x3 (native means bf16/fp16 models run
// in their dtype; float32 operands are never lowered silently). 16-bit operands -> Native in
// every mode. Throws std::invalid_argument for an unknown precision or operand dtype.
MathMode math_mode_for(DType operand_dtype, std::string_view precision);

// Largest alignment (in elements, at most 16 bytes' worth) that every leading dimension,
// contiguous extent and batch stride of the operand is a multiple of.
int operand_alignment(const discover::GemmOperand& operand, int64_t rows, int64_t cols,
                      int64_t batch);

// The GEMM kernel spec for `problem` under `precision` ("strict", "tf32", "native"): dtypes,
// layouts, alignments, batching, math mode and epilogue from the problem; tuning fields from
// the GEMM pattern's default configuration for its sizes. Strict float32 problems (Tf32x3)
// get pattern "gemm_f32_strict" and that pattern's first candidate configuration.
//
// Leading Scale steps are folded into alpha at run time (the caller passes problem.alpha times
// their values in FactGemmArgs::alpha) and identity activations are dropped. Throws
// std::invalid_argument when the problem cannot be expressed (a Scale step after another step,
// two bias vectors, two steps reading C, unsupported dtypes or precision).
KernelSpec spec_from_problem(const discover::GemmProblem& problem, std::string_view precision);

}  // namespace fact::realize
