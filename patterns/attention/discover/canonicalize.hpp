// The attention pattern's canonical node (registered as canonicalization pass "attention",
// order 500, after fact.gemm and the elementwise passes it builds on):
//
//   fact.attention  from fact.gemm(q, kᵀ) → [fact.scale] → [masked_fill / where / add mask] →
//                   softmax (casts allowed around it) → fact.gemm(·, v), and from
//                   aten.scaled_dot_product_attention; args [q, k, v, (mask)]; attrs {batch,
//                   heads, kv_heads, seq, kv_seq, head_dim, v_head_dim, causal,
//                   causal_evidence, scale, mask: {kind, value, source}, softmax_dtype,
//                   q / k / v: {value, shape, stride} ([batch, heads, seq, dim] views)}.
#pragma once
#include "fact/graph/graph.hpp"

namespace fact::attention {

// Rewrites every recognized attention subgraph of `g` into fact.attention.
void canonicalize_attention(graph::Graph& g);

}  // namespace fact::attention
