// FACT's rotary-position-embedding epilogue node for CUTLASS's sm90 epilogue visitor tree (EVT):
// a projection GEMM x = A·W' whose output columns come in rotation pairs, and this node writes
// each pair rotated into its ORIGINAL columns of D (FACT_STEP_ROPE, gemm_abi.h):
//
//   pair p of a head of `group` columns sits in accumulator columns (2p, 2p+1) of that head;
//   its original columns are a = p, b = p + group/2 (rotate-half, the `transformers` form: the
//   weight's rows were permuted per head at plan time so that x_p and x_{p+h} are adjacent) or
//   a = 2p, b = 2p+1 (interleaved: the identity);
//   D[m, head + a] = x[2p]·cos[a] − x[2p+1]·sin[a],  D[m, head + b] = x[2p+1]·cos[b] + x[2p]·sin[b]
//   with the tables read at (sequence m / period, position m % period), in float from the
//   accumulator (after the steps before it: a bias permuted like the weight), rounded once.
//
// Why it works without a data exchange: as for the glu store (patterns/swiglu/glu_store.cuh), every wgmma
// accumulator fragment holds, for each thread, pairs of adjacent N columns (n, n+1) with n even,
// and the epilogue's register partition keeps them adjacent; the partition is checked for every
// thread of the kernels FACT builds (GluCompile.GluPartitionHoldsWholeColumnPairsInEveryThread in patterns/swiglu/tests).
//
// How it stores (patterns/gemm/gemm_root_store.cuh, as Sm90GluStore: a void D, this node the
// tree's root owning the output, TMA stores of EPI_M × EPI_N/2 blocks from shared memory in the
// collective's store stages), two blocks — the subtile's halves — per stage:
//   visit       keeps the subtile's values (float) in registers
//   postreduce  each thread rotates its pairs (cos / sin loaded from global memory, a table row
//               per output row) and writes the results into the stage's two halves:
//               rotate-half: a → half 0, b → half 1, both at column (n % EPI_N) / 2;
//               interleaved: the subtile as it is (half = (n % EPI_N) / (EPI_N/2)).
//   tma_store   the issuing warp stores each half with TMA into D (clipped at M and N):
//               rotate-half: the subtile starting at accumulator column n0 of head h0 (n0 − h0 =
//               c0, a multiple of EPI_N since EPI_N divides group) holds pairs [c0/2, c0/2 +
//               EPI_N/2), whose original columns are the runs [h0 + c0/2, +EPI_N/2) and
//               [h0 + group/2 + c0/2, +EPI_N/2); interleaved: [n0, n0 + EPI_N/2) and
//               [n0 + EPI_N/2, n0 + EPI_N).
//
// Requirements (can_implement): one batch (L = 1), group even and a divisor of N; rotate-half
// also needs EPI_N | group (a subtile inside one head; head dims 64, 96, 128, 256 with the
// 32-column subtiles EpilogueTileAuto picks); D 16-byte aligned with ld a multiple of 8 (16-bit).
#pragma once
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"
#include "cutlass/fast_math.h"
#include "cutlass/numeric_conversion.h"

#include "patterns/gemm/gemm_root_store.cuh"

namespace fact::gemm::epilogue::detail {

// The rope node's own parameters (its Params add the TMA store into D).
template <class ElementTable>
struct Sm90RopeTables {
  const ElementTable* cos = nullptr;
  const ElementTable* sin = nullptr;
  int64_t table_ld = 0, period_stride = 0;
  cutlass::FastDivmod period;  // m -> (sequence, position)
  cutlass::FastDivmod group;   // n -> (head, column in the head)
  int32_t half_group = 1, interleaved = 0;
};

template <class CtaTile, class EpilogueTile, class ElementOut, class ElementCompute,
          class ElementTable, cutlass::FloatRoundStyle kRound>
struct Sm90RopeStore : Sm90RootStore<CtaTile, EpilogueTile, ElementOut, 2, Sm90RopeTables<ElementTable>> {
  using Base = Sm90RootStore<CtaTile, EpilogueTile, ElementOut, 2, Sm90RopeTables<ElementTable>>;
  using Base::Base;
  using typename Base::Params;
  using Base::kTileM, Base::kTileN, Base::kEpiM, Base::kEpiN, Base::kHalfN, Base::kStages;

