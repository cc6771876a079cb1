// Strict-float32 GEMM, portable path: CUTLASS 2.x GemmUniversal with the Ampere-style 3xTF32
// tensor-op mainloop (cutlass::arch::OpMultiplyAddFastF32: every float32 operand is split into a
// TF32 "big" part and a TF32 "small" remainder inside the warp-level MMA, and the product is
// big*big + big*small + small*big, accumulated in float32). Runs on sm_80 and later, sm_90a
// included; it is the baseline and fallback for FACT's "strict" precision mode.
//
//   D[l] = Chain(A[l] · B[l]), float32 in and out, D row-major. Chain is an epilogue chain of
//   patterns/gemm/gemm_epilogue.cuh of one of the forms the CUTLASS 2.x epilogue
//   LinearCombinationGeneric computes, act(alpha * acc + beta * source):
//     ScaledAccumulator                                alpha * acc
//     Residual<float, ScaledAccumulator>               alpha * acc + beta * C
//     ColumnBias<float, ScaledAccumulator>             alpha * acc + value * bias (source: the
//                                                      bias vector as a C with leading
//                                                      dimension 0, beta its step's value)
//   and any of these inside one Activation<Fn, ...>. Other chains (bias and residual together,
//   a residual before the activation's input, a product with C) do not compile here; the
//   parameter space (kernel_strict.cpp) refuses them for this kernel with the reason.
//
// Sm80StrictGemm<...>::run implements the FACT C ABI v2 (fact_abi.h, gemm_abi.h) contract:
//   - workspace_size != nullptr: writes the workspace bytes for `args`, launches nothing.
//   - otherwise validates `args` (header, dtypes, layouts, epilogue steps, sizes, pointers),
//     checks can_implement, initializes and launches on `stream`.
//   - returns a FactStatus, never throws.
// Batches (args->batch > 1) run as one launch in GemmUniversal's kBatched mode; batch strides of
// 0 broadcast an operand. A second batch mode (args->outer_batch > 1) runs as one launch per
// outer batch, each on fact_gemm_outer_slice(args, o) (gemm_abi.h). A single GEMM with args->split_k > 1 runs as serial split-K (kGemm mode
// with that many K slices, reduced in place through a semaphore in the workspace); split_k <= 1
// lets the kernel choose the slices from the tile count and the SM count.
// Alignment: pointers 16-byte aligned, leading dimensions and batch strides multiples of 4.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/epilogue/thread/linear_combination_generic.h"
#include "cutlass/gemm/device/gemm_universal.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm_f32_strict/strict_epilogue.cuh"

namespace fact::strict {

// What the CUTLASS 2.x epilogue computes for a chain: its activation functor and what its
// source operand holds.
enum class Sm80Source { kNone, kResidual, kBias };

template <class Chain>
struct Sm80EpilogueOf {
  static_assert(sizeof(Chain) == 0,
                "the multistage strict kernel takes [activation of] alpha * acc, optionally plus "
                "beta * C or a bias");
};
// kActivationStep: the FactGemmStep of the activation (-1: none); the source (bias or C) is
// always step 0.
template <>
struct Sm80EpilogueOf<chain::ScaledAccumulator> {
  template <class T> using Activation = cutlass::epilogue::thread::Identity<T>;
  static constexpr Sm80Source kSource = Sm80Source::kNone;
  static constexpr int kActivationStep = -1;
};
template <>
struct Sm80EpilogueOf<chain::Residual<float, chain::ScaledAccumulator>> {
  template <class T> using Activation = cutlass::epilogue::thread::Identity<T>;
  static constexpr Sm80Source kSource = Sm80Source::kResidual;
  static constexpr int kActivationStep = -1;
};
template <>
struct Sm80EpilogueOf<chain::ColumnBias<float, chain::ScaledAccumulator>> {
  template <class T> using Activation = cutlass::epilogue::thread::Identity<T>;
  static constexpr Sm80Source kSource = Sm80Source::kBias;
  static constexpr int kActivationStep = -1;
};
template <template <class> class Fn, class Inner>
struct Sm80EpilogueOf<chain::Activation<Fn, Inner>> {
  static_assert(std::is_same_v<typename Sm80EpilogueOf<Inner>::template Activation<float>,
                               cutlass::epilogue::thread::Identity<float>>,
                "one activation, last");
  template <class T> using Activation = Fn<T>;
  static constexpr Sm80Source kSource = Sm80EpilogueOf<Inner>::kSource;
  static constexpr int kActivationStep = Inner::kSteps;
};

// ThreadblockShape / WarpShape: cutlass::gemm::GemmShape<M, N, K>.
template <class LayoutA, class LayoutB, class ThreadblockShape, class WarpShape, int Stages,
          class Chain_ = chain::ScaledAccumulator>
struct Sm80StrictGemm {
  using Chain = Chain_;
  static constexpr int kAlignment = kFloatAlignment;
  static constexpr Sm80Source kSource = Sm80EpilogueOf<Chain>::kSource;
  template <class T>
  using ActivationFn = typename Sm80EpilogueOf<Chain>::template Activation<T>;
  // act(alpha * acc + beta * source); under serial split-K the activation runs only in the
  // last K partition (LinearCombinationGeneric::set_k_partition).
  using EpilogueOp = cutlass::epilogue::thread::LinearCombinationGeneric<
      ActivationFn, float, kAlignment, float, float>;
  static constexpr bool kRowMajorA = std::is_same_v<LayoutA, cutlass::layout::RowMajor>;
  static constexpr bool kRowMajorB = std::is_same_v<LayoutB, cutlass::layout::RowMajor>;
  using Gemm = cutlass::gemm::device::GemmUniversal<
      float, LayoutA, float, LayoutB, float, cutlass::layout::RowMajor, float,
      cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, ThreadblockShape, WarpShape,
      cutlass::gemm::GemmShape<16, 8, 8>, EpilogueOp,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>, Stages, kAlignment,
      kAlignment, cutlass::arch::OpMultiplyAddFastF32>;

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

