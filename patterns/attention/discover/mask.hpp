// What an attention mask in the captured graph lets each query see. A mask computed from
// constants in the graph (ones / full / arange → tril / triu / comparisons / logical ops /
// where / casts / views, the forms minGPT, nanoGPT, transformers and the corpus use) is
// evaluated here, element by element, at the graph's sizes; its visible pattern is compared
// with the causal ones. A mask read from a buffer or constant whose contents the capture does
// not hold (minGPT's `tril` buffer) is evaluated under the assumption that the buffer is the
// usual causal one (ones on and below the diagonal, or its complement) — the replacement is
// verified against the original subgraph with the real buffer before it is used
// (python/fact/verify.py), so a wrong assumption is caught there. A mask that depends on a
// model input (padding masks) is not evaluated.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "fact/graph/graph.hpp"

namespace fact::attention {

// How the scores use the mask tensor M.
enum class MaskUse {
  FillWhereTrue,   // masked_fill(scores, M, -inf), where(M, -inf, scores): masked where M != 0
  KeepWhereTrue,   // where(M, scores, -inf), SDPA's boolean attn_mask: visible where M != 0
  Additive,        // scores + M (SDPA's float attn_mask): visible where M == 0, masked where M <= -1e4
};

struct MaskReading {
  enum class Kind {
    AllVisible,         // the mask hides nothing
    CausalTopLeft,      // query i sees keys j <= i
    CausalBottomRight,  // query i sees keys j <= i + kv_seq - seq
    CausalWindow,       // query i sees keys i - window < j <= i (a sliding window, top-left)
    Other,              // evaluated, and not one of the above (a padding or block pattern, ...)
    Unknown,            // not evaluated (depends on an input, an op not evaluated here, too large)
  };
  Kind kind = Kind::Unknown;
  bool assumed = false;  // read from a buffer / constant assumed to be a causal one
  int64_t window = 0;    // CausalWindow: the number of keys each query sees at most
  std::string detail;    // the evidence (Causal*), or why not (Other, Unknown)
};

// The number a scalar argument stands for: a constant, or a 0-d tensor computed from constants
// (scalar_tensor, full, a lifted constant with its value recorded, casts and copies of these).
std::optional<double> scalar_value(const graph::Graph& g, const graph::Arg& arg);

// Reads the mask `mask` (broadcast against [.., seq, kv_seq] scores) used as `use`.
MaskReading read_mask(const graph::Graph& g, const graph::ValueId& mask, MaskUse use, int64_t seq,
                      int64_t kv_seq);

// Whether the mask `mask` (broadcast against [batch, heads, seq, kv_seq] scores) is a key mask:
// the same for every query row and every head, so that row 0 of each batch entry says which keys
// every query sees (a padding mask), whatever model input it is computed from. Proven from the
// graph, not from values: the mask's extents along queries and heads are 1, or it is an
// element-wise op, an expand, a slice or a cast of values that are such masks themselves, or it
// is computed from constants alone and its evaluated values do not change along queries and
// heads (transformers' bidirectional mask: an all-true [1, 1, seq, 1] from aranges and-ed with
// the padding row [batch, 1, 1, kv_seq]). `detail` says why or why not.
struct KeyMaskReading {
  bool key_mask = false;
  std::string detail;
};
KeyMaskReading read_key_mask(const graph::Graph& g, const graph::ValueId& mask);

}  // namespace fact::attention
