// Canonicalization: captured ATen ops rewritten into a few canonical "fact." nodes, so that
// rules match one form (DESIGN.md rule 2). Every canonical node keeps in `origin` the ids of
// the captured nodes it replaces; nodes no pass touches stay as captured (empty origin).
//
// Canonical nodes (args are tensors; parameters in attrs):
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
//   fact.gelu_tanh  from aten.gelu(approximate='tanh') and 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3)))
//                   in any spelling (pow or x*x*x, the 0.5 first or last, constants to 1e-6
//                   relative); args [x].
//   fact.gelu_erf   from aten.gelu and 0.5*x*(1+erf(x/sqrt(2))); args [x].
//   fact.activation from relu, silu (also x*sigmoid(x)), sigmoid, leaky_relu, hardtanh, clamp,
//                   clamp_min; args [x]; attrs {kind: "relu"|"silu"|"sigmoid"|"leaky_relu"|
//                   "hardtanh", p0, p1 (leaky slope; hardtanh/clamp bounds, ±inf if absent)}.
//   fact.scale      from mul / div of a tensor by a scalar; args [x]; attrs {value} (the factor).
//   fact.attention  from fact.gemm(q, kᵀ) → [fact.scale] → [masked_fill / where / add mask] →
//                   softmax (casts allowed around it) → fact.gemm(·, v), and from
//                   aten.scaled_dot_product_attention; args [q, k, v, (mask)]; attrs {batch,
//                   heads, kv_heads, seq, kv_seq, head_dim, v_head_dim, causal,
//                   causal_evidence, scale, mask: {kind, value, source}, softmax_dtype,
//                   q / k / v: {value, shape, stride} ([batch, heads, seq, dim] views)}.
#pragma once
#include "fact/graph/graph.hpp"

namespace fact::discover {

// All passes below in order: gemms, gelu, activations, scales, attention. Never throws for
// unknown ops (they stay as they are).
graph::Graph canonicalize(const graph::Graph& captured);

// The passes, each rewriting `g` in place (exposed for tests).
void canonicalize_gemms(graph::Graph& g);
void canonicalize_gelu(graph::Graph& g);
void canonicalize_activations(graph::Graph& g);
void canonicalize_scales(graph::Graph& g);
void canonicalize_attention(graph::Graph& g);

}  // namespace fact::discover
