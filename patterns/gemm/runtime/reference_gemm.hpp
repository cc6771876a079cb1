// The GEMM kind's float64 reference on the GPU (reference_gemm.cu): what every GEMM kernel is
// verified against at full size, the epilogue applied step by step as FactGemmArgs carries it
// (gemm_abi.h, ABI v2): each step with its own constants and its own operand. Plain structs
// only, so that the .cu file needs none of the engine's headers; the launch checks itself and
// throws CudaError.
#pragma once
#include <cstdint>

#include <cuda_runtime_api.h>

#include "fact/runtime/device_kernels.hpp"

namespace fact::gemm {

using runtime::ElementType;
using runtime::ErrorSums;

// A batched matrix in device memory: element (o, l, r, c) — outer batch o, batch l — lives at
// data[o·outer_stride + l·batch_stride + r·row_stride + c·col_stride].
struct MatrixView {
  const void* data = nullptr;
  ElementType type = ElementType::F32;
  int64_t row_stride = 0, col_stride = 0, batch_stride = 0;
  int64_t outer_stride = 0;
};

// One epilogue step, as ops.def's float64 formula of its kind computes it (op_formulas.h):
// Scale x *= value, AddScalar x += value, Bias x += value · operand(l, 0, j),
// Activation x = act(x; p0, p1), Residual x += value · operand(l, i, j), Multiply
// x *= operand(l, i, j), and a step over a length-M vector x op= operand(l, i, j) with a view of
// col_stride 0 (row_stride 1: one entry per row). A bias is a view with row_stride 0
// (col_stride 1). A step that stores D itself (ops.def's STORES_D; the last step only, n even)
// is computed by the reference store its pattern registers (store_reference.hpp) from the values
// before it; a TABLES step reads its tables at (sequence i / period, position i % period):
// operand and operand2 with batch_stride between sequences, row_stride between positions.
struct RefEpilogueStep {
  int32_t kind = 1;        // FactGemmStepKind (patterns/gemm/epilogue/ops.def)
  int32_t activation = 0;  // FactActivation
  double value = 1.0;
  double p0 = 0.0, p1 = 0.0;
  MatrixView operand;   // a step's operand (TABLES: the first table)
  MatrixView operand2;  // TABLES: the second table
  int64_t period = 0, group = 0;  // TABLES
  bool interleaved = false;       // TABLES
};

inline constexpr int kMaxReferenceSteps = 8;

// out[((o·batch + l)·m + i)·n + j] = epilogue(alpha · Σ_k A[o,l,i,k]·B[o,l,k,j]) in float64,
// every operand read from its stored (low-precision) value, the steps applied in order. With a
// last step that stores D `out` is dense with D's columns (n/2 when it pairs product columns
// into one); the launch then stages the n columns before it in a temporary buffer of its own.
struct ReferenceParams {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t outer_batch = 1;  // the second batch mode
  MatrixView a, b;
  double alpha = 1.0;
  int step_count = 0;
  RefEpilogueStep steps[kMaxReferenceSteps];
  double* out = nullptr;
};
// Throws CudaError for a step that stores D and is not last, over an odd n, without a
// registered store or refused by its store's check, or for a launch failure.
void launch_reference_gemm(const ReferenceParams& params, cudaStream_t stream);

// Compares the outer_batch × batch × m × n matrix `out` with the dense reference `ref`
// ([o][l][i][j]), accumulating into `sums` (zero them first).
void launch_compare(const MatrixView& out, const double* ref, int64_t m, int64_t n, int64_t batch,
                    int64_t outer_batch, ErrorSums* sums, cudaStream_t stream);

}  // namespace fact::gemm