  // The placement rules, shared by the device code and the host check of every thread's pairs
  // (RopeCompile.RopeStorePlacesEveryPairInItsOriginalColumns, patterns/rope/tests/test_realize_rope_compile.cpp):
  //
  // The original columns (in the head) of the pair at accumulator column c (even, in the head).
  CUTLASS_HOST_DEVICE static void original_columns(int c, int half_group, bool interleaved, int& a, int& b) {
    a = interleaved ? c : c / 2;
    b = interleaved ? c + 1 : c / 2 + half_group;
  }
  // Where postreduce stages the pair whose first accumulator column in the subtile is `column`
  // (even): half and column of each of its two results.
  CUTLASS_HOST_DEVICE static void staged_at(int column, bool interleaved, int& half_a, int& col_a,
                                            int& half_b, int& col_b) {
    if (interleaved) {
      half_a = half_b = column / kHalfN;
      col_a = column % kHalfN;
      col_b = col_a + 1;
    } else {
      half_a = 0;
      half_b = 1;
      col_a = col_b = column / 2;
    }
  }
  // The original column where half h of the subtile starting at accumulator column n0 (a
  // multiple of EPI_N; head of `group` columns, n0_in_head = n0 mod group) lands.
  CUTLASS_HOST_DEVICE static int64_t half_first_column(int64_t n0, int n0_in_head, int half_group,
                                                       bool interleaved, int h) {
    if (interleaved) return n0 + h * kHalfN;
    return (n0 - n0_in_head) + n0_in_head / 2 + h * half_group;
  }

  struct Arguments {
    ElementOut* ptr_out = nullptr;        // D, M×N
    int64_t ld_out = 0;                   // D's leading dimension (row-major)
    const ElementTable* cos = nullptr;    // the tables: [sequence][position][column]
    const ElementTable* sin = nullptr;
    int64_t table_ld = 0;                 // elements between positions
    int64_t period = 0;                   // rows per sequence (position = m % period)
    int64_t period_stride = 0;            // elements between sequences' tables (0: shared)
    int32_t group = 0;                    // columns per head
    int32_t interleaved = 0;              // 1: pairs (2p, 2p+1); 0: rotate-half (p, p + group/2)
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void*) {
    auto [M, N, K, L] = cute::append<4>(problem_shape, 1);
    Params params;
    params.tma_out = Base::make_tma_out(args.ptr_out, cute::make_shape(M, N, L), args.ld_out, 0);  // one batch
    params.cos = args.cos;
    params.sin = args.sin;
    params.table_ld = args.table_ld;
    params.period_stride = args.period_stride;
    params.period = cutlass::FastDivmod(args.period > 0 ? int(args.period) : 1);
    params.group = cutlass::FastDivmod(args.group > 0 ? int(args.group) : 2);
    params.half_group = args.group > 0 ? args.group / 2 : 1;
    params.interleaved = args.interleaved;
    return params;
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto [M, N, K, L] = cute::append<4>(problem_shape, 1);
    const bool heads = args.group > 0 && args.group % 2 == 0 && N % args.group == 0 &&
                       (args.interleaved != 0 || args.group % kEpiN == 0);
    return L == 1 && heads && args.period > 0 && args.period <= INT32_MAX && M % args.period == 0 &&
           args.table_ld >= 0 && args.period_stride >= 0 && args.cos != nullptr && args.sin != nullptr &&
           Base::storable(args.ptr_out, args.ld_out, 0) && args.ld_out >= N;
  }

  template <class CTensor, class STensor, class MTensor, int kPerSubtile>
  struct ConsumerStoreCallbacks : cutlass::epilogue::fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(CTensor&& tC_cTile, STensor&& bSG_s, MTensor&& mOut,
                                          ElementOut* smem, Params const* params, int64_t row0,
                                          int64_t col0, int64_t rows, int64_t cols)
        : tC_cTile(cute::forward<CTensor>(tC_cTile)),
          bSG_s(cute::forward<STensor>(bSG_s)),
          mOut(cute::forward<MTensor>(mOut)),
          smem(smem),
          params(params),
          row0(row0),
          col0(col0),
          rows(rows),
          cols(cols) {}

    CTensor tC_cTile;  // (CPY,CPY_M,CPY_N,EPI_M,EPI_N): (m, n) in the CTA tile of each element
    STensor bSG_s;     // (TMA,TMA_M,TMA_N,HALF+2·PIPE)
    MTensor mOut;      // D's TMA coordinate tensor (M,N,L)
    ElementOut* smem;
    Params const* params;
    int64_t row0, col0;  // the CTA tile's first row and (accumulator) column
    int64_t rows, cols;  // M, N
    cutlass::Array<ElementCompute, kPerSubtile> x;  // this subtile's values, in fragment order

