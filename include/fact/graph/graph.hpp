// FACT's graph IR: values (tensors) and nodes (ops) in topological order, as read from the
// capture's graph JSON (docs/graph_json.md) and rewritten by canonicalization.
//
// Captured ATen nodes keep their target ("aten.linear.default"); canonical nodes created by
// discovery use the "fact." namespace ("fact.gemm", "fact.gelu_tanh") and carry their
// parameters in `attrs`.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/graph/tensor_desc.hpp"

namespace fact::graph {

using ValueId = std::string;
using NodeId = std::string;

enum class ValueKind { Input, Parameter, Buffer, Constant, Intermediate };

struct Value {
  ValueId id;
  ValueKind kind = ValueKind::Intermediate;
  TensorDesc desc;
  std::string target;  // parameter / buffer / constant name in the module ("attn.c_attn.weight")
  std::optional<double> scalar;  // for 0-d constants whose value the capture recorded
};

// One argument of a node: a tensor, a list of tensors, or a constant. For the JSON form
// {"const": c} `constant` holds c itself (number, bool, string, null, list); for the forms
// {"dtype": ..}, {"device": ..}, {"repr": ..} it holds that whole one-key object; for
// {"float": "-inf"} (non-finite floats, which JSON cannot spell) it holds the double itself.
struct Arg {
  enum class Kind { Tensor, TensorList, Constant };
  Kind kind = Kind::Constant;
  ValueId tensor;                              // Kind::Tensor
  std::vector<std::optional<ValueId>> tensors;  // Kind::TensorList (None entries allowed)
  nlohmann::json constant;                     // Kind::Constant

  static Arg of_tensor(ValueId id);
  static Arg of_constant(nlohmann::json c);
  bool is_tensor() const { return kind == Kind::Tensor; }
};

struct Node {
  NodeId id;
  std::string target;  // "aten.mm.default", "fact.gemm", or an unknown op kept opaque
  std::vector<Arg> args;
  std::map<std::string, Arg> kwargs;
  std::vector<ValueId> outputs;
  nlohmann::json attrs = nlohmann::json::object();  // canonical-node parameters
  std::vector<NodeId> origin;  // captured nodes this node replaces (after canonicalization)
};

class Graph {
 public:
  std::string schema;  // "fact.graph/1"
  nlohmann::json source = nlohmann::json::object();  // module name, capture method, versions
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;

  // Values and nodes; nodes are kept in topological order.
  const std::map<ValueId, Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& mutable_nodes() { return nodes_; }

  void add_value(Value v);
  void add_node(Node n);
  bool has_value(const ValueId& id) const { return values_.count(id) != 0; }
  // Throws std::out_of_range naming the id when absent.
  const Value& value(const ValueId& id) const;
  Value& mutable_value(const ValueId& id);
  // Node that produces `id`, or nullptr for graph inputs, parameters, buffers, constants.
  const Node* producer(const ValueId& id) const;
  // Nodes that read `id` (args, kwargs and tensor lists), in graph order; graph outputs count
  // as a use through `is_graph_output`.
  std::vector<const Node*> consumers(const ValueId& id) const;
  bool is_graph_output(const ValueId& id) const;
  const Node* node(const NodeId& id) const;

  // Rebuilds the producer / consumer indexes after nodes were rewritten in place.
  void reindex();

 private:
  std::map<ValueId, Value> values_;
  std::vector<Node> nodes_;
  std::map<ValueId, size_t> producer_;               // value -> index into nodes_
  std::map<ValueId, std::vector<size_t>> consumers_;  // value -> indices into nodes_
};

}  // namespace fact::graph
