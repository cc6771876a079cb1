// FACT's gated-linear-unit epilogue node for CUTLASS's sm90 epilogue visitor tree (EVT): one
// GEMM computes x = A·[Wg; Wu] with the gate and up weights interleaved column by column (a
// plan-time operand transform, docs/plan.md), and this node writes D[m, j] = act(x[m, 2j]) ·
// x[m, 2j+1], an M×(N/2) output (FACT_STEP_GLU, gemm_abi.h). SwiGLU (act = SiLU), GeGLU (GELU),
// GLU (sigmoid), ReGLU (ReLU).
//
// Why it works without a dual GEMM: on Hopper every wgmma accumulator fragment holds, for each
// thread, pairs of adjacent N columns (n, n+1) with n even (CuTe's SM90 64xNx16 C layout: the
// first value mode has stride one column), and the epilogue's register partition keeps them
// adjacent (the 16-bit stmatrix atoms pack two columns per 32-bit register). So after the
// interleave each thread holds gate_j and up_j of the same row next to each other in one visit
// fragment, and the product needs no data exchange. postreduce places each result by the gate's
// own (m, n) coordinate from the partition the collective uses (sm90_partition_for_epilogue),
// as CUTLASS's Sm90AuxStore does. The pairing is checked on the host for every thread of the
// ping-pong 128x128 and cooperative 128x256 / 256x128 kernels
// (GluCompile.GluPartitionHoldsWholeColumnPairsInEveryThread, tests/test_realize_glu_compile.cpp) and end
// to end by the GPU tests (tests/test_runtime_gpu_glu.cpp: SwiGluLlamaMlpBf16,
// BiasGeGluRaggedBf16), which compare every element of D with the float64 reference.
//
// How it stores: the kernel is built with a void D (the collective epilogue writes nothing
// itself); this node is the tree's root and owns the output like CUTLASS's Sm90AuxStore does:
//   visit       act(gate) · up for each pair of the fragment, kept in registers (output type)
//   postreduce  each thread writes its results into this node's shared-memory subtile
//               (EPI_M × EPI_N/2, row-major, one buffer per store stage) at (row, column / 2)
//   tma_store   the issuing warp stores the subtile with TMA into D (clipped at M and N/2)
// The buffers follow the collective's TMA store pipeline (StagesD = min(epilogue subtiles, 2),
// the index store_iteration % StagesD), exactly as Sm90AuxStore's.
#pragma once
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"
#include "cutlass/numeric_conversion.h"

#include "patterns/gemm/gemm_store_stages.cuh"

namespace fact::gemm::epilogue::detail {

template <class CtaTile, class EpilogueTile, class ElementOut, class ElementCompute,
          template <class> class ActivationFn, cutlass::FloatRoundStyle kRound>
struct Sm90GluStore {
  // The element the collective sizes its (unused) D staging by when D is void.
  using ElementAux = ElementOut;

  static constexpr int kTileM = cute::size<0>(CtaTile{});
  static constexpr int kTileN = cute::size<1>(CtaTile{});
  static constexpr int kEpiM = cute::size<0>(EpilogueTile{});
  static constexpr int kEpiN = cute::size<1>(EpilogueTile{});
  static constexpr int kHalfN = kEpiN / 2;
  static constexpr int kStages = store_stages<CtaTile, EpilogueTile>();
  static_assert(kEpiN % 16 == 0, "a gated subtile holds whole 16-byte rows of outputs");
  static_assert(kTileN % kEpiN == 0 && kTileM % kEpiM == 0, "subtiles divide the CTA tile");

  using StrideOut = cute::Stride<int64_t, cute::_1, int64_t>;
  // One subtile of outputs per stage, row-major, no swizzle (TMA's SWIZZLE_NONE).
  using SmemLayoutTma = cute::Layout<cute::Shape<cute::Int<kEpiM>, cute::Int<kHalfN>>,
                                     cute::Stride<cute::Int<kHalfN>, cute::_1>>;
  using SmemLayout =
      cute::Layout<cute::Shape<cute::Int<kEpiM>, cute::Int<kHalfN>, cute::Int<kStages>>,
                   cute::Stride<cute::Int<kHalfN>, cute::_1, cute::Int<kEpiM * kHalfN>>>;

