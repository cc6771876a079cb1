// The GEMM problem's enums as gemm_abi.h spells them (the argument image and the host
// reference read the same table).
#pragma once
#include <cstdint>

#include "fact/graph/tensor_desc.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/kind/problem.hpp"

namespace fact::gemm {

// FACT_DTYPE_* of a dtype; FACT_DTYPE_NONE for a dtype the ABI does not name.
int32_t abi_dtype(graph::DType dtype);
int abi_dtype_bytes(int32_t abi_type);  // 0 for NONE / unknown
int32_t abi_layout(Layout layout);
int32_t abi_step_kind(EpilogueStep::Kind kind);
int32_t abi_activation(Activation activation);

}  // namespace fact::gemm
