// The attention kernel's score mask (fmha_sm90.cuh): on one warpgroup's 64 x kBlockN scores,
// -inf for the key tail (cols >= seq_k), above the causal diagonal (col > row + diag_offset) and,
// with a sliding window, below it (col <= row + diag_offset - window). Only the key blocks that
// need it are masked (fmha_sm90_key_blocks.cuh).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "cute/tensor.hpp"
#include "patterns/attention/fmha_sm90_fragments.cuh"

namespace fact::attention {

// A thread's (row, col) coordinates of a 64 x kBlockN score accumulator, as (rows, cols).
template <class Traits, class ThrMma>
CUTE_DEVICE auto score_coordinates(ThrMma const& thr_qk) {
  using namespace cute;
  Tensor tScS = thr_qk.partition_C(make_identity_tensor(Shape<_64, Int<Traits::kBlockN>>{}));
  return make_tensor(tScS.data(), detail::acc_rowcol(tScS.layout()));
}

// A view of the consumer thread's score coordinates (the kernel owns them).
template <class Traits, class Coordinates>
struct ScoreMask {
  using Params = typename Traits::Params;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kRows = Traits::kRows;
  static constexpr int kCols = Traits::kCols;
  static_assert(decltype(cute::size<0>(std::declval<Coordinates>()))::value == kRows, "two rows per thread");

  Params const& params;
  Coordinates const& tScS_rc;   // this thread's (row, col) of each score
  Coordinates const& tScS0_rc;  // thread 0's: its columns are offsets common to every thread
  int const& col_first;         // this thread's first column

  // Masks key block n of the warpgroup whose first query row is row0: the causal diagonal and the
  // window's lower edge (kMaskCausal) and the key tail (kMaskTail).
  // A thread's columns are its first column plus offsets that are the same for every thread
  // (thread 0's): compared as immediates, they hold no registers across the loop.
  template <bool kMaskCausal, bool kMaskTail, class TensorS>
  CUTE_DEVICE void apply(TensorS& tSrS, int n, int row0) const {
    using namespace cute;
    Tensor s = make_tensor(tSrS.data(), detail::acc_rowcol(tSrS.layout()));
    int const col0 = n * kBlockN + col_first;
    // limit and lower are relative to the thread's first column, like the offsets compared
    // with them (0 to kBlockN - 1): kBlockN and -kBlockN bound nothing.
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      int limit = kMaskTail ? params.seq_k - col0 : kBlockN;
      int lower = -kBlockN;
      if constexpr (kMaskCausal) {
        int const row = row0 + int(get<0>(tScS_rc(r, 0)));
        limit = min(limit, row + params.diag_offset + 1 - col0);
        if (params.window > 0) lower = row + params.diag_offset + 1 - params.window - col0;
      }
      CUTE_UNROLL
      for (int j = 0; j < kCols; ++j) {
        int const col = int(get<1>(tScS0_rc(r, j)));  // a constant
        if (col >= limit || col < lower) s(r, j) = -INFINITY;
      }
    }
  }
};

// The key mask (Config::kKeyMask): a boolean mask per (batch entry, key) that every query and
// head shares (a padding mask). Each warp reads a key block's mask bytes once, four per lane
// (lane L: columns 4L .. 4L + 3), and four ballots give the warp every column's bit; each thread
// then takes its own columns (2q, 2q + 1, 8 + 2q, ... for q = lane % 4, the wgmma accumulator's
// layout) into one word, bit 2i + e for column 8i + 2q + e (load, issued before the block's QK^T
// completes). `all` says whether the block hides no key, so that most blocks skip apply(), which
// sets the scores of hidden columns to -inf. Keys past seq_k are hidden, so the key tail needs no
// other mask.
template <class Traits, class Coordinates>
struct KeyMask {
  using Params = typename Traits::Params;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kRows = Traits::kRows;
  static constexpr int kCols = Traits::kCols;
  static_assert(!Traits::kKeyMask || (kBlockN % 8 == 0 && kBlockN <= 128),
                "one 4-byte read per lane covers a key block");
  static_assert(kCols == kBlockN / 4, "two columns in every 8 per thread (wgmma accumulators)");

  struct Bits {
    uint32_t word;  // bit 2i + e: column 8i + 2q + e of the block is visible
    bool all;       // every column of the block is visible (warp-uniform)
  };

  Params const& params;
  Coordinates const& tScS0_rc;  // thread 0's (row, col) of each score: common column offsets

  CUTE_DEVICE Bits load(int n, int b) const {
    int const lane = int(threadIdx.x) % 32;
    uint8_t const* row = params.key_mask + int64_t(b) * params.key_mask_batch_stride;
    bool const keep = params.key_mask_keep != 0;
    int const col0 = n * kBlockN + 4 * lane;
    uint32_t ballots[4];
    CUTE_UNROLL
    for (int k = 0; k < 4; ++k) {
      int const col = col0 + k;
      bool visible = false;
      if (4 * lane + k < kBlockN && col < params.seq_k) {
        visible = (__ldg(row + int64_t(col) * params.key_mask_seq_stride) != 0) == keep;
      }
      ballots[k] = __ballot_sync(0xffffffffu, visible);
    }
    constexpr uint32_t kUsedLanes = kBlockN >= 128 ? 0xffffffffu : (1u << (kBlockN / 4)) - 1u;
    bool const all = ((ballots[0] & ballots[1] & ballots[2] & ballots[3]) & kUsedLanes) == kUsedLanes;
    // Column c = 8i + 2q + e is lane 2i + q/2's byte 2(q % 2) + e.
    int const q = lane % 4;
    uint32_t const x0 = ((q & 1) ? ballots[2] : ballots[0]) >> (q >> 1);
    uint32_t const x1 = ((q & 1) ? ballots[3] : ballots[1]) >> (q >> 1);
    return {(x0 & 0x55555555u) | ((x1 & 0x55555555u) << 1), all};
  }

  template <class TensorS>
  CUTE_DEVICE void apply(TensorS& tSrS, Bits bits) const {
    using namespace cute;
    if (bits.all) return;
    Tensor s = make_tensor(tSrS.data(), detail::acc_rowcol(tSrS.layout()));
    CUTE_UNROLL
    for (int j = 0; j < kCols; ++j) {
      int const offset = int(get<1>(tScS0_rc(0, j)));  // 8i + e: a constant
      int const bit = (offset / 8) * 2 + offset % 8;
      if (((bits.word >> bit) & 1u) == 0) {
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) s(r, j) = -INFINITY;
      }
    }
  }
};

}  // namespace fact::attention
