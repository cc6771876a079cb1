// Strided views: how a chain of view-like ATen ops (view, reshape, expand, transpose, permute,
// clone, ...) reads the memory of the tensor at its start. Canonicalization uses this to see
// through the reshapes and transposes torch.export puts around matmuls, and to decide whether
// an operand can be read in place (one leading dimension, one batch stride).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fact/graph/graph.hpp"

namespace fact::discover {

struct StridedView {
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;  // in elements
  size_t rank() const { return shape.size(); }
  bool operator==(const StridedView&) const = default;
};

StridedView view_of(const graph::TensorDesc& desc);

// The strides that view the memory of `v` with `new_shape` (entries of -1 inferred), as
// torch's `view` would compute them; nullopt when that needs a copy or the sizes disagree.
std::optional<std::vector<int64_t>> restride(const StridedView& v, std::vector<int64_t> new_shape);

// The one stride with which dims [first, last) of `v` can be walked as a single dimension
// (dims of size 1 ignored; 0 when every remaining dim is broadcast or there is none); nullopt
// when they do not collapse.
std::optional<int64_t> collapse_dims(const StridedView& v, size_t first, size_t last);

// Ops that present the values of their first tensor argument in another shape or memory
// order without changing them: view, reshape, _unsafe_view, expand, t, transpose, permute,
// unsqueeze, squeeze, alias, detach, clone, contiguous.
bool is_view_like(const graph::Node& node);
// Pure reshapes (view, reshape, _unsafe_view).
bool is_reshape(const graph::Node& node);
// The view a view-like node produces from `input` (the view of its first tensor argument);
// nullopt when the node is not view-like or the result cannot be expressed with strides.
// Copies (clone, contiguous, a reshape that copies) keep `input`'s memory order.
std::optional<StridedView> apply_view_like(const graph::Node& node, const StridedView& input);

// An operand traced back through view-like ops to the tensor whose memory is read.
struct TracedOperand {
  graph::ValueId source;                // the tensor read
  StridedView view;                     // the operand as the consuming op sees it, over source
  std::vector<graph::NodeId> absorbed;  // the view-like nodes between source and the op (graph order)
  bool accepted = false;                // `accept` approved `view`
};

// Walks back from `operand` through view-like nodes whose outputs have no other reader and
// returns the furthest start whose resulting view `accept` approves; when none does, the
// operand itself with accepted == false.
TracedOperand trace_operand(const graph::Graph& g, const graph::ValueId& operand,
                            const std::function<bool(const StridedView&)>& accept);

std::string shape_text(const std::vector<int64_t>& dims);  // "[2, 4, 16]"

}  // namespace fact::discover
