// The GEMM kind's float64 host reference: what every GEMM kernel computes, from the same
// FactGemmArgs (with host pointers). Used by fact::launch on the CPU (through
// fact_reference_call) and by tests. Reads every operand as stored (bf16/fp16/fp32/fp64),
// computes in double, rounds once to D's type (round to nearest even).
#pragma once
#include "patterns/gemm/gemm_abi.h"

namespace fact::gemm {

// FACT_OK, or FACT_ERR_INVALID_ARGS for a malformed struct (size, kind, dtypes, layouts, step
// kinds, null pointers, non-positive sizes).
int reference_gemm_host(const FactGemmArgs& args);

}  // namespace fact::gemm
