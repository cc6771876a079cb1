// The float64 reference GEMM with its epilogue, and the error reduction (device_kernels.hpp).
// The reference is deliberately plain: 64×64 output tiles staged through shared memory in
// double, 4×4 outputs per thread, generic strides so that every layout uses the same code.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "fact/runtime/cuda_check.hpp"
#include "fact/runtime/device_kernels.hpp"
#include "patterns/gemm/epilogue/op_formulas.h"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/runtime/reference_gemm.hpp"
#include "patterns/gemm/runtime/reference_loads.cuh"
#include "patterns/gemm/runtime/store_reference.hpp"

namespace fact::gemm {

using runtime::check_cuda;
using runtime::CudaError;
using runtime::kPoisonBF16;
using runtime::kPoisonF16;
using runtime::kPoisonF32;

namespace {

constexpr int kTile = 64;     // output rows and columns per block
constexpr int kTileK = 16;    // reduction depth staged per iteration
constexpr int kThreadsPerSide = 16;
constexpr int kThreads = kThreadsPerSide * kThreadsPerSide;
constexpr int kPerThread = kTile / kThreadsPerSide;  // 4 rows × 4 columns per thread

// The steps of p (a last step that stores D is not among them: launch_reference_gemm hands
// this kernel's output to that step's store). Every step reads its operand through a view whose
// strides make it a column vector, a row vector or a matrix (gemm_verify_case.cpp).
__device__ double apply_epilogue(const ReferenceParams& p, double acc, int64_t o, int64_t l,
                                 int64_t i, int64_t j) {
  double x = p.alpha * acc;
  for (int s = 0; s < p.step_count; ++s) {
    const RefEpilogueStep& step = p.steps[s];
    const double operand = step.operand.data ? load_matrix(step.operand, o, l, i, j) : 0.0;
    bool known = true;
    x = ops::apply_step<double>(step.kind, x, operand,
                                ops::StepConstants<double>{step.value, step.p0, step.p1, step.activation},
                                &known);
  }
  return x;
}

__global__ void __launch_bounds__(kThreads) reference_gemm_kernel(const ReferenceParams p) {
  __shared__ double a_tile[kTileK][kTile];
  __shared__ double b_tile[kTileK][kTile];
  const int tx = threadIdx.x % kThreadsPerSide;
  const int ty = threadIdx.x / kThreadsPerSide;
  const int64_t row0 = int64_t(blockIdx.y) * kTile;
  const int64_t col0 = int64_t(blockIdx.x) * kTile;

  const int64_t batches = p.batch * p.outer_batch;
  for (int64_t ol = blockIdx.z; ol < batches; ol += gridDim.z) {
    const int64_t o = ol / p.batch, l = ol % p.batch;
    double acc[kPerThread][kPerThread] = {};
    for (int64_t k0 = 0; k0 < p.k; k0 += kTileK) {
      for (int e = threadIdx.x; e < kTile * kTileK; e += kThreads) {
        const int r = e / kTileK, kk = e % kTileK;  // A tile: consecutive threads walk K
        const int64_t gr = row0 + r, gk = k0 + kk;
        a_tile[kk][r] = (gr < p.m && gk < p.k) ? load_matrix(p.a, o, l, gr, gk) : 0.0;
        const int kb = e / kTile, c = e % kTile;  // B tile: consecutive threads walk N
        const int64_t gkb = k0 + kb, gc = col0 + c;
        b_tile[kb][c] = (gkb < p.k && gc < p.n) ? load_matrix(p.b, o, l, gkb, gc) : 0.0;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kTileK; ++kk) {
        double a[kPerThread], b[kPerThread];
#pragma unroll
        for (int t = 0; t < kPerThread; ++t) {
          a[t] = a_tile[kk][ty + t * kThreadsPerSide];
          b[t] = b_tile[kk][tx + t * kThreadsPerSide];
        }
#pragma unroll
        for (int r = 0; r < kPerThread; ++r)
#pragma unroll
          for (int c = 0; c < kPerThread; ++c) acc[r][c] = fma(a[r], b[c], acc[r][c]);
      }
      __syncthreads();
    }
    for (int r = 0; r < kPerThread; ++r) {
      const int64_t i = row0 + ty + r * kThreadsPerSide;
      if (i >= p.m) continue;
      for (int c = 0; c < kPerThread; ++c) {
        const int64_t j = col0 + tx + c * kThreadsPerSide;
        if (j >= p.n) continue;
        p.out[(ol * p.m + i) * p.n + j] = apply_epilogue(p, acc[r][c], o, l, i, j);
      }
    }
  }
}

__device__ inline bool is_poison(const void* data, ElementType type, int64_t i) {
  switch (type) {
    case ElementType::F32: return static_cast<const uint32_t*>(data)[i] == kPoisonF32;
    case ElementType::BF16: return static_cast<const uint16_t*>(data)[i] == kPoisonBF16;
    case ElementType::F16: return static_cast<const uint16_t*>(data)[i] == kPoisonF16;
  }
  return false;
}

template <typename T>
__device__ inline T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

__device__ inline double warp_max(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmax(v, __shfl_down_sync(0xffffffffu, v, offset));
  return v;
}

constexpr int kCompareThreads = 256;

__global__ void __launch_bounds__(kCompareThreads)
    compare_kernel(const MatrixView out, const double* ref, int64_t m, int64_t n, int64_t batch,
                   int64_t outer_batch, ErrorSums* sums) {
  double sq_diff = 0, sq_ref = 0, max_abs = 0;
  unsigned long long unwritten = 0, nonfinite = 0, ref_nonfinite = 0;
  const int64_t total = m * n * batch * outer_batch;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = idx % n;
    const int64_t i = (idx / n) % m;
    const int64_t l = (idx / (n * m)) % batch;
    const int64_t ob = idx / (n * m * batch);  // outer batch
    const double r = ref[idx];
    if (!isfinite(r)) {
      ++ref_nonfinite;
      continue;
    }
    sq_ref += r * r;
    const int64_t offset =
        ob * out.outer_stride + l * out.batch_stride + i * out.row_stride + j * out.col_stride;
    if (is_poison(out.data, out.type, offset)) {
      ++unwritten;
      continue;
    }
    const double o = load_element(out.data, out.type, offset);
    if (!isfinite(o)) {
      ++nonfinite;
      continue;
    }
    const double d = o - r;
    sq_diff += d * d;
    max_abs = fmax(max_abs, fabs(d));
  }
  __shared__ double s_diff[kCompareThreads / 32], s_ref[kCompareThreads / 32],
      s_max[kCompareThreads / 32];
  __shared__ unsigned long long s_unwritten[kCompareThreads / 32],
      s_nonfinite[kCompareThreads / 32], s_ref_nonfinite[kCompareThreads / 32];
  sq_diff = warp_sum(sq_diff);
  sq_ref = warp_sum(sq_ref);
  max_abs = warp_max(max_abs);
  unwritten = warp_sum(unwritten);
  nonfinite = warp_sum(nonfinite);
  ref_nonfinite = warp_sum(ref_nonfinite);
  const int warp = threadIdx.x / 32;
  if ((threadIdx.x & 31) == 0) {
    s_diff[warp] = sq_diff;
    s_ref[warp] = sq_ref;
    s_max[warp] = max_abs;
    s_unwritten[warp] = unwritten;
    s_nonfinite[warp] = nonfinite;
    s_ref_nonfinite[warp] = ref_nonfinite;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kCompareThreads / 32; ++w) {
      s_diff[0] += s_diff[w];
      s_ref[0] += s_ref[w];
      s_max[0] = fmax(s_max[0], s_max[w]);
      s_unwritten[0] += s_unwritten[w];
      s_nonfinite[0] += s_nonfinite[w];
      s_ref_nonfinite[0] += s_ref_nonfinite[w];
    }
    atomicAdd(&sums->sum_sq_diff, s_diff[0]);
    atomicAdd(&sums->sum_sq_ref, s_ref[0]);
    // Non-negative doubles order like their bit patterns.
    atomicMax(reinterpret_cast<unsigned long long*>(&sums->max_abs_diff),
              static_cast<unsigned long long>(__double_as_longlong(s_max[0])));
    atomicAdd(&sums->unwritten, s_unwritten[0]);
    atomicAdd(&sums->nonfinite, s_nonfinite[0]);
    atomicAdd(&sums->ref_nonfinite, s_ref_nonfinite[0]);
  }
}

}  // namespace

