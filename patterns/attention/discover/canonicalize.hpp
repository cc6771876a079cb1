// The attention pattern's canonical node (registered as canonicalization pass "attention",
// order 500, after fact.gemm and the elementwise passes it builds on):
//
//   fact.attention  args [q, k, v, (mask)], one output; attrs = the attention problem
//                   (kind/problem.hpp: sizes, dtype, mask_kind, scale, q / k / v / out views
//                   with offsets, unsupported) plus "mask" {kind, value, source} for reports.
//
// Recognized forms:
// - decomposed: fact.gemm(q, kᵀ) or einsum("P a c, P b c -> P a b") → [fact.scale] → [mask: masked_fill(_) / where (either
//   polarity) / add] → [fact.scale] → softmax over the last dim (casts, type_as around it) →
//   [dropout: eval mode or p = 0] → fact.gemm(·, v) or einsum("P a b, P b e -> P a e"); a scale applied to q or k before the
//   product (`q * d**-0.5`) folds into `scale`;
// - aten.scaled_dot_product_attention (is_causal, attn_mask, scale, dropout_p, enable_gqa).
// Around it:
// - Q, K, V are traced back to the memory they read: head-split views (view / reshape /
//   transpose / permute of a projection output), split / chunk / unbind / slice / select of a
//   fused QKV projection (each view starts at an element offset into the projection output;
//   no copy), grouped-query heads behind repeat_interleave(dim=1) or
//   `x[:, :, None].expand(...).reshape(...)` (transformers' repeat_kv);
// - the head merge after it (transpose(1, 2) → contiguous / clone → view / reshape to
//   [B, T, H·D]) is absorbed: the node's output is the merged tensor and the kernel writes it
//   directly (O strides T·H·D, D, H·D, 1 in [B, H, T, D] order);
// - the mask is read by mask.hpp: causal top-left / bottom-right, none, or unsupported (with
//   the reason, which the rule reports as the decline).
// Every node absorbed has all its readers inside the replaced region.
//
// A decomposed attention that no kernel computes (a mask that is not causal, a head dim without
// a kernel, float32, ...) is left as it is, so that its two products stay GEMMs the GEMM pattern
// can compose; left_attention() finds it again for the rule, which reports why it was declined.
#pragma once
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/graph/graph.hpp"

namespace fact::attention {

// Rewrites every recognized attention subgraph of `g` into fact.attention (decomposed ones only
// when a kernel computes them, see above).
void canonicalize_attention(graph::Graph& g);

// The decomposed attention whose output product is `node`, when canonicalization left it
// because no kernel computes it: its problem (fact.attention's attrs with "dtype"), the captured
// nodes it spans, the values it reads (q, k, v, mask) and its output. nullopt otherwise.
struct LeftAttention {
  nlohmann::json problem;
  std::vector<graph::NodeId> nodes;
  std::vector<graph::Arg> args;
  graph::ValueId output;
};
std::optional<LeftAttention> left_attention(const graph::Graph& g, const graph::Node& node);

}  // namespace fact::attention
