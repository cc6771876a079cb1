// Device loads of the float64 reference GEMM (reference_gemm.cu) and of the reference stores
// pattern folders register (store_reference.hpp): an element of a MatrixView in double.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "patterns/gemm/runtime/reference_gemm.hpp"

namespace fact::gemm {

__device__ inline double load_element(const void* data, ElementType type, int64_t i) {
  switch (type) {
    case ElementType::F32: return static_cast<double>(static_cast<const float*>(data)[i]);
    case ElementType::BF16:
      return static_cast<double>(__bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]));
    case ElementType::F16:
      return static_cast<double>(__half2float(static_cast<const __half*>(data)[i]));
  }
  return 0.0;
}

// Element (r, c) of batch l of outer batch o.
__device__ inline double load_matrix(const MatrixView& v, int64_t o, int64_t l, int64_t r,
                                     int64_t c) {
  return load_element(v.data, v.type,
                      o * v.outer_stride + l * v.batch_stride + r * v.row_stride + c * v.col_stride);
}

}  // namespace fact::gemm
