// Lookup tables from element types to CUTLASS C++ spellings and to the short tokens used in
// kernel names and JSON (one table per enum). Pattern folders keep the tables of their own enums
// (patterns/gemm/realize/cutlass_names.hpp).
//
// `parse_*` throws std::invalid_argument naming the unknown token; `*_cpp` throws
// std::invalid_argument for values that have no CUTLASS spelling.
#pragma once
#include <string_view>

#include "fact/graph/tensor_desc.hpp"

namespace fact::realize {

// Element types. float32 operands are spelled `float`: the sm90 collective builder maps float
// A/B to TF32 tensor-core MMAs.
std::string_view dtype_cpp(graph::DType dtype);      // "cutlass::bfloat16_t", "cutlass::half_t", "float"
std::string_view dtype_token(graph::DType dtype);    // "bf16", "f16", "f32", "f64", "s8", ...
graph::DType parse_dtype_token(std::string_view token);

}  // namespace fact::realize
