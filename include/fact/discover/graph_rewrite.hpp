// Rewriting the canonical graph in place: one region of nodes becomes one canonical node.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "fact/graph/graph.hpp"

namespace fact::discover::detail {

// The captured nodes a set of (possibly canonical) nodes covers: each node's origin, or the
// node itself when it has none, in graph order.
std::vector<graph::NodeId> origin_of(const graph::Graph& g, const std::vector<graph::NodeId>& region);

// Replaces the nodes of `region` by `replacement` at the position of the region's last node
// and sets the replacement's origin to origin_of(region). Values only the removed nodes
// produced stay in the value table, unproduced and unread. Reindexes the graph.
void replace_region(graph::Graph& g, const std::vector<graph::NodeId>& region,
                    graph::Node replacement);

// A node id not used yet in `g`: `base`, else `base_1`, `base_2`, ...
std::string fresh_node_id(const graph::Graph& g, const std::string& base);

// The number a constant argument holds (ints, floats, non-finite floats), if any.
std::optional<double> number_constant(const graph::Arg& arg);
// The number a tensor argument stands for: a 0-d constant value whose scalar is recorded.
std::optional<double> scalar_operand(const graph::Graph& g, const graph::Arg& arg);
// Positional argument `index`, else keyword `name`; nullptr when neither is present.
const graph::Arg* argument(const graph::Node& node, size_t index, const char* name);

}  // namespace fact::discover::detail
