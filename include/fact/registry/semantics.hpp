// The reference semantics of a match: the captured graph fragment it replaces, as data. The
// pattern registry keeps it with every entry (what the entry's kernel was verified to compute),
// an agent receives it as the specification of the kernel to write, and Python replays it in
// float64 as the reference when no model is at hand (python/fact/agent/fragment.py).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/graph/graph.hpp"

namespace fact::registry {

struct Semantics {
  // Graph JSON (docs/graph_json.md) of the replaced nodes alone: "nodes" in graph order,
  // "values" they read or produce, "inputs" every value read from outside (parameters and
  // activations alike, in first-read order; an activation computed outside is of kind "input"
  // here), "outputs" the values handed to the rest of the graph.
  nlohmann::json fragment;
  // SHA-256 of the fragment with values and nodes renamed by position and names of modules
  // and devices left out: equal for the same computation on the same shapes in any model.
  std::string hash;
  // The same without shapes and strides: equal for the same computation on other shapes.
  std::string structure_hash;
};

// Throws std::invalid_argument when a node or output is not in `captured`.
Semantics semantics_of(const graph::Graph& captured, const std::vector<graph::NodeId>& nodes,
                       const std::vector<graph::ValueId>& outputs);

// The hashes of a fragment as semantics_of writes it (for entries read back from a file).
Semantics semantics_of_fragment(const nlohmann::json& fragment);

}  // namespace fact::registry
