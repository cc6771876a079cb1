// The GEMM kind's float64 reference on the GPU (reference_gemm.cu): what every GEMM kernel is
// verified against at full size. Plain structs only, so that the .cu file needs none of the
// engine's headers; the launch checks itself and throws CudaError.
#pragma once
#include <cstdint>

#include <cuda_runtime_api.h>

#include "fact/runtime/device_kernels.hpp"

namespace fact::runtime {

// A batched matrix in device memory: element (l, r, c) lives at
// data[l·batch_stride + r·row_stride + c·col_stride].
struct MatrixView {
  const void* data = nullptr;
  ElementType type = ElementType::F32;
  int64_t row_stride = 0, col_stride = 0, batch_stride = 0;
};

enum class RefStepKind : int { Scale = 0, Bias = 1, Activation = 2, Residual = 3, Multiply = 4 };
enum class RefActivation : int {
  Identity = 0, ReLU, GeluErf, GeluTanh, SiLU, Sigmoid, LeakyReLU, HardTanh
};

struct RefEpilogueStep {
  RefStepKind kind = RefStepKind::Scale;
  RefActivation activation = RefActivation::Identity;
  double value = 1.0;  // Scale factor / Residual beta
  double p0 = 0.0, p1 = 0.0;
};

inline constexpr int kMaxReferenceSteps = 8;

// out[(l·m + i)·n + j] = epilogue(alpha · Σ_k A[l,i,k]·B[l,k,j]) in float64, every operand
// read from its stored (low-precision) value. The epilogue applies `steps` in order; Bias reads
// bias[j], Residual/Multiply read c(l, i, j).
struct ReferenceParams {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  MatrixView a, b, c;
  const void* bias = nullptr;
  ElementType bias_type = ElementType::F32;
  double alpha = 1.0;
  int step_count = 0;
  RefEpilogueStep steps[kMaxReferenceSteps];
  double* out = nullptr;
};
void launch_reference_gemm(const ReferenceParams& params, cudaStream_t stream);

}  // namespace fact::runtime
