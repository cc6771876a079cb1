// Which tile a CTA of the attention kernel (fmha_sm90.cuh) computes next: tile index ->
// (m block, head, batch) in one of two orders, and the persistent walk over the tiles, by a
// static stride or through an atomic counter (dynamic: the producer warp takes the next index
// and hands it to the consumers through shared memory and two named barriers).
#pragma once

#include "cute/tensor.hpp"
#include "patterns/attention/fmha_sm90_barriers.cuh"

namespace fact::attention {

// One CTA tile: query rows [m * kBlockM, (m + 1) * kBlockM) of head h of batch b.
struct TileCoord {
  int m, h, b;
};

template <class Traits>
struct TileScheduler {
  using Params = typename Traits::Params;
  static constexpr bool kCausal = Traits::kCausal;
  static constexpr bool kDynamic = Traits::kDynamic;
  static constexpr int kProducerSyncThreads = Traits::kProducerSyncThreads;

  // Tile index -> (m block, head, batch): sections of `section` (batch, head) pairs in order;
  // inside a section the heads vary fastest and the m blocks go longest-first (causal).
  CUTE_DEVICE static TileCoord tile_coord(Params const& p, int t) {
    if constexpr (Traits::kTileOrder == 1) {
      // Head-major: each (batch, head)'s m blocks back to back (longest first), so the CTAs that
      // share K and V run at the same time and meet in L2; heads sharing a KV head are adjacent.
      int const hb = t / p.num_m_blocks;
      int const m_rev = t - hb * p.num_m_blocks;
      int const b = hb / p.heads;
      TileCoord c;
      c.b = b;
      c.h = hb - b * p.heads;
      c.m = kCausal ? p.num_m_blocks - 1 - m_rev : m_rev;
      return c;
    }
    int const sec_tiles = p.section * p.num_m_blocks;
    int const s = t / sec_tiles;
    int const r = t - s * sec_tiles;
    int const start = s * p.section;
    int const here = min(p.section, p.hb_total - start);
    int const m_rev = r / here;
    int const hb = start + (r - m_rev * here);
    int const b = hb / p.heads;
    TileCoord c;
    c.b = b;
    c.h = hb - b * p.heads;
    c.m = kCausal ? p.num_m_blocks - 1 - m_rev : m_rev;
    return c;
  }

  // Every CTA starts with its own index; the grid is SMs x CTAs per SM (persistent) or tiles.
  CUTE_DEVICE static int first_tile() { return int(blockIdx.x); }

  // The producer warp (all 32 lanes): the tile after `tile`; with the dynamic schedule lane 0
  // takes it from the counter and publishes it in `next_tile` once the consumers have read the
  // previous one.
  CUTE_DEVICE static int producer_next_tile(Params const& params, int& next_tile, int tile, int lane) {
    using namespace detail;
    if constexpr (kDynamic) {
      int next = 0;
      if (lane == 0) next = atomicAdd(params.tile_counter, 1) + int(gridDim.x);
      next = __shfl_sync(0xffffffff, next, 0);
      named_sync(kBarTileEmpty, kProducerSyncThreads);
      if (lane == 0) next_tile = next;
      named_arrive(kBarTileFull, kProducerSyncThreads);
      return next;
    } else {
      return tile + int(gridDim.x);
    }
  }

  // The consumers, once before their first tile: the slot `next_tile` is free to write.
  CUTE_DEVICE static void consumer_start() {
    if constexpr (kDynamic) detail::named_arrive(detail::kBarTileEmpty, kProducerSyncThreads);
  }

  // The consumers: the tile after `tile`, from the producer (dynamic) or by stride.
  CUTE_DEVICE static int consumer_next_tile(int const& next_tile, int tile) {
    using namespace detail;
    if constexpr (kDynamic) {
      named_sync(kBarTileFull, kProducerSyncThreads);
      int const next = next_tile;
      named_arrive(kBarTileEmpty, kProducerSyncThreads);
      return next;
    } else {
      return tile + int(gridDim.x);
    }
  }
};

}  // namespace fact::attention
