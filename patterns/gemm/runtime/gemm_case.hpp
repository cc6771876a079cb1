// A GEMM problem the runtime runs: the problem's sizes and constants joined with the problem
// class of a kernel's GemmSpec (dtypes, layouts, batching, the epilogue's step kinds), as one
// GemmProblem with compact operands and every epilogue constant filled in.
//
// Conventions the runtime relies on (they mirror gemm_abi.h, ABI v2):
// - Operands are compact: A is M×K with lda = K (row-major) or M (column-major), B is K×N with
//   ldb = N or K, D and every M×N epilogue operand (Residual, Multiply) are M×N in the spec's D
//   layout with ld = N or M; batch strides are M·K, K·N and M·N, and with two batch modes the
//   outer strides batch·M·K, batch·K·N and batch·M·N ([outer][batch][rows][cols]). Each bias is
//   one length-N vector shared by every batch (batch strides 0). Every operand step has its own
//   buffer.
// - The epilogue is in the form a kernel runs it (kernel_epilogue: leading scales are alpha,
//   identity activations dropped): step i of the case is FactGemmStep i of the call.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "fact/core/precision.hpp"
#include "patterns/gemm/kind/problem.hpp"
#include "patterns/gemm/realize/spec.hpp"

namespace fact::gemm {

using core::PrecisionMode;

struct GemmCase {
  GemmProblem problem;  // compact operands, kernel-form epilogue with its constants
  PrecisionMode precision = PrecisionMode::Strict;
  MathMode math = MathMode::Simt;
};

// The case `spec` computes at the sizes of `problem` (m, n, k, batch, outer_batch): dtypes, layouts, batching
// and the epilogue's step kinds, activations and operand dtypes come from the spec; alpha from
// kernel_epilogue(problem); each step's constants from the problem's kernel epilogue when its
// steps have the spec's kinds and activations one for one, else defaults (scale 0.5, add 1,
// residual beta 1, leaky slope 0.01, hardtanh [-1, 1]: make_gemm_problem's stand-ins).
// Throws std::invalid_argument when the spec cannot run the problem: batch > 1 for a kernel not
// built batched, a dtype other than float32/bfloat16/float16, an epilogue longer than
// FACT_GEMM_MAX_STEPS, or a spec epilogue that is not in kernel form (a leading Scale step).
GemmCase make_gemm_case(const GemmSpec& spec, const GemmProblem& problem, PrecisionMode precision);

// Every constant replaced by one unlike any default and unlike every other step's (alpha -1.25;
// for step i: scale 0.625 + i/16, add -0.375 - i/16, residual beta 1.375 + i/16, bias
// multiplier -1.5 - i/16, leaky slope 0.2 + i/16, hardtanh [-0.6 + i/32, 0.4 + i/32]): a kernel that ignores a step's constant, or
// reads another step's, computes something else with them. With `vary_bias_multiplier` false
// the bias steps keep their multipliers (for a launcher that fuses a bias only at 1: cuBLASLt).
GemmCase with_adversarial_constants(GemmCase c, bool vary_bias_multiplier = true);

// `problem` with its two batch modes as one (batch · outer_batch batches, outer_batch 1) when
// every operand's outer stride is batch times its batch stride (the compact operands of a case):
// what a library baseline with one batch mode runs. Throws std::invalid_argument otherwise.
GemmProblem as_one_batch_mode(GemmProblem problem);

// `problem` with only its first `steps` epilogue steps (what a partly fused baseline computes).
GemmProblem with_epilogue_prefix(GemmProblem problem, size_t steps);

// The spec of a baseline-only run (no kernel library): spec_from_problem's class of `problem`
// under `precision` (math simt for strict float32: cuBLAS SGEMM), pattern "baseline".
GemmSpec baseline_spec(const GemmProblem& problem, PrecisionMode precision);

// Empty when `spec` computes at least as accurately as `mode` requires; otherwise the reason
// it does not (e.g. a TF32 kernel under "strict"). FACT never lowers precision silently.
std::optional<std::string> precision_mismatch(const GemmSpec& spec, PrecisionMode mode);

}  // namespace fact::gemm