  struct SharedStorage {
    alignas(128) cute::array_aligned<ElementOut, cute::cosize_v<SmemLayout>> smem_out;
  };

  struct Arguments {
    ElementOut* ptr_out = nullptr;  // D, M×(N/2)
    int64_t ld_out = 0;             // D's leading dimension (row-major)
    int64_t batch_stride = 0;       // elements between batches of D
  };

  struct Params {
    using TmaOut = decltype(cute::make_tma_copy(
        cute::SM90_TMA_STORE{},
        cute::make_tensor(static_cast<ElementOut*>(nullptr),
                          cute::repeat_like(StrideOut{}, int32_t(0)), StrideOut{}),
        SmemLayoutTma{}));
    TmaOut tma_out;
  };

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const& problem_shape,
                                                  Arguments const& args, void*) {
    auto [M, N, K, L] = cute::append<4>(problem_shape, 1);
    StrideOut stride{};
    cute::get<0>(stride) = args.ld_out;
    cute::get<2>(stride) = args.batch_stride;
    auto out = cute::make_tensor(args.ptr_out, cute::make_layout(cute::make_shape(M, N / 2, L), stride));
    return {cute::make_tma_copy(cute::SM90_TMA_STORE{}, out, SmemLayoutTma{})};
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto [M, N, K, L] = cute::append<4>(problem_shape, 1);
    constexpr int64_t vector = 16 / int64_t(sizeof(ElementOut));
    return N % 2 == 0 && args.ptr_out != nullptr &&
           (reinterpret_cast<uintptr_t>(args.ptr_out) % 16) == 0 && args.ld_out % vector == 0 &&
           args.batch_stride % vector == 0 && args.ld_out >= N / 2;
  }

  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) { return 0; }

  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*,
                                              cudaStream_t, cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE Sm90GluStore() {}
  CUTLASS_HOST_DEVICE Sm90GluStore(Params const& params, SharedStorage const& shared_storage)
      : params_ptr(&params), smem_out(const_cast<ElementOut*>(shared_storage.smem_out.data())) {}

  Params const* params_ptr = nullptr;
  ElementOut* smem_out = nullptr;

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(
      cutlass::epilogue::fusion::ProducerLoadArgs<Args...> const&) {
    return cutlass::epilogue::fusion::EmptyProducerLoadCallbacks{};
  }

  template <class CTensor, class STensor, class GTensor, int kPerSubtile>
  struct ConsumerStoreCallbacks : cutlass::epilogue::fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(CTensor&& tC_cTile, STensor&& bSG_s, GTensor&& bSG_g,
                                          ElementOut* smem, Params const* params)
        : tC_cTile(cute::forward<CTensor>(tC_cTile)),
          bSG_s(cute::forward<STensor>(bSG_s)),
          bSG_g(cute::forward<GTensor>(bSG_g)),
          smem(smem),
          params(params) {}

    CTensor tC_cTile;  // (CPY,CPY_M,CPY_N,EPI_M,EPI_N): (m, n) in the CTA tile of each element
    STensor bSG_s;     // (TMA,TMA_M,TMA_N,PIPE)
    GTensor bSG_g;     // (TMA,TMA_M,TMA_N,EPI_M,EPI_N)
    ElementOut* smem;
    Params const* params;
    cutlass::Array<ElementOut, kPerSubtile / 2> out;  // this subtile's act(gate) · up, in order

    template <class ElementAccumulator, class ElementInput, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<ElementInput, FragmentSize> visit(
        cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v, int, int,
        cutlass::Array<ElementInput, FragmentSize> const& frg_input) {
      static_assert(FragmentSize % 2 == 0, "a visit fragment holds whole (gate, up) pairs");
      ActivationFn<ElementCompute> activation;
      cutlass::NumericConverter<ElementOut, ElementCompute, kRound> convert;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; i += 2) {
        const ElementCompute gate = ElementCompute(frg_input[i]);
        const ElementCompute up = ElementCompute(frg_input[i + 1]);
        out[(epi_v * FragmentSize + i) / 2] = convert(activation(gate) * up);
      }
      return frg_input;
    }

    CUTLASS_DEVICE void postreduce(int epi_m, int epi_n, int store_iteration, bool issue_smem_store) {
      if (!issue_smem_store) return;
      ElementOut* stage = smem + (store_iteration % kStages) * (kEpiM * kHalfN);
      auto coords = tC_cTile(cute::_, cute::_, cute::_, epi_m, epi_n);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kPerSubtile; i += 2) {
        const auto coord = coords(i);  // the gate's (m, n); the up is (m, n + 1)
        const int row = int(cute::get<0>(coord)) % kEpiM;
        const int column = (int(cute::get<1>(coord)) % kEpiN) / 2;
        stage[row * kHalfN + column] = out[i / 2];
      }
    }

    CUTLASS_DEVICE void tma_store(int epi_m, int epi_n, int store_iteration, bool issue_tma_store) {
      if (issue_tma_store) {
        cute::copy(params->tma_out, bSG_s(cute::_, cute::_, cute::_, store_iteration % kStages),
                   bSG_g(cute::_, cute::_, cute::_, epi_m, epi_n));
      }
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(
      cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const& args) {
    using namespace cute;
    static_assert(size<0>(decltype(args.epi_tile){}) == kEpiM &&
                      size<1>(decltype(args.epi_tile){}) == kEpiN,
                  "the epilogue subtile the kernel uses is the one this node was built for");
    auto [M, N, K, L] = args.problem_shape_mnkl;
    auto [m, n, k, l] = args.tile_coord_mnkl;
    // Coordinates (m, n) in the CTA tile of every element a thread holds, partitioned as the
    // accumulator fragments are (element epi_v * FragmentSize + i of subtile (epi_m, epi_n) is
    // fragment element i of visit epi_v, as for every CUTLASS EVT node).
    Tensor cTile = make_identity_tensor(take<0, 2>(args.tile_shape_mnk));
    Tensor tC_cTile = cutlass::epilogue::fusion::sm90_partition_for_epilogue<ReferenceSrc>(
        cTile, args.epi_tile, args.tiled_copy, args.thread_idx);  // (CPY,CPY_M,CPY_N,EPI_M,EPI_N)
    constexpr int kPerSubtile = decltype(size(take<0, 3>(shape(tC_cTile))))::value;
    static_assert(kPerSubtile % 2 == 0, "whole pairs per subtile");

    Tensor mOut = params_ptr->tma_out.get_tma_tensor(make_shape(M, N / 2, L));  // (M,N/2,L)
    Tensor gOut = local_tile(mOut, make_shape(Int<kTileM>{}, Int<kTileN / 2>{}), make_coord(m, n, l));
    Tensor gOut_epi = flat_divide(gOut, make_shape(Int<kEpiM>{}, Int<kHalfN>{}));  // (EPI_M',N',EPI_M,EPI_N)
    Tensor sOut_epi = make_tensor(make_smem_ptr(smem_out), SmemLayout{});        // (EPI_M',N',PIPE)
    ThrCopy thrblk_s2g = params_ptr->tma_out.get_slice(_0{});
    Tensor bSG_s = thrblk_s2g.partition_S(sOut_epi);
    Tensor bSG_g = thrblk_s2g.partition_D(gOut_epi);
    return ConsumerStoreCallbacks<decltype(tC_cTile), decltype(bSG_s), decltype(bSG_g), kPerSubtile>(
        cute::move(tC_cTile), cute::move(bSG_s), cute::move(bSG_g), smem_out, params_ptr);
  }
};

}  // namespace fact::gemm::epilogue::detail
