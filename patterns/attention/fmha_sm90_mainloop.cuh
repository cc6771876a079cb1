// The attention kernel's main loop (fmha_sm90.cuh): the producer warp's TMA loads of a tile's Q
// and its K/V blocks into the rings, the shared-memory views of the rings, and the warpgroup
// GEMM the consumers issue (S = Q K^T, SS wgmma; O += P V, RS wgmma with P from registers).
// The consumers' pipelined loop over the key blocks is the kernel's (fmha_sm90.cuh: consume):
// as a separate struct it changed where ptxas places the loop's index arithmetic.
#pragma once

#include <cstdint>
#include "cute/tensor.hpp"
#include "cute/arch/copy_sm90.hpp"
#include "cute/atom/copy_traits_sm90_tma.hpp"
#include "cute/atom/mma_traits_sm90_gmma.hpp"
#include "cutlass/arch/barrier.h"
#include "patterns/attention/fmha_sm90_barriers.cuh"
#include "patterns/attention/fmha_sm90_fragments.cuh"
#include "patterns/attention/fmha_sm90_tile_scheduler.cuh"

namespace fact::attention {

using namespace cute;

namespace detail {

// One warpgroup GEMM: C (+)= A B over all k blocks, as one wgmma batch.
// kKBlocks > 0: only the first kKBlocks k-blocks (a padded tile's zero columns are skipped).
template <bool kZeroInit, int kWait, int kKBlocks = 0, class TiledMma, class TA, class TB, class TC>
CUTE_DEVICE void wg_gemm(TiledMma& mma, TA const& a, TB const& b, TC& c) {
  constexpr bool kRegA = !cute::is_base_of<GMMA::DescriptorIterator, typename TiledMma::FrgTypeA>::value;
  if constexpr (kRegA) warpgroup_fence_operand(const_cast<TA&>(a));
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  if constexpr (kZeroInit) mma.accumulate_ = GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int k = 0; k < (kKBlocks > 0 ? kKBlocks : int(size<2>(a))); ++k) {
    cute::gemm(mma, a(_, _, k), b(_, _, k), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  if constexpr (kWait >= 0) warpgroup_wait<kWait>();
  warpgroup_fence_operand(c);
  if constexpr (kRegA) warpgroup_fence_operand(const_cast<TA&>(a));
}

// Shared-memory views of the rings: Q (64, D, stage*WG), K (N, D, stage), V^T (D, N, stage).
template <class Traits>
CUTE_DEVICE auto smem_q(typename Traits::SharedStorage& ss) {
  return make_tensor(make_smem_ptr(ss.q.data()), typename Traits::SmemLayoutQ{});
}
template <class Traits>
CUTE_DEVICE auto smem_k(typename Traits::SharedStorage& ss) {
  return make_tensor(make_smem_ptr(ss.k.data()), typename Traits::SmemLayoutK{});
}
template <class Traits>
CUTE_DEVICE auto smem_v(typename Traits::SharedStorage& ss) {
  return make_tensor(make_smem_ptr(ss.v.data()), typename Traits::SmemLayoutV{});
}

}  // namespace detail

// ------------------------------------------------------------------------------------------------
// Producer: one warp; lane 0 issues every TMA load, all lanes keep the ring positions. A view of
// the producer's state (its lane and ring positions): the kernel owns it.
template <class Traits>
struct ProducerMainloop {
  using Params = typename Traits::Params;
  using SharedStorage = typename Traits::SharedStorage;
  static constexpr int D = Traits::D;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kNumWG = Traits::kNumWG;
  static constexpr int kStages = Traits::kStages;
  static constexpr int kQStages = Traits::kQStages;

  int const& lane;
  detail::PipeState& qw;  // next slot to fill in the Q ring
  detail::PipeState& kw;  // ... in the K ring
  detail::PipeState& vw;  // ... in the V ring

