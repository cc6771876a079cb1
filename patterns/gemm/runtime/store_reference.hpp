// The float64 GPU reference of an epilogue step that writes D itself (ops.def's STORES_D),
// registered from its pattern's runtime/ folder: launch_reference_gemm (reference_gemm.cu)
// computes the steps before it into a dense staging buffer and hands that to the step's store.
// The GEMM's code names no such step.
//
//   const gemm::StoreReferenceRegistrar kStore{{FACT_STEP_<C_NAME>, &check, &launch}};
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "patterns/gemm/runtime/reference_gemm.hpp"

namespace fact::gemm {

struct StoreReference {
  int32_t abi_id;  // FactGemmStepKind
  // Throws runtime::CudaError when the call (its last step this one) cannot be computed.
  void (*check)(const ReferenceParams& params);
  // out from pre: `rows` = m · batch · outer_batch rows of params.n doubles each (the values
  // before the step), out dense with D's columns; launched on `stream`. Returns the launch's
  // error (cudaGetLastError).
  cudaError_t (*launch)(const double* pre, double* out, int64_t rows, const ReferenceParams& params,
                        cudaStream_t stream);
};

// The store registered for a FactGemmStepKind, or nullptr.
const StoreReference* find_store_reference(int32_t abi_id);

struct StoreReferenceRegistrar {
  explicit StoreReferenceRegistrar(StoreReference store);
};

}  // namespace fact::gemm
