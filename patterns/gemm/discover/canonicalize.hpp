// The GEMM pattern's canonical node (registered as canonicalization pass "gemms", order 100):
//
//   fact.gemm       from aten.linear / addmm / baddbmm / mm / bmm / matmul / einsum (two operands,
//                   a matrix product: batch, M, N and K indices, see below) together with the
//                   view-like ops (view, reshape, _unsafe_view, expand, t, transpose, permute,
//                   clone, contiguous, ...) around them that need no copy when read in place.
//                   args [A source, B source, (bias)]; attrs:
//                     op, m, n, k, batch, outer_batch (a second batch mode, 1 when none),
//                     batch_shape (output dims before M, N), batch_dims {shape, modes} (per
//                     broadcast batch dim: 0 the kernel's batch mode, 1 the outer one, -1 size 1
//                     or folded into M), output_shape, alpha, dtype (of the output),
//                     equation (einsum only),
//                     a / b: {value, dtype, layout "row"|"col", ld, batch_stride,
//                             outer_batch_stride, shape, stride (the operand as the matmul sees
//                             it, over value)},
//                     d: {ld, batch_stride, outer_batch_stride} (dense [batch dims][M][N]),
//                     bias: null | {value, dtype, broadcast "row" (length-N vector, shared or one
//                                   per batch: batch_stride, outer_batch_stride) | "full"
//                                   (M×N matrix), beta},
//                     unsupported (only when the operands cannot be read in place with one
//                     leading dimension and at most two batch strides): the reason.
//                   3-D activations times a 2-D weight fold into M = B*T when the leading dims
//                   collapse, and become a batched GEMM with a broadcast weight otherwise.
//                   Batch dims that one stride does not walk (heads split from a fused
//                   projection, a GQA expand with stride 0) are grouped into runs of dims A, B
//                   and D each walk with one stride; two runs are two batch modes (the larger
//                   the kernel's batch, the other the outer one its entry loops over,
//                   gemm_abi.h), more are unsupported.
//                   einsum "bhqd,bhkd->bhqk": the output's trailing B-only indices are N, the
//                   A-only ones before them M, the rest batch; K are the indices of both operands
//                   not in the output. Each group must collapse into one stride of its operand
//                   ("bhtk,hkd->btd" contracts (h, k), which do not: unsupported, with the
//                   reason); an einsum that is no matrix product (no K, a sum over one operand,
//                   a diagonal, "...") stays as captured.
#pragma once
#include "fact/graph/graph.hpp"

namespace fact::gemm {

// Rewrites every matmul-family node of `g` that can be read in place into fact.gemm.
void canonicalize_gemms(graph::Graph& g);

}  // namespace fact::gemm
