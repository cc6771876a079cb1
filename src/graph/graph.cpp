#include "fact/graph/graph.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace fact::graph {

Arg Arg::of_tensor(ValueId id) {
  Arg arg;
  arg.kind = Kind::Tensor;
  arg.tensor = std::move(id);
  return arg;
}

Arg Arg::of_constant(nlohmann::json c) {
  Arg arg;
  arg.kind = Kind::Constant;
  arg.constant = std::move(c);
  return arg;
}

namespace {

// Every value a node reads, once each, in argument order.
std::vector<ValueId> values_read(const Node& node) {
  std::vector<ValueId> read;
  auto note = [&read](const ValueId& id) {
    if (std::find(read.begin(), read.end(), id) == read.end()) read.push_back(id);
  };
  auto note_arg = [&note](const Arg& arg) {
    if (arg.kind == Arg::Kind::Tensor) note(arg.tensor);
    if (arg.kind == Arg::Kind::TensorList) {
      for (const auto& entry : arg.tensors) {
        if (entry) note(*entry);
      }
    }
  };
  for (const auto& arg : node.args) note_arg(arg);
  for (const auto& [name, arg] : node.kwargs) note_arg(arg);
  return read;
}

}  // namespace

void Graph::add_value(Value v) {
  ValueId id = v.id;
  values_[id] = std::move(v);
}

void Graph::add_node(Node n) {
  nodes_.push_back(std::move(n));
  const size_t index = nodes_.size() - 1;
  for (const auto& out : nodes_[index].outputs) producer_[out] = index;
  for (const auto& read : values_read(nodes_[index])) consumers_[read].push_back(index);
}

const Value& Graph::value(const ValueId& id) const {
  auto it = values_.find(id);
  if (it == values_.end()) throw std::out_of_range("graph has no value '" + id + "'");
  return it->second;
}

Value& Graph::mutable_value(const ValueId& id) {
  auto it = values_.find(id);
  if (it == values_.end()) throw std::out_of_range("graph has no value '" + id + "'");
  return it->second;
}

const Node* Graph::producer(const ValueId& id) const {
  auto it = producer_.find(id);
  return it == producer_.end() ? nullptr : &nodes_[it->second];
}

std::vector<const Node*> Graph::consumers(const ValueId& id) const {
  std::vector<const Node*> readers;
  auto it = consumers_.find(id);
  if (it == consumers_.end()) return readers;
  for (size_t index : it->second) readers.push_back(&nodes_[index]);
  return readers;
}

bool Graph::is_graph_output(const ValueId& id) const {
  return std::find(outputs.begin(), outputs.end(), id) != outputs.end();
}

const Node* Graph::node(const NodeId& id) const {
  for (const auto& n : nodes_) {
    if (n.id == id) return &n;
  }
  return nullptr;
}

void Graph::reindex() {
  producer_.clear();
  consumers_.clear();
  for (size_t index = 0; index < nodes_.size(); ++index) {
    for (const auto& out : nodes_[index].outputs) producer_[out] = index;
    for (const auto& read : values_read(nodes_[index])) consumers_[read].push_back(index);
  }
}

}  // namespace fact::graph
