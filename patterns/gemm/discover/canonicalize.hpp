// The GEMM pattern's canonical node (registered as canonicalization pass "gemms", order 100):
//
//   fact.gemm       from aten.linear / addmm / baddbmm / mm / bmm / matmul together with the
//                   view-like ops (view, reshape, _unsafe_view, expand, t, transpose, permute,
//                   clone, contiguous, ...) around them that need no copy when read in place.
//                   args [A source, B source, (bias)]; attrs:
//                     op, m, n, k, batch, batch_shape (output dims before M, N), output_shape,
//                     alpha, dtype (of the output),
//                     a / b: {value, dtype, layout "row"|"col", ld, batch_stride,
//                             shape, stride (the operand as the matmul sees it, over value)},
//                     d: {ld, batch_stride},
//                     bias: null | {value, dtype, broadcast "row" (length-N vector) | "full"
//                                   (M×N matrix), beta},
//                     unsupported (only when the operands cannot be read in place with one
//                     leading dimension and one batch stride): the reason.
//                   3-D activations times a 2-D weight fold into M = B*T when the leading dims
//                   collapse, and become a batched GEMM with a broadcast weight otherwise.
#pragma once
#include "fact/graph/graph.hpp"

namespace fact::gemm {

// Rewrites every matmul-family node of `g` that can be read in place into fact.gemm.
void canonicalize_gemms(graph::Graph& g);

}  // namespace fact::gemm
