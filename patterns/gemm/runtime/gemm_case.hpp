// A GEMM problem the runtime runs: the sizes given on the command line joined with the problem
// class of a kernel's KernelSpec (dtypes, layouts, epilogue), as one discover::GemmProblem with
// compact operands and every epilogue value filled in.
//
// Conventions the runner relies on (they mirror include/fact/runtime/fact_abi.h):
// - Operands are compact: A is M×K with lda = K (row-major) or M (column-major), B is K×N with
//   ldb = N or K, D and the C operand (Residual/Multiply) are M×N in the spec's D layout with
//   ldd = ldc = N or M; batch strides are M·K, K·N and M·N. The bias is one length-N vector
//   shared by every batch.
// - A leading Scale step is the ABI's `alpha` and is folded into GemmProblem::alpha; the ABI has
//   no field for any other Scale step, so a spec with one is rejected.
// - The ABI has one `beta` (every Residual step) and one pair `act_p0, act_p1` (every
//   Activation step), and one C pointer: Residual and Multiply cannot both appear.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "patterns/gemm/kind/problem.hpp"
#include "fact/realize/kernel_spec.hpp"
#include "fact/runtime/precision.hpp"

namespace fact::runtime {

// The sizes and runtime scalars of one run, parsed from "m=4096,n=4096,k=4096,batch=1" with
// optional keys alpha, beta (Residual), p0, p1 (activation parameters).
struct ProblemSize {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  std::optional<double> alpha, beta, p0, p1;
  bool operator==(const ProblemSize&) const = default;
};

// Throws std::invalid_argument naming the offending token: unknown or repeated key, a value
// that is not a number, m/n/k missing or not positive, batch < 1.
ProblemSize parse_problem_size(std::string_view text);
// The canonical text form: parse_problem_size(to_string(s)) == s.
std::string to_string(const ProblemSize& size);

struct GemmCase {
  discover::GemmProblem problem;  // compact operands, leading Scale folded into alpha
  PrecisionMode precision = PrecisionMode::Strict;
  realize::MathMode math = realize::MathMode::Simt;
};

// Builds the case for `spec` at `size`. Default scalars: alpha = beta = 1, leaky ReLU slope
// p0 = 0.01, hardtanh bounds p0 = -1, p1 = 1. Epilogue operands without a dtype take D's.
// Throws std::invalid_argument when the spec cannot be expressed through the ABI (see the
// header comment), when D is not float32/bf16/fp16, or when batch > 1 and the spec is not
// batched.
GemmCase make_gemm_case(const realize::KernelSpec& spec, const ProblemSize& size,
                        PrecisionMode precision);

// Replaces the runtime scalars of `c` (alpha, every Residual beta, every Activation p0/p1)
// with the given ones; used to check that a kernel honours the ABI's scalars.
GemmCase with_scalars(GemmCase c, double alpha, double beta, double p0, double p1);

// Scalars different from every default (negative alpha, beta != 1, non-standard activation
// parameters): a kernel that ignores an ABI scalar computes something else with them.
GemmCase with_adversarial_scalars(GemmCase c);

// The ABI's scalar fields for `problem`: alpha, beta of the Residual step (1 if none), p0/p1 of
// the Activation step (0 if none).
struct AbiScalars {
  float alpha = 1.0f, beta = 1.0f, act_p0 = 0.0f, act_p1 = 0.0f;
};
AbiScalars abi_scalars(const discover::GemmProblem& problem);

// The step that reads the C operand (Residual or Multiply), if any.
const discover::EpilogueStep* c_operand_step(const discover::GemmProblem& problem);
// The Bias step, if any.
const discover::EpilogueStep* bias_step(const discover::GemmProblem& problem);

// `problem` with only its first `steps` epilogue steps (what a partly fused baseline computes).
discover::GemmProblem with_epilogue_prefix(discover::GemmProblem problem, size_t steps);

// Command-line spellings for baseline-only runs, which have no kernel library to read a spec
// from. Dtypes: any graph::parse_dtype name or fp32/f32, bf16, fp16/f16. Epilogue: a comma list
// of "scale", "bias", "residual", "mul" (or "multiply") and activation names ("relu",
// "gelu_tanh", "leaky_relu", "hardtanh", ...: discover::activation_name's spellings);
// empty for a plain GEMM. Layouts: two letters for A and B, 't' = row-major, 'n' =
// column-major ("tn": row-major A, column-major B, i.e. an nn.Linear). Each throws
// std::invalid_argument for an unknown spelling.
graph::DType parse_dtype_token(std::string_view text);
std::vector<realize::EpilogueOpSpec> parse_epilogue_tokens(std::string_view text);
std::pair<discover::Layout, discover::Layout> parse_layout_tokens(std::string_view text);

// The problem class of a baseline-only run: operands of `dtype`, output of `output` (or
// `dtype`), the given epilogue and layouts, accumulation in float32, math as `precision`
// requires (Simt for strict, Tf32 for tf32, Native for bf16/fp16), batched when batch > 1.
realize::KernelSpec baseline_spec(graph::DType dtype, std::optional<graph::DType> output,
                                  const std::vector<realize::EpilogueOpSpec>& epilogue,
                                  std::pair<discover::Layout, discover::Layout> layouts,
                                  PrecisionMode precision, bool batched);

}  // namespace fact::runtime