    template <class ElementAccumulator, class ElementInput, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<ElementInput, FragmentSize> visit(
        cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v, int, int,
        cutlass::Array<ElementInput, FragmentSize> const& frg_input) {
      static_assert(FragmentSize % 2 == 0, "a visit fragment holds whole rotation pairs");
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; ++i) x[epi_v * FragmentSize + i] = ElementCompute(frg_input[i]);
      return frg_input;
    }

    CUTLASS_DEVICE void postreduce(int epi_m, int epi_n, int store_iteration, bool issue_smem_store) {
      if (!issue_smem_store) return;
      ElementOut* stage = smem + (store_iteration % kStages) * (2 * kEpiM * kHalfN);
      cutlass::NumericConverter<ElementOut, ElementCompute, kRound> convert;
      const int half_group = params->half_group;
      const bool interleaved = params->interleaved != 0;
      auto coords = tC_cTile(cute::_, cute::_, cute::_, epi_m, epi_n);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kPerSubtile; i += 2) {
        const auto coord = coords(i);  // the pair's first (m, n) in the CTA tile; the second is n + 1
        const int tile_row = int(cute::get<0>(coord));
        const int tile_col = int(cute::get<1>(coord));
        const int m = int(row0) + tile_row;  // M, N < 2^31 (gemm_entry.cuh)
        const int n = int(col0) + tile_col;
        int head = 0, c = 0;  // c: the accumulator column in its head (even)
        params->group(head, c, n);
        int ca = 0, cb = 0;
        original_columns(c, half_group, interleaved, ca, cb);
        ElementCompute out_a = ElementCompute(0), out_b = ElementCompute(0);
        if (m < rows && n < cols) {
          int sequence = 0, position = 0;
          params->period(sequence, position, m);
          const int64_t table = int64_t(sequence) * params->period_stride +
                                int64_t(position) * params->table_ld;
          const ElementCompute xa = x[i], xb = x[i + 1];
          const ElementCompute cos_a = ElementCompute(params->cos[table + ca]);
          const ElementCompute sin_a = ElementCompute(params->sin[table + ca]);
          const ElementCompute cos_b = ElementCompute(params->cos[table + cb]);
          const ElementCompute sin_b = ElementCompute(params->sin[table + cb]);
          out_a = xa * cos_a - xb * sin_a;
          out_b = xb * cos_b + xa * sin_b;
        }
        const int row = tile_row % kEpiM;
        int half_a = 0, col_a = 0, half_b = 0, col_b = 0;
        staged_at(tile_col % kEpiN, interleaved, half_a, col_a, half_b, col_b);
        stage[half_a * (kEpiM * kHalfN) + row * kHalfN + col_a] = convert(out_a);
        stage[half_b * (kEpiM * kHalfN) + row * kHalfN + col_b] = convert(out_b);
      }
    }

    CUTLASS_DEVICE void tma_store(int epi_m, int epi_n, int store_iteration, bool issue_tma_store) {
      if (!issue_tma_store) return;
      using namespace cute;
      // The subtile's first row (in units of EPI_M rows) and the first columns of its halves
      // (in units of EPI_N/2 columns).
      const int64_t row_tile = (row0 + int64_t(epi_m) * kEpiM) / kEpiM;
      const int64_t n0 = col0 + int64_t(epi_n) * kEpiN;
      int head = 0, c0 = 0;
      params->group(head, c0, int(n0));
      ThrCopy thrblk_s2g = params->tma_out.get_slice(_0{});
      const int buffer = 2 * (store_iteration % kStages);
      CUTLASS_PRAGMA_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int64_t first = half_first_column(n0, c0, params->half_group, params->interleaved != 0, h);
        Tensor gHalf = local_tile(mOut, make_shape(Int<kEpiM>{}, Int<kHalfN>{}),
                                  make_coord(int(row_tile), int(first / kHalfN), 0));
        Tensor bSG_g = thrblk_s2g.partition_D(gHalf);  // (TMA,TMA_M,TMA_N)
        copy(params->tma_out, bSG_s(_, _, _, buffer + h), bSG_g);
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

    Tensor mOut = this->params_ptr->tma_out.get_tma_tensor(make_shape(M, N, L));  // (M,N,L)
    Tensor bSG_s = this->staged_blocks();                                         // (TMA,TMA_M,TMA_N,HALF+2·PIPE)
    return ConsumerStoreCallbacks<decltype(tC_cTile), decltype(bSG_s), decltype(mOut), kPerSubtile>(
        cute::move(tC_cTile), cute::move(bSG_s), cute::move(mOut), this->smem_out, this->params_ptr,
        int64_t(m) * kTileM, int64_t(n) * kTileN, int64_t(M), int64_t(N));
  }
};

}  // namespace fact::gemm::epilogue::detail
