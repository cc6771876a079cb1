#include "patterns/gemm/kind/abi_names.hpp"

#include "patterns/gemm/epilogue/op_table.hpp"

namespace fact::gemm {

int32_t abi_dtype(graph::DType dtype) { return core::to_fact_dtype(dtype); }

int abi_dtype_bytes(int32_t abi_type) { return core::dtype_bytes(core::from_fact_dtype(abi_type)); }

int32_t abi_layout(Layout layout) {
  return layout == Layout::RowMajor ? FACT_ROW_MAJOR : FACT_COLUMN_MAJOR;
}

// Both read ops.def's abi_id column (op_table.hpp).
int32_t abi_step_kind(EpilogueStep::Kind kind) { return step_op(kind).abi_id; }

int32_t abi_activation(Activation activation) { return activation_op(activation).abi_id; }

}  // namespace fact::gemm
