#include "fact/registry/semantics.hpp"

#include <map>
#include <set>
#include <stdexcept>

#include "fact/graph/graph_json.hpp"
#include "fact/util/sha256.hpp"

namespace fact::registry {

namespace {

using nlohmann::json;

// Every tensor id an argument names (tensor, or the entries of a tensor list).
std::vector<std::string> tensors_of(const json& arg) {
  std::vector<std::string> out;
  if (arg.contains("tensor")) out.push_back(arg.at("tensor").get<std::string>());
  if (arg.contains("tensors")) {
    for (const auto& t : arg.at("tensors")) {
      if (t.is_string()) out.push_back(t.get<std::string>());
    }
  }
  return out;
}

json renamed_arg(const json& arg, const std::map<std::string, std::string>& names) {
  json out = arg;
  if (out.contains("tensor")) out["tensor"] = names.at(out["tensor"].get<std::string>());
  if (out.contains("tensors")) {
    for (auto& t : out["tensors"]) {
      if (t.is_string()) t = names.at(t.get<std::string>());
    }
  }
  return out;
}

// The fragment with ids replaced by their position, module names, devices and scalars' origin
// left out; `shapes` keeps shapes and strides (the exact hash) or only ranks (the structure).
json canonical(const json& fragment, bool shapes) {
  std::map<std::string, std::string> names;
  for (const auto& id : fragment.at("inputs")) names.emplace(id.get<std::string>(), "in" + std::to_string(names.size()));
  size_t produced = 0;
  for (const auto& node : fragment.at("nodes")) {
    for (const auto& id : node.at("outputs")) names.emplace(id.get<std::string>(), "v" + std::to_string(produced++));
  }
  std::map<std::string, json> values;
  for (const auto& v : fragment.at("values")) {
    const std::string id = v.at("id").get<std::string>();
    if (!names.count(id)) continue;
    json c = {{"dtype", v.value("dtype", std::string())}};
    if (shapes) {
      c["shape"] = v.value("shape", json::array());
      c["stride"] = v.value("stride", json::array());
    } else {
      c["rank"] = v.value("shape", json::array()).size();
    }
    if (v.contains("scalar")) c["scalar"] = v.at("scalar");
    values[names.at(id)] = std::move(c);
  }
  json nodes = json::array();
  for (const auto& node : fragment.at("nodes")) {
    json args = json::array();
    for (const auto& arg : node.at("args")) {
      json a = renamed_arg(arg, names);
      // View sizes and the like repeat the shapes: the structure ignores integer constants.
      if (!shapes && a.contains("const") && (a["const"].is_number_integer() || a["const"].is_array())) a["const"] = "int";
      args.push_back(std::move(a));
    }
    json kwargs = json::object();
    for (const auto& [key, arg] : node.value("kwargs", json::object()).items()) kwargs[key] = renamed_arg(arg, names);
    json outputs = json::array();
    for (const auto& id : node.at("outputs")) outputs.push_back(names.at(id.get<std::string>()));
    nodes.push_back({{"target", node.at("target")}, {"args", args}, {"kwargs", kwargs}, {"outputs", outputs}});
  }
  json outputs = json::array();
  for (const auto& id : fragment.at("outputs")) outputs.push_back(names.at(id.get<std::string>()));
  return {{"values", values}, {"nodes", nodes}, {"outputs", outputs}, {"inputs", names.size() - produced}};
}

}  // namespace

Semantics semantics_of_fragment(const json& fragment) {
  Semantics s;
  s.fragment = fragment;
  s.hash = util::sha256_hex(canonical(fragment, true).dump());
  s.structure_hash = util::sha256_hex(canonical(fragment, false).dump());
  return s;
}

Semantics semantics_of(const graph::Graph& captured, const std::vector<graph::NodeId>& nodes,
                       const std::vector<graph::ValueId>& outputs) {
  const json full = graph::graph_to_json(captured);
  const std::set<std::string> region(nodes.begin(), nodes.end());
  std::map<std::string, json> value_docs;
  for (const auto& v : full.at("values")) value_docs[v.at("id").get<std::string>()] = v;

  json frag_nodes = json::array();
  std::set<std::string> produced, seen_inputs;
  std::vector<std::string> inputs;
  std::set<std::string> found;
  for (const auto& node : full.at("nodes")) {
    const std::string id = node.at("id").get<std::string>();
    if (!region.count(id)) continue;
    found.insert(id);
    auto read = [&](const json& arg) {
      for (const auto& t : tensors_of(arg)) {
        if (!produced.count(t) && seen_inputs.insert(t).second) inputs.push_back(t);
      }
    };
    for (const auto& arg : node.at("args")) read(arg);
    for (const auto& [key, arg] : node.value("kwargs", json::object()).items()) read(arg);
    for (const auto& out : node.at("outputs")) produced.insert(out.get<std::string>());
    frag_nodes.push_back(node);
  }
  for (const auto& id : nodes) {
    if (!found.count(id)) throw std::invalid_argument("semantics: node '" + id + "' is not in the captured graph");
  }
  for (const auto& id : outputs) {
    if (!produced.count(id)) throw std::invalid_argument("semantics: output '" + id + "' is not produced by the nodes");
  }
  json values = json::array();
  for (const auto& id : inputs) {
    json v = value_docs.at(id);
    if (v.value("kind", std::string()) == "intermediate") v["kind"] = "input";
    values.push_back(std::move(v));
  }
  for (const auto& node : frag_nodes) {
    for (const auto& out : node.at("outputs")) values.push_back(value_docs.at(out.get<std::string>()));
  }
  json fragment = {{"schema", "fact.graph/1"},
                   {"source", {{"module", full.at("source").value("module", std::string())},
                               {"fragment", true}}},
                   {"values", values},
                   {"nodes", frag_nodes},
                   {"inputs", inputs},
                   {"outputs", outputs}};
  return semantics_of_fragment(fragment);
}

}  // namespace fact::registry
