// The attention kind's argument image: FactAttentionArgs (attention_abi.h) for a problem, with
// the pointer slots of Q, K, V (operands: the graph values the views are over, with the element
// where each view starts) and O (the result: the graph value the merged heads are written to,
// with the shape and strides the captured graph gives it).
#pragma once
#include "fact/problem/arg_image.hpp"
#include "patterns/attention/attention_abi.h"
#include "patterns/attention/kind/problem.hpp"

namespace fact::attention {

// FactDType of a tensor dtype (FACT_DTYPE_NONE for one the ABI has no name for).
int32_t abi_dtype(DType dtype);
DType dtype_of_abi(int32_t dtype);  // inverse; Unknown for FACT_DTYPE_NONE or an unknown value

// The struct with every pointer NULL: header, sizes, mask, dtype, element strides, scale.
// Throws std::invalid_argument when a view is missing or not rank 4.
FactAttentionArgs attention_args(const AttentionProblem& p);

// The call: operands q/k/v's values (one operand when they share a value), result o's value.
// Throws std::invalid_argument when a view is missing, a value is not in `captured`, a view
// reaches outside its value's memory, or the output value does not hold exactly the output.
ArgImage pack_attention(const AttentionProblem& p, const graph::Graph& captured);

}  // namespace fact::attention
