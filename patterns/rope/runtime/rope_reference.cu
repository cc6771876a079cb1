// The rope step's float64 GPU reference store (store_reference.hpp): pairs (2p, 2p+1) of each
// head of `group` columns rotated into their original columns a, b (rotate-half a = p,
// b = p + group/2; interleaved a = 2p, b = 2p+1): out(i, head + a) = x[2p]·cos[a] −
// x[2p+1]·sin[a], out(i, head + b) = x[2p+1]·cos[b] + x[2p]·sin[b], the tables read at
// (sequence i / period, position i % period).
#include <algorithm>

#include "fact/runtime/cuda_check.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/runtime/reference_loads.cuh"
#include "patterns/gemm/runtime/store_reference.hpp"

namespace fact::gemm {
namespace {

// out[i·n + j] for every row i < rows and original column j.
__global__ void rope_reference_kernel(const double* pre, double* out, int64_t rows, int64_t n,
                                      const RefEpilogueStep rope) {
  const int64_t total = rows * n;
  const int64_t half = rope.group / 2;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx / n, j = idx % n;
    const int64_t c = j % rope.group;  // the original column in its head
    const int64_t head = j - c;
    const int64_t pair = rope.interleaved ? c / 2 : c % half;
    const bool second = rope.interleaved ? (c % 2 == 1) : (c >= half);
    const double xa = pre[i * n + head + 2 * pair];
    const double xb = pre[i * n + head + 2 * pair + 1];
    const int64_t sequence = i / rope.period, position = i % rope.period;
    const double cos_c = load_matrix(rope.operand, 0, sequence, position, c);
    const double sin_c = load_matrix(rope.operand2, 0, sequence, position, c);
    out[idx] = second ? xb * cos_c + xa * sin_c : xa * cos_c - xb * sin_c;
  }
}

// One batch, whole heads and whole sequences.
void check(const ReferenceParams& params) {
  const RefEpilogueStep& rope = params.steps[params.step_count - 1];
  if (params.batch * params.outer_batch != 1 || rope.group <= 0 || rope.group % 2 != 0 ||
      params.n % rope.group != 0 || rope.period <= 0 || params.m % rope.period != 0) {
    throw runtime::CudaError("reference GEMM: a rope step needs one batch, whole heads and whole sequences");
  }
}

cudaError_t launch(const double* pre, double* out, int64_t rows, const ReferenceParams& params,
                   cudaStream_t stream) {
  const int64_t blocks = std::clamp<int64_t>((rows * params.n + 255) / 256, 1, 65535);
  rope_reference_kernel<<<unsigned(blocks), 256, 0, stream>>>(pre, out, rows, params.n,
                                                              params.steps[params.step_count - 1]);
  return cudaGetLastError();
}

const StoreReferenceRegistrar kRopeStore{{FACT_STEP_ROPE, &check, &launch}};

}  // namespace
}  // namespace fact::gemm