  static constexpr int kActivationStep = Sm80EpilogueOf<Chain>::kActivationStep;

  // The epilogue's parameters: alpha, beta (the residual or bias step's value) and the activation
  // step's (LeakyReLU's slope from its p0, Clamp's bounds from its p0 / p1).
  static typename EpilogueOp::Params epilogue_params(const FactGemmArgs* args) {
    const float beta = kSource != Sm80Source::kNone ? args->steps[0].value : 0.0f;
    typename EpilogueOp::Params params(args->alpha, beta);
    using FnArguments = typename cutlass::epilogue::thread::GenericActivationTraits<
        ActivationFn<float>>::Arguments;
    if constexpr (kActivationStep >= 0) {
      static_cast<FnArguments&>(params) =
          fact::gemm::epilogue::detail::activation_arguments<FnArguments>(args->steps[kActivationStep]);
    }
    return params;
  }

  static typename Gemm::Arguments make_arguments(const FactGemmArgs* args) {
    bool batched = args->batch > 1;
    int slices = split_k_slices(args);
    // The source operand (step 0's): C, the bias as a matrix whose rows all start at bias[0],
    // or D (never read when beta is 0).
    const FactGemmStep& source = args->steps[0];
    const bool has_source = kSource != Sm80Source::kNone;
    const void* c = has_source ? source.operand : args->d;
    int64_t ldc = kSource == Sm80Source::kResidual ? source.ld
                  : kSource == Sm80Source::kBias   ? 0
                                                   : args->ldd;
    int64_t stride_c = has_source ? source.batch_stride : args->stride_d;
    return typename Gemm::Arguments(
        batched ? cutlass::gemm::GemmUniversalMode::kBatched : cutlass::gemm::GemmUniversalMode::kGemm,
        cutlass::gemm::GemmCoord(int(args->m), int(args->n), int(args->k)),
        batched ? int(args->batch) : slices, epilogue_params(args), args->a, args->b, c, args->d,
        args->stride_a, args->stride_b, stride_c, args->stride_d, args->lda, args->ldb, ldc,
        args->ldd);
  }

  // The C ABI: run_unpadded behind the GEMM pattern's zero padding (a call whose rows are not
  // 16-byte aligned runs padded through the workspace: patterns/gemm/gemm_padding.h).
  static int run(const FactCallHeader* header, void* workspace, size_t* workspace_size,
                 cudaStream_t stream) noexcept {
    return fact::gemm::padding::run_padded(header, workspace, workspace_size, stream, false,
                                           &run_unpadded);
  }

  static int run_unpadded(const FactCallHeader* header, void* workspace, size_t* workspace_size,
                          cudaStream_t stream) noexcept {
    try {
    bool size_query = workspace_size != nullptr;
    const FactGemmArgs* args = nullptr;
    if (int status = validate_arguments<Chain>(header, size_query, kRowMajorA, kRowMajorB, &args);
        status != FACT_OK)
      return status;
    // One launch per outer batch (the slices differ only in their pointers, aligned alike).
    const int64_t outer = fact_gemm_outer_count(args);
    for (int64_t o = 0; o < outer; ++o) {
      const FactGemmArgs slice = outer == 1 ? *args : fact_gemm_outer_slice(args, o);
      typename Gemm::Arguments arguments = make_arguments(&slice);
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
      if (cudaGetLastError() != cudaSuccess) return FACT_ERR_LAUNCH;
    }
    return FACT_OK;
    } catch (...) {
      return FACT_ERR_INTERNAL;
    }
  }
};

}  // namespace fact::strict
