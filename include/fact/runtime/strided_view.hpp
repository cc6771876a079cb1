// A strided view of verifier memory and the sums of one comparison against a float64 reference:
// plain structs shared by the CUDA kernels (device_kernels.hpp) and the host (verify_backend.hpp).
#pragma once
#include <cstdint>

#include "fact/runtime/element_type.hpp"

namespace fact::runtime {

inline constexpr int kMaxViewRank = 8;

// A view of `rank` (0..kMaxViewRank) dimensions: element [i0, ..., ir-1] of `type` lies at
// data + Σ i_d · stride[d] elements.
struct StridedView {
  const void* data = nullptr;
  ElementType type = ElementType::F32;
  int rank = 0;
  int64_t shape[kMaxViewRank] = {};
  int64_t stride[kMaxViewRank] = {};
};

// Reductions of one comparison (zero them first).
struct ErrorSums {
  double sum_sq_diff = 0;   // Σ (out − ref)² over finite, written elements
  double sum_sq_ref = 0;    // Σ ref² over all elements
  double max_abs_diff = 0;  // max |out − ref| over finite, written elements
  unsigned long long unwritten = 0;      // out still holds the poison pattern
  unsigned long long nonfinite = 0;      // out is NaN/Inf (not the poison)
  unsigned long long ref_nonfinite = 0;  // the reference itself is NaN/Inf
  unsigned long long written = 0;        // compared elements not holding the poison
};

}  // namespace fact::runtime
