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
// x *= operand(l, i, j), RowScale x *= operand(l, i, j) with a view of col_stride 0 (row_stride
// 1: one scale per row). A bias is a view with row_stride 0 (col_stride 1). Glu (the last step
// only, n even) pairs columns: out(l, i, j) = act(x(l, i, 2j); p0, p1) · x(l, i, 2j+1) for j < n/2.
// Rope (the last step only, one batch) rotates pairs (2p, 2p+1) of each head of `group` columns
// into their original columns a, b (rotate-half a = p, b = p + group/2; interleaved a = 2p,
// b = 2p+1): out(i, head + a) = x[2p]·cos[a] − x[2p+1]·sin[a], out(i, head + b) =
// x[2p+1]·cos[b] + x[2p]·sin[b], the tables read at (sequence i / period, position i % period):
// operand (cos) and operand2 (sin) with batch_stride between sequences, row_stride between
// positions.
struct RefEpilogueStep {
  int32_t kind = 1;        // FactGemmStepKind (patterns/gemm/epilogue/ops.def)
  int32_t activation = 0;  // FactActivation
  double value = 1.0;
  double p0 = 0.0, p1 = 0.0;
  MatrixView operand;  // Bias, Residual, Multiply, RowScale; Rope: cos
  MatrixView operand2;  // Rope: sin
  int64_t period = 0, group = 0;  // Rope
  bool interleaved = false;       // Rope
};

inline constexpr int kMaxReferenceSteps = 8;

// out[((o·batch + l)·m + i)·n + j] = epilogue(alpha · Σ_k A[o,l,i,k]·B[o,l,k,j]) in float64,
// every operand read from its stored (low-precision) value, the steps applied in order. With a
// Glu last step `out` is dense with n/2 columns (out[((o·batch + l)·m + i)·(n/2) + j]); the
// launch then stages the n columns before the gate in a temporary buffer of its own.
struct ReferenceParams {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t outer_batch = 1;  // the second batch mode
  MatrixView a, b;
  double alpha = 1.0;
  int step_count = 0;
  RefEpilogueStep steps[kMaxReferenceSteps];
  double* out = nullptr;
};
// Throws CudaError for a malformed Glu (not last, odd n) or Rope (not last, batched, heads or
// sequences that do not divide n or m) or a launch failure.
void launch_reference_gemm(const ReferenceParams& params, cudaStream_t stream);

// Compares the outer_batch × batch × m × n matrix `out` with the dense reference `ref`
// ([o][l][i][j]), accumulating into `sums` (zero them first).
void launch_compare(const MatrixView& out, const double* ref, int64_t m, int64_t n, int64_t batch,
                    int64_t outer_batch, ErrorSums* sums, cudaStream_t stream);

}  // namespace fact::gemm
