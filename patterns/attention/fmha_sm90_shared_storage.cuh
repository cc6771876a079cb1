// The attention kernel's shared memory (fmha_sm90.cuh): the Q ring, the K and V rings, O's
// staging buffer, one full and one empty mbarrier per ring slot, and the next tile's index
// (dynamic schedule). realize/spec.cpp's shared_memory_bytes mirrors its size.
#pragma once

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"

namespace fact::attention {

// Buffers of kQElems, kKElems, kVElems and kOElems elements (kOElems 0: O staged in the Q ring),
// each 1024-byte aligned for the 128-byte swizzles.
template <class Element, int kQElems, int kKElems, int kVElems, int kOElems, int kQStages, int kStages>
struct FmhaSharedStorage {
  cute::array_aligned<Element, kQElems, 1024> q;
  cute::array_aligned<Element, kKElems, 1024> k;
  cute::array_aligned<Element, kVElems, 1024> v;
  cute::array_aligned<Element, kOElems, 1024> o;
  alignas(8) uint64_t q_full[kQStages];
  uint64_t q_empty[kQStages];
  uint64_t k_full[kStages];
  uint64_t k_empty[kStages];
  uint64_t v_full[kStages];
  uint64_t v_empty[kStages];
  int next_tile;

  // One thread, before the CTA's first __syncthreads: a full barrier completes with the
  // producer's arrival and the TMA bytes, an empty one with one arrival per consumer warpgroup.
  CUTE_DEVICE void init_barriers(int consumer_warpgroups) {
    CUTE_UNROLL
    for (int s = 0; s < kQStages; ++s) {
      cutlass::arch::ClusterBarrier::init(&q_full[s], 1);
      cutlass::arch::ClusterBarrier::init(&q_empty[s], consumer_warpgroups);
    }
    CUTE_UNROLL
    for (int s = 0; s < kStages; ++s) {
      cutlass::arch::ClusterBarrier::init(&k_full[s], 1);
      cutlass::arch::ClusterBarrier::init(&v_full[s], 1);
      cutlass::arch::ClusterBarrier::init(&k_empty[s], consumer_warpgroups);
      cutlass::arch::ClusterBarrier::init(&v_empty[s], consumer_warpgroups);
    }
    cutlass::arch::fence_barrier_init();
  }
};

}  // namespace fact::attention
