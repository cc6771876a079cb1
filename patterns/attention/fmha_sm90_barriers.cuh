// Synchronization of the attention kernel's warps (fmha_sm90.cuh): the named barrier ids, the
// mbarrier arrive the consumers release ring slots with, and the position in a ring of slots.
// The mbarriers themselves live in the shared storage (fmha_sm90_shared_storage.cuh).
#pragma once

#include <cstdint>

#include "cute/tensor.hpp"

namespace fact::attention::detail {

// Named barrier ids (0 is __syncthreads; 1-4 unused). 16 exist in hardware.
enum : int {
  kBarTileFull = 5,    // dynamic schedule: next tile index written to smem
  kBarTileEmpty = 6,   // dynamic schedule: next tile index read
  kBarEpilogue0 = 7,   // 7, 8, 9: per consumer WG epilogue
};

CUTE_DEVICE void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
CUTE_DEVICE void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// mbarrier arrive by the threads with `pred`, without a branch around it (a branch splits the
// scheduling region between a wgmma's issue and its wait).
CUTE_DEVICE void mbar_arrive_if(uint64_t* bar, bool pred) {
  uint32_t const addr = cute::cast_smem_ptr_to_uint(bar);
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %1, 0;\n\t@p mbarrier.arrive.shared::cta.b64 _, [%0];\n\t}"
      ::"r"(addr), "r"(int(pred)) : "memory");
}

// A slot of a ring of kStages buffers and the phase its full/empty mbarriers are in.
struct PipeState {
  int index = 0;
  uint32_t phase = 0;
  template <int kStages>
  CUTE_DEVICE void advance() {
    if (++index == kStages) {
      index = 0;
      phase ^= 1u;
    }
  }
};

}  // namespace fact::attention::detail