  // The tile's Q (one 64-row box per consumer warpgroup), then its key blocks n_max - 1 down to
  // n_min: K(n_max - 1), then K(n), V(n + 1) alternately, then V(n_min), the order the consumers
  // use them (K(n - 1) before V(n)).
  // Q first, then the first key block: Q's slot frees at the end of the tile before last (two Q
  // stages), K's only as this tile's blocks are consumed; 0.6-1% faster than K first (H200,
  // bench/results/attention-nvidia-h200-2026-11-27-qfirst.json).
  CUTE_DEVICE void load_tile(Params const& params, SharedStorage& ss, TileCoord const& c, int n_min, int n_max) {
    using namespace cute;
    Tensor mQ = params.tma_q.get_tma_tensor(make_shape(params.seq_q, int(D), params.heads, params.batch));
    Tensor mK = params.tma_k.get_tma_tensor(make_shape(params.seq_k, int(D), params.kv_heads, params.batch));
    Tensor mVt = params.tma_v.get_tma_tensor(make_shape(int(D), params.seq_k, params.kv_heads, params.batch));
    auto cta_q = params.tma_q.get_slice(0);
    auto cta_k = params.tma_k.get_slice(0);
    auto cta_v = params.tma_v.get_slice(0);
    Tensor tQsQ = group_modes<0, 3>(cta_q.partition_D(detail::smem_q<Traits>(ss)));  // (TMA, stage*WG)
    Tensor tKsK = group_modes<0, 3>(cta_k.partition_D(detail::smem_k<Traits>(ss)));  // (TMA, stage)
    Tensor tVsV = group_modes<0, 3>(cta_v.partition_D(detail::smem_v<Traits>(ss)));  // (TMA, stage)

    int const hk = c.h / params.group;
    Tensor gQ = local_tile(mQ(_, _, c.h, c.b), Shape<_64, Int<D>>{}, make_coord(_, 0));
    Tensor gK = local_tile(mK(_, _, hk, c.b), Shape<Int<kBlockN>, Int<D>>{}, make_coord(_, 0));
    Tensor gV = local_tile(mVt(_, _, hk, c.b), Shape<Int<D>, Int<kBlockN>>{}, make_coord(0, _));
    Tensor tQgQ = group_modes<0, 3>(cta_q.partition_S(gQ));  // (TMA, 64-row block)
    Tensor tKgK = group_modes<0, 3>(cta_k.partition_S(gK));  // (TMA, key block)
    Tensor tVgV = group_modes<0, 3>(cta_v.partition_S(gV));  // (TMA, key block)

    if (lane == 0) {
      cutlass::arch::ClusterBarrier::wait(&ss.q_empty[qw.index], qw.phase ^ 1u);
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.q_full[qw.index], Traits::kBytesQ);
      CUTE_UNROLL
      for (int w = 0; w < kNumWG; ++w) {
        copy(params.tma_q.with(ss.q_full[qw.index], 0, TMA::CacheHintSm90::EVICT_FIRST),
             tQgQ(_, c.m * kNumWG + w), tQsQ(_, qw.index * kNumWG + w));
      }
    }
    qw.template advance<kQStages>();
    load_block(params.tma_k, ss.k_full, ss.k_empty, Traits::kBytesK, tKgK, n_max - 1, tKsK, kw);
    for (int n = n_max - 2; n >= n_min; --n) {
      load_block(params.tma_k, ss.k_full, ss.k_empty, Traits::kBytesK, tKgK, n, tKsK, kw);
      load_block(params.tma_v, ss.v_full, ss.v_empty, Traits::kBytesV, tVgV, n + 1, tVsV, vw);
    }
    load_block(params.tma_v, ss.v_full, ss.v_empty, Traits::kBytesV, tVgV, n_min, tVsV, vw);
  }

 private:
  // Key block n of `blocks` (K or V^T in global memory, (TMA, key block)) into the ring's next
  // slot, once the consumers have released it.
  template <class Tma, class TensorSrc, class TensorDst>
  CUTE_DEVICE void load_block(Tma const& tma, uint64_t* full, uint64_t* empty, uint32_t bytes,
                              TensorSrc const& blocks, int n, TensorDst const& ring, detail::PipeState& w) {
    using namespace cute;
    if (lane == 0) {
      cutlass::arch::ClusterBarrier::wait(&empty[w.index], w.phase ^ 1u);
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&full[w.index], bytes);
      copy(tma.with(full[w.index], 0, TMA::CacheHintSm90::EVICT_LAST), blocks(_, n), ring(_, w.index));
    }
    w.template advance<kStages>();
  }
};

}  // namespace fact::attention
