// The glu step's float64 GPU reference store (store_reference.hpp): D's column j of a row is
// act(x[2j]; p0, p1) · x[2j+1] of the row's values before it.
#include <algorithm>

#include "fact/runtime/cuda_check.hpp"
#include "patterns/gemm/epilogue/op_formulas.h"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/runtime/store_reference.hpp"

namespace fact::gemm {
namespace {

// out[r·(n/2) + j] = act(pre[r·n + 2j]) · pre[r·n + 2j + 1] for every row r < rows.
__global__ void gate_reference_kernel(const double* pre, double* out, int64_t rows, int64_t n,
                                      int32_t act, double p0, double p1) {
  const int64_t half = n / 2;
  const int64_t total = rows * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = idx / half, j = idx % half;
    const double gate = pre[row * n + 2 * j];
    const double up = pre[row * n + 2 * j + 1];
    out[idx] = ops::activate<double>(act, gate, p0, p1) * up;
  }
}

void check(const ReferenceParams&) {}  // n even: launch_reference_gemm checks it for every store

cudaError_t launch(const double* pre, double* out, int64_t rows, const ReferenceParams& params,
                   cudaStream_t stream) {
  const RefEpilogueStep& glu = params.steps[params.step_count - 1];
  const int64_t blocks = std::clamp<int64_t>((rows * (params.n / 2) + 255) / 256, 1, 65535);
  gate_reference_kernel<<<unsigned(blocks), 256, 0, stream>>>(pre, out, rows, params.n,
                                                              glu.activation, glu.p0, glu.p1);
  return cudaGetLastError();
}

const StoreReferenceRegistrar kGluStore{{FACT_STEP_GLU, &check, &launch}};

}  // namespace
}  // namespace fact::gemm
