// GEMM problems written on a command line (`fact tune --problem ...`, the `fact bench gemm`
// suite): sizes, operand dtype, epilogue and layouts become one GemmProblem with
// compact operands, as discovery would have produced for the same tensors.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "fact/core/precision.hpp"
#include "patterns/gemm/kind/problem.hpp"

namespace fact::gemm {

struct GemmSizes {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t outer_batch = 1;  // a second batch mode ("outer=")
  bool operator==(const GemmSizes&) const = default;
};

// "m=4096,n=4096,k=4096[,batch=8][,outer=2]" (any order; outer: a second batch mode). Throws
// std::invalid_argument naming the bad token: unknown or repeated key, non-integer value, m/n/k
// missing or < 1, batch or outer < 1.
GemmSizes parse_gemm_sizes(std::string_view text);

// "bf16"/"bfloat16", "fp16"/"f16"/"float16", "fp32"/"f32"/"float32". Throws
// std::invalid_argument for anything else.
graph::DType parse_operand_dtype(std::string_view text);

// The precision mode a dtype runs in unless the user says otherwise: float32 -> "strict",
// 16-bit -> "native".
core::PrecisionMode default_precision_for(graph::DType dtype);

// A problem with A, B and D of `dtype` (D row-major), float32 accumulation, alpha 1, and the
// epilogue steps of `epilogue`: a comma list of the epilogue table's step names (ops.def: "bias"
// a length-N vector, "residual" beta 1, "mul", "scale" x0.5, "add" +1.0, a length-M vector step
// a float32 vector, ...), activation names ("relu", "gelu_tanh", ...) and the forms the steps'
// patterns register (step_hooks.hpp); empty or "none" for a plain GEMM.
// `layouts`: two letters for A and B, 't' row-major, 'n' column-major ("tn": an nn.Linear).
// Leading dimensions and batch strides are those of compact tensors ([outer][batch][rows][cols]
// with two batch modes). Throws
// std::invalid_argument for an unknown token.
GemmProblem make_gemm_problem(const GemmSizes& sizes, graph::DType dtype, std::string_view epilogue,
                                        std::string_view layouts = "tn");

}  // namespace fact::gemm