void launch_reference_gemm(const ReferenceParams& params, cudaStream_t stream) {
  if (params.step_count < 0 || params.step_count > kMaxReferenceSteps) {
    throw CudaError("reference GEMM: " + std::to_string(params.step_count) +
                    " epilogue steps (at most " + std::to_string(kMaxReferenceSteps) + ")");
  }
  const dim3 grid(static_cast<unsigned>((params.n + kTile - 1) / kTile),
                  static_cast<unsigned>((params.m + kTile - 1) / kTile),
                  static_cast<unsigned>(std::min<int64_t>(params.batch * params.outer_batch, 65535)));
  if ((params.n + kTile - 1) / kTile > 0x7fffffff || (params.m + kTile - 1) / kTile > 65535) {
    throw CudaError("reference GEMM: problem too large for one launch grid");
  }
  for (int s = 0; s + 1 < params.step_count; ++s) {
    if (fact_gemm_step_stores_d(params.steps[s].kind)) {
      throw CudaError("reference GEMM: a step that stores D must be the epilogue's last");
    }
  }
  const StoreReference* store = nullptr;
  if (params.step_count > 0 && fact_gemm_step_stores_d(params.steps[params.step_count - 1].kind)) {
    store = find_store_reference(params.steps[params.step_count - 1].kind);
    if (store == nullptr) {
      throw CudaError("reference GEMM: no reference store is registered for step kind " +
                      std::to_string(params.steps[params.step_count - 1].kind));
    }
    if (params.n % 2 != 0) throw CudaError("reference GEMM: a step that stores D pairs columns, n is odd");
    store->check(params);
  }
  if (store == nullptr) {
    reference_gemm_kernel<<<grid, kThreads, 0, stream>>>(params);
    check_cuda(cudaGetLastError(), "reference_gemm_kernel launch", __FILE__, __LINE__);
    return;
  }
  // The steps before the last into a dense m × n staging buffer, then its store into `out`.
  const int64_t rows = params.m * params.batch * params.outer_batch;
  double* pre = nullptr;
  check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&pre), size_t(rows * params.n) * sizeof(double), stream),
             "reference GEMM staging buffer", __FILE__, __LINE__);
  ReferenceParams before_gate = params;
  before_gate.step_count -= 1;
  before_gate.out = pre;
  reference_gemm_kernel<<<grid, kThreads, 0, stream>>>(before_gate);
  cudaError_t launched = cudaGetLastError();
  if (launched == cudaSuccess) launched = store->launch(pre, params.out, rows, params, stream);
  cudaFreeAsync(pre, stream);
  check_cuda(launched, "reference_gemm_kernel and its last step's store launch", __FILE__, __LINE__);
}

void launch_compare(const MatrixView& out, const double* ref, int64_t m, int64_t n, int64_t batch,
                    int64_t outer_batch, ErrorSums* sums, cudaStream_t stream) {
  const int64_t total = m * n * batch * outer_batch;
  const unsigned blocks =
      static_cast<unsigned>(std::clamp<int64_t>((total + kCompareThreads - 1) / kCompareThreads, 1, 8192));
  compare_kernel<<<blocks, kCompareThreads, 0, stream>>>(out, ref, m, n, batch, outer_batch, sums);
  check_cuda(cudaGetLastError(), "compare_kernel launch", __FILE__, __LINE__);
}

}  // namespace fact::gemm
