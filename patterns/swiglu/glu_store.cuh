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
// How it stores (patterns/gemm/gemm_root_store.cuh: a void D, this node the tree's root owning
// the output, TMA stores of EPI_M × EPI_N/2 blocks from shared memory in the collective's store
// stages), one block per stage:
//   visit       act(gate) · up for each pair of the fragment, kept in registers (output type)
//   postreduce  each thread writes its results into the stage's block at (row, column / 2)
//   tma_store   the issuing warp stores the block with TMA into D (clipped at M and N/2)
#pragma once
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"
#include "cutlass/numeric_conversion.h"

#include "patterns/gemm/gemm_root_store.cuh"

namespace fact::gemm::epilogue::detail {

template <class CtaTile, class EpilogueTile, class ElementOut, class ElementCompute,
          template <class> class ActivationFn, cutlass::FloatRoundStyle kRound>
struct Sm90GluStore : Sm90RootStore<CtaTile, EpilogueTile, ElementOut, 1> {
  using Base = Sm90RootStore<CtaTile, EpilogueTile, ElementOut, 1>;
  using Base::Base;
  using typename Base::Params;
  using Base::kTileM, Base::kTileN, Base::kEpiM, Base::kEpiN, Base::kHalfN, Base::kStages;
  static_assert(kEpiN % 16 == 0, "a gated subtile holds whole 16-byte rows of outputs");

  struct Arguments {
    ElementOut* ptr_out = nullptr;  // D, M×(N/2)
    int64_t ld_out = 0;             // D's leading dimension (row-major)
    int64_t batch_stride = 0;       // elements between batches of D
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void*) {
    auto [M, N, K, L] = cute::append<4>(problem_shape, 1);
    Params params;
    params.tma_out = Base::make_tma_out(args.ptr_out, cute::make_shape(M, N / 2, L), args.ld_out, args.batch_stride);
    return params;
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto [M, N, K, L] = cute::append<4>(problem_shape, 1);
    return N % 2 == 0 && Base::storable(args.ptr_out, args.ld_out, args.batch_stride) && args.ld_out >= N / 2;
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
    auto [M, N, K, L] = args.problem_shape_mnkl;
    auto [m, n, k, l] = args.tile_coord_mnkl;
    Tensor tC_cTile = Base::template tile_coordinates<ReferenceSrc>(args);  // (CPY,CPY_M,CPY_N,EPI_M,EPI_N)
    constexpr int kPerSubtile = decltype(size(take<0, 3>(shape(tC_cTile))))::value;
    static_assert(kPerSubtile % 2 == 0, "whole pairs per subtile");

    Tensor mOut = this->params_ptr->tma_out.get_tma_tensor(make_shape(M, N / 2, L));  // (M,N/2,L)
    Tensor gOut = local_tile(mOut, make_shape(Int<kTileM>{}, Int<kTileN / 2>{}), make_coord(m, n, l));
    Tensor gOut_epi = flat_divide(gOut, make_shape(Int<kEpiM>{}, Int<kHalfN>{}));  // (EPI_M',N',EPI_M,EPI_N)
    Tensor bSG_s = this->staged_blocks();                                         // (TMA,TMA_M,TMA_N,PIPE)
    Tensor bSG_g = this->params_ptr->tma_out.get_slice(_0{}).partition_D(gOut_epi);
    return ConsumerStoreCallbacks<decltype(tC_cTile), decltype(bSG_s), decltype(bSG_g), kPerSubtile>(
        cute::move(tC_cTile), cute::move(bSG_s), cute::move(bSG_g), this->smem_out, this->params_ptr);
  }
};

}  // namespace fact::gemm::epilogue::detail
