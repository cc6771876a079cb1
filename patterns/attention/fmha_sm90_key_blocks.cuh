// The key blocks one tile of the attention kernel (fmha_sm90.cuh) sees and which of them need a
// mask: [n_block_min, n_block_max) under the causal diagonal and a sliding window; blocks below
// n_block_window cross the window's lower edge. Producer and consumers walk the same blocks, from
// n_max - 1 down.
#pragma once

#include "cute/tensor.hpp"

namespace fact::attention {

namespace detail {
CUTE_HOST_DEVICE int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
}  // namespace detail

template <class Traits>
struct KeyBlocks {
  using Params = typename Traits::Params;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr bool kCausal = Traits::kCausal;
  static constexpr bool kWindows = Traits::kWindows;

  // First key block; n_max <= n_min: none (rows that see no key).
  CUTE_DEVICE static int n_block_min(Params const& p, int m) {
    if constexpr (!kWindows) {
      return 0;
    } else {
      if (p.window <= 0) return 0;
      return max(0, detail::floor_div(m * kBlockM + p.diag_offset - p.window + 1, kBlockN));
    }
  }
  // Sliding window: blocks n < n_block_window hold keys below some row's window (masked there).
  CUTE_DEVICE static int n_block_window(Params const& p, int m) {
    if constexpr (!kWindows) {
      return 0;
    } else {
      if (p.window <= 0) return 0;
      int const last_row = min((m + 1) * kBlockM, p.seq_q) - 1;
      return max(0, detail::floor_div(last_row + p.diag_offset - p.window + kBlockN, kBlockN));
    }
  }
  // One past the last key block.
  CUTE_DEVICE static int n_block_max(Params const& p, int m) {
    if constexpr (!kCausal) {
      return p.num_n_blocks;
    } else {
      int const last_row = min((m + 1) * kBlockM, p.seq_q) - 1;
      return min(p.num_n_blocks, detail::floor_div(last_row + p.diag_offset, kBlockN) + 1);
    }
  }
};

}  // namespace fact::attention
