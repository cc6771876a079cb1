#include "fact/discover/graph_rewrite.hpp"

#include <algorithm>
#include <set>

namespace fact::discover::detail {

std::vector<graph::NodeId> origin_of(const graph::Graph& g,
                                     const std::vector<graph::NodeId>& region) {
  const std::set<graph::NodeId> members(region.begin(), region.end());
  std::vector<graph::NodeId> covered;
  for (const auto& node : g.nodes()) {
    if (!members.count(node.id)) continue;
    if (node.origin.empty()) covered.push_back(node.id);
    covered.insert(covered.end(), node.origin.begin(), node.origin.end());
  }
  return covered;
}

void replace_region(graph::Graph& g, const std::vector<graph::NodeId>& region,
                    graph::Node replacement) {
  const std::set<graph::NodeId> members(region.begin(), region.end());
  replacement.origin = origin_of(g, region);
  auto& nodes = g.mutable_nodes();
  size_t last = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (members.count(nodes[i].id)) last = i;
  }
  std::vector<graph::Node> rewritten;
  rewritten.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!members.count(nodes[i].id)) {
      rewritten.push_back(std::move(nodes[i]));
      continue;
    }
    if (i == last) rewritten.push_back(replacement);
  }
  nodes = std::move(rewritten);
  g.reindex();
}

std::string fresh_node_id(const graph::Graph& g, const std::string& base) {
  if (g.node(base) == nullptr && !g.has_value(base)) return base;
  for (int i = 1;; ++i) {
    std::string id = base + "_" + std::to_string(i);
    if (g.node(id) == nullptr && !g.has_value(id)) return id;
  }
}

std::optional<double> number_constant(const graph::Arg& arg) {
  if (arg.kind != graph::Arg::Kind::Constant || !arg.constant.is_number()) return std::nullopt;
  if (arg.constant.is_boolean()) return std::nullopt;
  return arg.constant.get<double>();
}

std::optional<double> scalar_operand(const graph::Graph& g, const graph::Arg& arg) {
  if (arg.kind == graph::Arg::Kind::Constant) return number_constant(arg);
  if (arg.kind != graph::Arg::Kind::Tensor || !g.has_value(arg.tensor)) return std::nullopt;
  const graph::Value& v = g.value(arg.tensor);
  if (v.desc.rank() != 0 || g.producer(v.id) != nullptr) return std::nullopt;
  return v.scalar;
}

const graph::Arg* argument(const graph::Node& node, size_t index, const char* name) {
  if (index < node.args.size()) return &node.args[index];
  auto it = node.kwargs.find(name);
  return it == node.kwargs.end() ? nullptr : &it->second;
}

}  // namespace fact::discover::detail
