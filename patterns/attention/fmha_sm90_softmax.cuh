// The attention kernel's online softmax (fmha_sm90.cuh), in float32, for one warpgroup's 64 rows
// (two per thread, each spread over a quad of lanes): the running row maxima and sums, the
// factor that rescales O when a row's maximum grows, and the tile's final 1/rowsum and LSE.
#pragma once

#include <cmath>

#include "cute/tensor.hpp"
#include "patterns/attention/fmha_sm90_fragments.cuh"

namespace fact::attention {

namespace detail {
CUTE_DEVICE float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
}  // namespace detail

// A view of the consumer warpgroup's softmax state (its registers: the kernel owns them).
template <class Traits>
struct OnlineSoftmax {
  static constexpr int kRows = Traits::kRows;
  static constexpr int kCols = Traits::kCols;

  float (&row_max)[kRows];   // running row maxima (unscaled scores)
  float (&row_sum)[kRows];   // running row sums of P (this thread's columns)
  float const& scale_log2;   // softmax scale * log2(e)

  // One key block's scores tSrS become P = exp2(S*scale_log2 - max*scale_log2); o_scale gets the
  // factor by which O (and the running sum) must be rescaled. kFirst: the tile's first block
  // (no running state yet); kCheckInf: a row may be fully masked (its maximum -inf).
  template <bool kFirst, bool kCheckInf, class TensorS>
  CUTE_DEVICE void update(TensorS& tSrS, float* o_scale) {
    using namespace cute;
    using detail::fast_exp2;
    Tensor s = make_tensor(tSrS.data(), detail::acc_rowcol(tSrS.layout()));
    // Phase 1: row maxima (both rows, then the quad shuffles), rescale factors.
    float mx[kRows], max_scaled[kRows];
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      mx[r] = kFirst ? -INFINITY : row_max[r];
      CUTE_UNROLL
      for (int j = 0; j < kCols; ++j) mx[r] = fmaxf(mx[r], s(r, j));
    }
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffff, mx[r], 1));
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffff, mx[r], 2));
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float const cur = (kCheckInf && mx[r] == -INFINITY) ? 0.f : mx[r];
      o_scale[r] = kFirst ? 1.f : fast_exp2((row_max[r] - cur) * scale_log2);
      row_max[r] = mx[r];
      max_scaled[r] = cur * scale_log2;
    }
    // Phase 2: P = exp2(S*scale_log2 - max*scale_log2) and the running row sums.
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float sum = 0.f;
      CUTE_UNROLL
      for (int j = 0; j < kCols; ++j) {
        float const p = fast_exp2(fmaf(s(r, j), scale_log2, -max_scaled[r]));
        s(r, j) = p;
        sum += p;
      }
      row_sum[r] = kFirst ? sum : fmaf(row_sum[r], o_scale[r], sum);
    }
  }

  // O's rows times o_scale.
  template <class TensorO>
  CUTE_DEVICE static void rescale_o(TensorO& tOrO, float const* o_scale) {
    using namespace cute;
    Tensor o = make_tensor(tOrO.data(), detail::acc_rowcol(tOrO.layout()));
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      CUTE_UNROLL
      for (int j = 0; j < size<1>(o); ++j) o(r, j) *= o_scale[r];
    }
  }

  // The finished tile's rows: the factor 1/rowsum for O and the LSE (rows that see no key:
  // 0 and -inf); scale: the softmax scale. Shuffles only: may run while a wgmma is in flight.
  CUTE_DEVICE void finish_rows(float const& scale, float* o_final, float* lse_rows) const {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float s = row_sum[r];
      s += __shfl_xor_sync(0xffffffff, s, 1);
      s += __shfl_xor_sync(0xffffffff, s, 2);
      bool const empty = (s == 0.f || s != s);
      o_final[r] = empty ? 0.f : 1.f / s;
      lse_rows[r] = empty ? -INFINITY : row_max[r] * scale + __logf(s);
    }
  }
};

}  // namespace fact::attention
