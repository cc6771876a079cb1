// Strict-float32 GEMM, portable path: CUTLASS 2.x GemmUniversal with the Ampere-style 3xTF32
// tensor-op mainloop (cutlass::arch::OpMultiplyAddFastF32: every float32 operand is split into a
// TF32 "big" part and a TF32 "small" remainder inside the warp-level MMA, and the product is
// big*big + big*small + small*big, accumulated in float32). Runs on sm_80 and later, sm_90a
// included; it is the baseline and fallback for FACT's "strict" precision mode.
//
//   D[l] = alpha * A[l] · B[l] (+ beta * C[l] when kResidual), float32 in and out, D row-major.
//
// Sm80StrictGemm<...>::run implements the FACT C ABI (fact_abi.h) contract:
//   - workspace_size != nullptr: writes the workspace bytes for `args`, launches nothing.
//   - otherwise validates `args`, checks can_implement, initializes and launches on `stream`.
//   - returns a FactStatus, never throws.
// Batches (args->batch > 1) run as one launch in GemmUniversal's kBatched mode; batch strides of
// 0 broadcast an operand. A single GEMM with args->split_k > 1 runs as serial split-K (kGemm mode
// with that many K slices, reduced in place through a semaphore in the workspace); split_k <= 1
// lets the kernel choose the slices from the tile count and the SM count.
// Alignment: pointers 16-byte aligned, leading dimensions and batch strides multiples of 4.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/device/gemm_universal.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
#include "fact/runtime/fact_abi.h"

namespace fact::strict {

// ThreadblockShape / WarpShape: cutlass::gemm::GemmShape<M, N, K>.
template <class LayoutA, class LayoutB, class ThreadblockShape, class WarpShape, int Stages,
          bool kResidual = false>
struct Sm80StrictGemm {
  static constexpr int kAlignment = 4;  // float elements per 16-byte access
  using EpilogueOp = cutlass::epilogue::thread::LinearCombination<float, kAlignment, float, float>;
  using Gemm = cutlass::gemm::device::GemmUniversal<
      float, LayoutA, float, LayoutB, float, cutlass::layout::RowMajor, float,
      cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, ThreadblockShape, WarpShape,
      cutlass::gemm::GemmShape<16, 8, 8>, EpilogueOp,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>, Stages, kAlignment,
      kAlignment, cutlass::arch::OpMultiplyAddFastF32>;

  static bool aligned(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
  static bool aligned(int64_t elements) { return elements % kAlignment == 0; }

  // FACT_OK when `args` describe a problem this kernel can take (pointers may be null for a
  // size query).
  static int validate(const FactGemmArgs* args, bool size_query) {
    if (!args || args->abi_version != FACT_ABI_VERSION) return FACT_ERR_INVALID_ARGS;
    if (args->m <= 0 || args->n <= 0 || args->k <= 0 || args->batch <= 0) return FACT_ERR_INVALID_ARGS;
    if (args->m > INT32_MAX || args->n > INT32_MAX || args->k > INT32_MAX || args->batch > INT32_MAX)
      return FACT_ERR_CANNOT_IMPLEMENT;
    if (size_query) return FACT_OK;
    if (!args->a || !args->b || !args->d || (kResidual && !args->c)) return FACT_ERR_INVALID_ARGS;
    bool ok = aligned(args->a) && aligned(args->b) && aligned(args->d) && aligned(args->lda) &&
              aligned(args->ldb) && aligned(args->ldd) && aligned(args->stride_a) &&
              aligned(args->stride_b) && aligned(args->stride_d);
    if (kResidual) ok = ok && aligned(args->c) && aligned(args->ldc) && aligned(args->stride_c);
    return ok ? FACT_OK : FACT_ERR_CANNOT_IMPLEMENT;
  }

  // K slices for a single GEMM: the requested count (split_k > 1), or enough slices to give
  // every SM a tile while each slice keeps at least 8 K-tiles.
  static int split_k_slices(const FactGemmArgs* args) {
    if (args->batch > 1) return 1;
    if (args->split_k > 1) return int(args->split_k);
    int sms = args->sm_count;
    if (sms <= 0) {
      int device = 0;
      if (cudaGetDevice(&device) != cudaSuccess ||
          cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
        return 1;
    }
    int64_t tiles = ((args->m + ThreadblockShape::kM - 1) / ThreadblockShape::kM) *
                    ((args->n + ThreadblockShape::kN - 1) / ThreadblockShape::kN);
    int64_t by_sms = sms / tiles;
    int64_t by_k = args->k / (8 * ThreadblockShape::kK);
    int64_t slices = by_sms < by_k ? by_sms : by_k;
    return slices > 1 ? int(slices) : 1;
  }

  static typename Gemm::Arguments make_arguments(const FactGemmArgs* args) {
    bool batched = args->batch > 1;
    int slices = split_k_slices(args);
    float beta = kResidual ? args->beta : 0.0f;
    const void* c = kResidual ? args->c : args->d;  // never read when beta is 0
    int64_t ldc = kResidual ? args->ldc : args->ldd;
    int64_t stride_c = kResidual ? args->stride_c : args->stride_d;
    return typename Gemm::Arguments(
        batched ? cutlass::gemm::GemmUniversalMode::kBatched : cutlass::gemm::GemmUniversalMode::kGemm,
        cutlass::gemm::GemmCoord(int(args->m), int(args->n), int(args->k)),
        batched ? int(args->batch) : slices, {args->alpha, beta}, args->a, args->b, c, args->d,
        args->stride_a, args->stride_b, stride_c, args->stride_d, args->lda, args->ldb, ldc,
        args->ldd);
  }

  static int run(const FactGemmArgs* args, void* workspace, size_t* workspace_size,
                 cudaStream_t stream) {
    bool size_query = workspace_size != nullptr;
    if (int status = validate(args, size_query); status != FACT_OK) return status;
    typename Gemm::Arguments arguments = make_arguments(args);
    if (size_query) {
      *workspace_size = Gemm::get_workspace_size(arguments);
      return FACT_OK;
    }
    if (Gemm::can_implement(arguments) != cutlass::Status::kSuccess) return FACT_ERR_CANNOT_IMPLEMENT;
    if (Gemm::get_workspace_size(arguments) > 0 && !workspace) return FACT_ERR_WORKSPACE;
    Gemm gemm;
    if (gemm.initialize(arguments, workspace, stream) != cutlass::Status::kSuccess)
      return FACT_ERR_INITIALIZE;
    if (gemm.run(stream) != cutlass::Status::kSuccess) return FACT_ERR_LAUNCH;
    return cudaGetLastError() == cudaSuccess ? FACT_OK : FACT_ERR_LAUNCH;
  }
};

}  // namespace fact::strict
