// The row_scale step's formula (epilogue_steps.def's HostFormula column), in the form of
// patterns/gemm/epilogue/op_formulas.h, which includes it: the float64 host and GPU references.
#pragma once
#include "patterns/gemm/epilogue/op_formulas.h"

namespace fact::gemm::ops {

struct RowScaleStep {  // operand: scale[m]
  template <class T> FACT_HD static T apply(T x, T scale, const StepConstants<T>&) { return x * scale; }
};

}  // namespace fact::gemm::ops
