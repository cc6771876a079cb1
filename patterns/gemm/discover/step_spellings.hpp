// The epilogue steps aten ops spell after a GEMM, read from the op table's aten columns of the
// step rows (patterns/gemm/epilogue/ops.def): the backward ops of activations —
// aten.gelu_backward, aten.threshold_backward at 0, aten.silu_backward — over a dgrad GEMM's
// result, their second tensor the step's M×N operand (the saved forward tensor). The GEMM chain
// (chain.cpp) absorbs them; adding a step row with aten targets is all discovery needs.
#pragma once
#include <string>
#include <vector>

#include "fact/graph/graph.hpp"
#include "patterns/gemm/epilogue/op_table.hpp"

namespace fact::gemm {

// Every aten target a step row names, in table order.
const std::vector<std::string>& spelled_step_targets();

// The first step row (table order) whose aten targets include `node`'s target and whose
// aten_arguments `node`'s arguments after its first two satisfy: each `name=value` given (by
// position from the third, or by name) as that constant, each `[name=value]` so given or absent,
// and no argument the row does not name. nullptr when no row does. Which tensors the first two
// arguments are is the caller's to check.
const StepOp* spelled_step(const graph::Node& node);

}  // namespace fact::gemm
