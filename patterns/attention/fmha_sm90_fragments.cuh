// Register fragments of the attention kernel's warpgroup GEMMs (fmha_sm90.cuh): the
// accumulator of a 64-row wgmma viewed as (rows, cols), the same registers as the A operand of
// the next wgmma, and the float32 -> bf16/fp16 packing between them.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/numeric_types.h"

namespace fact::attention::detail {

using namespace cute;

// Two floats as one bf16x2 / f16x2 register (lo in the low half).
template <class Element>
CUTE_DEVICE uint32_t pack2(float lo, float hi) {
  uint32_t d;
  if constexpr (std::is_same_v<Element, cutlass::bfloat16_t>) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  } else {
    static_assert(std::is_same_v<Element, cutlass::half_t>, "bf16 or fp16");
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  }
  return d;
}

// dst = src converted to Element, pairwise (a float32 accumulator into an Element fragment of
// the same layout: P for the P V wgmma, O for its store).
template <class Element, class TensorSrc, class TensorDst>
CUTE_DEVICE void pack_accumulator(TensorSrc const& src_tensor, TensorDst& dst_tensor) {
  float const* src = raw_pointer_cast(src_tensor.data());
  uint32_t* dst = reinterpret_cast<uint32_t*>(raw_pointer_cast(dst_tensor.data()));
  CUTE_UNROLL
  for (int i = 0; i < int(size(src_tensor)) / 2; ++i) dst[i] = pack2<Element>(src[2 * i], src[2 * i + 1]);
}

// Accumulator layout ((2,2,V), MMA_M, MMA_N) of a 64xN wgmma viewed as (rows, cols):
// value mode 0 = column pair, mode 1 = row +8, mode 2 = 8-column groups.
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_rowcol(Layout l) {
  return make_layout(make_layout(get<0, 1>(l), get<1>(l)),
                     make_layout(get<0, 0>(l), get<0, 2>(l), get<2>(l)));
}

// The same registers as the A operand of a k16 wgmma: ((2,2,2), MMA_M, N/16). Two consecutive
// 8-column groups of the accumulator form one 16-wide k block.
template <class Layout>
CUTE_HOST_DEVICE constexpr auto acc_as_operand_a(Layout l) {
  auto groups = logical_divide(get<0, 2>(l), Tile<_2>{});  // (2, V/2)
  return make_layout(make_layout(get<0, 0>(l), get<0, 1>(l), get<0, 0>(groups)), get<1>(l),
                     coalesce(make_layout(get<0, 1>(groups), get<2>(l))));
}

}  // namespace fact::attention::detail
