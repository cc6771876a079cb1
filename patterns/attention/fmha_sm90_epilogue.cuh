// The attention kernel's epilogue (fmha_sm90.cuh), per consumer warpgroup and tile: the LSE rows
// (plain stores), then O (already normalized) converted, written to shared memory with stmatrix
// and stored by one TMA per warpgroup into the strided output; rows that see no key get O = 0.
// O is staged in its own buffer or (kOAliasQ) in the tile's Q stage, which then goes back to
// the producer only once the store has left it.
#pragma once

#include <cstdint>

#include "cute/tensor.hpp"
#include "cute/arch/copy_sm90.hpp"
#include "cute/atom/copy_traits_sm90_tma.hpp"
#include "cutlass/arch/barrier.h"
#include "patterns/attention/fmha_sm90_barriers.cuh"
#include "patterns/attention/fmha_sm90_fragments.cuh"
#include "patterns/attention/fmha_sm90_tile_scheduler.cuh"

namespace fact::attention {

using namespace cute;

// A thread's (row, col) coordinates of a 64 x D O accumulator, as (rows, cols).
template <class Traits, class ThrMma>
CUTE_DEVICE auto o_coordinates(ThrMma const& thr_pv) {
  Tensor tOcO = thr_pv.partition_C(make_identity_tensor(Shape<_64, Int<Traits::D>>{}));
  return make_tensor(tOcO.data(), detail::acc_rowcol(tOcO.layout()));
}

// A view of the consumer warpgroup's epilogue state (O's staging slabs, this thread's O
// coordinates, the Q stage still held by a store): the kernel owns it.
template <class Traits, class TensorSO, class CoordinatesO>
struct Epilogue {
  using Element = typename Traits::Element;
  using Params = typename Traits::Params;
  using SharedStorage = typename Traits::SharedStorage;
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int D = Traits::D;
  static constexpr int kRows = Traits::kRows;
  static constexpr int kNumWG = Traits::kNumWG;
  static constexpr int kQStages = Traits::kQStages;
  static constexpr bool kOAliasQ = Traits::kOAliasQ;

  SharedStorage& ss;
  TensorSO const& sO;             // O staging (64, D, slab): its own slabs or the Q ring's
  CoordinatesO const& tOcO_rc;    // this thread's (row, col) of each O element
  typename Traits::MmaPV& mma_pv;  // PV's MMA: O's register layout
  int const& cwg;                 // consumer warpgroup
  int const& tid;                 // thread in the warpgroup
  // kOAliasQ with several Q stages: the Q stage whose staged O is still being stored (-1: none);
  // released to the producer after the next tile's first QK^T (the store is long done by then),
  // so the next Q loads are not held up behind this tile's epilogue.
  int& q_pending;

  // Called after the next tile's first QK^T: the previous tile's Q stage (kOAliasQ) goes back.
  CUTE_DEVICE void release_q_pending() {
    if constexpr (kOAliasQ && kQStages > 1) {
      if (q_pending >= 0) {
        if (tid == 0) {
          tma_store_wait<0>();  // the previous tile's O has left its Q stage
          cutlass::arch::ClusterBarrier::arrive(&ss.q_empty[q_pending]);
        }
        q_pending = -1;
      }
    }
  }

  // Tile c's LSE rows and normalized O (tOrO, float32) of the warpgroup whose first row is
  // row0; q_stage: the tile's Q stage; has_keys: false when its rows see no key.
  template <class TensorO>
  CUTE_DEVICE void store(Params const& params, TileCoord const& c, int row0, int q_stage, bool has_keys,
                         float const* lse_rows, TensorO const& tOrO) {
    using namespace detail;
    if (params.lse != nullptr && (tid % 4) == 0) {
      float* lse = params.lse + int64_t(c.b) * params.lse_batch_stride + int64_t(c.h) * params.lse_head_stride;
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) {
        int const row = row0 + int(get<0>(tOcO_rc(r, 0)));
        if (row < params.seq_q) lse[row] = lse_rows[r];
      }
    }
    if (!has_keys) {
      // Rows that see no key: O = 0, written directly (no Q stage is held for this tile).
      Element* o = params.o + int64_t(c.b) * params.o_batch_stride + int64_t(c.h) * params.o_head_stride;
      for (int i = tid; i < 64 * (kHeadDim / 8); i += 128) {
        int const row = row0 + i / (kHeadDim / 8);
        if (row < params.seq_q) {
          *reinterpret_cast<uint4*>(o + int64_t(row) * params.o_seq_stride + (i % (kHeadDim / 8)) * 8) = make_uint4(0, 0, 0, 0);
        }
      }
      return;
    }
    int const slab = kOAliasQ ? q_stage * kNumWG + cwg : cwg;
    Tensor tOrOe = make_tensor<Element>(tOrO.layout());
    pack_accumulator<Element>(tOrO, tOrOe);
    if constexpr (!kOAliasQ) {
      if (tid == 0) tma_store_wait<0>();  // the previous tile's store has read sO
    }
    named_sync(kBarEpilogue0 + cwg, 128);
    auto r2s = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma_pv);
    auto thr_r2s = r2s.get_thread_slice(tid);
    Tensor src = thr_r2s.retile_S(tOrOe);
    Tensor dst = thr_r2s.partition_D(sO(_, _, slab));
    copy(r2s, src, dst);
    cutlass::arch::fence_view_async_shared();
    named_sync(kBarEpilogue0 + cwg, 128);
    if (tid == 0) {
      Tensor mO = params.tma_o.get_tma_tensor(make_shape(params.seq_q, int(D), params.heads, params.batch));
      Tensor gO = local_tile(mO(_, _, c.h, c.b), Shape<_64, Int<D>>{}, make_coord(_, 0));
      auto cta_o = params.tma_o.get_slice(0);
      Tensor tOsO = group_modes<0, 3>(cta_o.partition_S(sO));  // (TMA, slab)
      Tensor tOgO = group_modes<0, 3>(cta_o.partition_D(gO));  // (TMA, 64-row block)
      copy(params.tma_o, tOsO(_, slab), tOgO(_, c.m * kNumWG + cwg));
      tma_store_arrive();
      if constexpr (kOAliasQ && kQStages == 1) {
        tma_store_wait<0>();  // O has left the Q slab: the next Q may land there
        cutlass::arch::ClusterBarrier::arrive(&ss.q_empty[0]);
      }
    }
    if constexpr (kOAliasQ && kQStages > 1) q_pending = q_stage;
  }

  // After the last tile: the last O store has left shared memory.
  CUTE_DEVICE void drain() const {
    if (tid == 0) tma_store_wait<0>();
  }
};

}  // namespace fact::attention
