// Writing graph JSON (docs/graph_json.md): the inverse of graph_from_json.
#include <cmath>
#include <set>

#include "fact/graph/graph_json.hpp"

namespace fact::graph {
namespace {

using nlohmann::json;

std::string non_finite_spelling(double v) {
  if (std::isnan(v)) return "nan";
  return v > 0 ? "inf" : "-inf";
}

json value_to_json(const Value& value) {
  json out = {{"id", value.id}, {"kind", value_kind_name(value.kind)}};
  if (!value.target.empty()) out["target"] = value.target;
  out["shape"] = value.desc.shape;
  out["stride"] = value.desc.stride;
  out["dtype"] = dtype_name(value.desc.dtype);
  out["device"] = value.desc.device;
  if (value.scalar) {
    if (std::isfinite(*value.scalar))
      out["scalar"] = *value.scalar;
    else
      out["scalar"] = non_finite_spelling(*value.scalar);
  }
  return out;
}

json arg_to_json(const Arg& arg) {
  switch (arg.kind) {
    case Arg::Kind::Tensor: return {{"tensor", arg.tensor}};
    case Arg::Kind::TensorList: {
      json list = json::array();
      for (const auto& id : arg.tensors) list.push_back(id ? json(*id) : json(nullptr));
      return {{"tensors", list}};
    }
    case Arg::Kind::Constant: break;
  }
  const json& c = arg.constant;
  if (c.is_object()) return c;  // {"dtype": ..}, {"device": ..}, {"repr": ..}
  if (c.is_number_float() && !std::isfinite(c.get<double>()))
    return {{"float", non_finite_spelling(c.get<double>())}};
  return {{"const", c}};
}

json node_to_json(const Node& node) {
  json args = json::array();
  for (const Arg& arg : node.args) args.push_back(arg_to_json(arg));
  json kwargs = json::object();
  for (const auto& [key, arg] : node.kwargs) kwargs[key] = arg_to_json(arg);
  json out = {{"id", node.id}, {"target", node.target}, {"args", args}, {"kwargs", kwargs},
              {"outputs", node.outputs}};
  if (!node.attrs.is_null() && !node.attrs.empty()) out["attrs"] = node.attrs;
  if (!node.origin.empty()) out["origin"] = node.origin;
  return out;
}

// Inputs in call order, then parameters, buffers and constants, then intermediates in the
// order nodes produce them, then any intermediate no node produces.
std::vector<const Value*> values_in_document_order(const Graph& g) {
  std::vector<const Value*> ordered;
  std::set<ValueId> placed;
  auto place = [&](const ValueId& id) {
    if (g.has_value(id) && placed.insert(id).second) ordered.push_back(&g.value(id));
  };
  for (const ValueId& id : g.inputs) place(id);
  for (ValueKind kind : {ValueKind::Input, ValueKind::Parameter, ValueKind::Buffer, ValueKind::Constant})
    for (const auto& [id, value] : g.values())
      if (value.kind == kind) place(id);
  for (const Node& node : g.nodes())
    for (const ValueId& id : node.outputs) place(id);
  for (const auto& [id, value] : g.values()) place(id);
  return ordered;
}

}  // namespace

nlohmann::json graph_to_json(const Graph& g) {
  json values = json::array();
  for (const Value* value : values_in_document_order(g)) values.push_back(value_to_json(*value));
  json nodes = json::array();
  for (const Node& node : g.nodes()) nodes.push_back(node_to_json(node));
  return {{"schema", g.schema.empty() ? std::string("fact.graph/1") : g.schema},
          {"source", g.source},
          {"values", values},
          {"nodes", nodes},
          {"inputs", g.inputs},
          {"outputs", g.outputs}};
}

}  // namespace fact::graph
