#include "patterns/gemm/kind/abi_names.hpp"

#include "patterns/gemm/epilogue/op_table.hpp"

namespace fact::gemm {

int32_t abi_dtype(graph::DType dtype) {
  switch (dtype) {
    case graph::DType::Float32: return FACT_DTYPE_F32;
    case graph::DType::Float16: return FACT_DTYPE_F16;
    case graph::DType::BFloat16: return FACT_DTYPE_BF16;
    case graph::DType::Float64: return FACT_DTYPE_F64;
    default: return FACT_DTYPE_NONE;
  }
}

int abi_dtype_bytes(int32_t abi_type) {
  switch (abi_type) {
    case FACT_DTYPE_F32: return 4;
    case FACT_DTYPE_F16:
    case FACT_DTYPE_BF16: return 2;
    case FACT_DTYPE_F64: return 8;
    default: return 0;
  }
}

int32_t abi_layout(Layout layout) {
  return layout == Layout::RowMajor ? FACT_ROW_MAJOR : FACT_COLUMN_MAJOR;
}

// Both read ops.def's abi_id column (op_table.hpp).
int32_t abi_step_kind(EpilogueStep::Kind kind) { return step_op(kind).abi_id; }

int32_t abi_activation(Activation activation) { return activation_op(activation).abi_id; }

}  // namespace fact::gemm
