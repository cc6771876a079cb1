// Reading graph JSON (docs/graph_json.md): parse, validate, build the Graph.
#include "fact/graph/graph_json.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace fact::graph {

GraphFormatError::GraphFormatError(std::string where, std::string problem)
    : std::runtime_error(where.empty() ? problem : where + ": " + problem),
      where_(std::move(where)),
      problem_(std::move(problem)) {}

namespace {

using nlohmann::json;

constexpr std::string_view kSchema = "fact.graph/1";

std::string single_quoted(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.append(1, '\'').append(s).append(1, '\'');
  return out;
}

std::string json_type_name(const json& j) {
  if (j.is_number_integer()) return "an integer";
  if (j.is_number_float()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_boolean()) return "a bool";
  if (j.is_null()) return "null";
  if (j.is_array()) return "an array";
  if (j.is_object()) return "an object";
  return j.type_name();
}

[[noreturn]] void fail(const std::string& where, const std::string& problem) {
  throw GraphFormatError(where, problem);
}

[[noreturn]] void fail_type(const std::string& where, std::string_view expected, const json& got) {
  fail(where, "expected " + std::string(expected) + ", got " + json_type_name(got));
}

const json& required(const json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end())
    fail(where.empty() ? "document" : where, std::string("missing field '") + key + "'");
  return *it;
}

std::string required_string(const json& object, const char* key, const std::string& where) {
  const json& field = required(object, key, where);
  const std::string field_where = where.empty() ? key : where + "." + key;
  if (!field.is_string()) fail_type(field_where, "a string", field);
  return field.get<std::string>();
}

int64_t as_int64(const json& j, const std::string& where) {
  if (j.is_number_unsigned()) {
    if (j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(where, "integer out of range");
    return static_cast<int64_t>(j.get<uint64_t>());
  }
  if (!j.is_number_integer()) fail_type(where, "an integer", j);
  return j.get<int64_t>();
}

std::vector<int64_t> sizes(const json& object, const char* key, const std::string& where) {
  const json& field = required(object, key, where);
  const std::string field_where = where + "." + key;
  if (!field.is_array()) fail_type(field_where, "an array of integers", field);
  std::vector<int64_t> out;
  for (size_t i = 0; i < field.size(); ++i) {
    const std::string element_where = field_where + "[" + std::to_string(i) + "]";
    int64_t v = as_int64(field[i], element_where);
    if (v < 0) fail(element_where, "negative size " + std::to_string(v));
    out.push_back(v);
  }
  return out;
}

// Non-finite floats are spelled "inf", "-inf", "nan" (JSON has no literal for them).
std::optional<double> non_finite(std::string_view s) {
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  return std::nullopt;
}

bool is_dtype_spelling(std::string_view s) {
  if (s.empty() || !(s[0] >= 'a' && s[0] <= 'z')) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

// "values[3] (id 'x')" when the entry has a string id, else "values[3]".
std::string entry_where(const char* array, size_t index, const json& entry) {
  std::string where = std::string(array) + "[" + std::to_string(index) + "]";
  if (entry.is_object()) {
    auto id = entry.find("id");
    if (id != entry.end() && id->is_string()) where += " (id " + single_quoted(id->get<std::string>()) + ")";
  }
  return where;
}

bool constant_is_plain(const json& c) {
  if (c.is_object()) return false;
  if (c.is_array())
    for (const json& e : c)
      if (!constant_is_plain(e)) return false;
  return true;
}

// Parses and checks one document in order, tracking which values are defined so far.
class GraphReader {
 public:
  Graph read(const json& doc) {
    if (!doc.is_object()) fail_type("document", "a JSON object", doc);
    read_header(doc);
    read_values(required(doc, "values", ""));
    index_producers(required(doc, "nodes", ""));
    read_nodes(required(doc, "nodes", ""));
    graph_.inputs = read_inputs(required(doc, "inputs", ""));
    graph_.outputs = read_outputs(required(doc, "outputs", ""));
    return std::move(graph_);
  }

 private:
  void read_header(const json& doc) {
    const std::string schema = required_string(doc, "schema", "");
    if (schema != kSchema)
      fail("schema", "unsupported schema " + single_quoted(schema) + " (expected " + single_quoted(kSchema) + ")");
    graph_.schema = schema;
    if (auto symbols = doc.find("symbols"); symbols != doc.end() && !(symbols->is_array() && symbols->empty()) &&
                                            !symbols->is_null())
      fail("symbols", "the graph declares symbolic sizes: concretize it (fact::graph::concretize) for one "
                      "assignment of its symbols first");
    if (auto source = doc.find("source"); source != doc.end()) {
      if (!source->is_object()) fail_type("source", "an object", *source);
      graph_.source = *source;
    }
  }

  void read_values(const json& values) {
    if (!values.is_array()) fail_type("values", "an array", values);
    for (size_t i = 0; i < values.size(); ++i) read_value(values[i], i);
  }

  void read_value(const json& entry, size_t index) {
    const std::string where = entry_where("values", index, entry);
    if (!entry.is_object()) fail_type(where, "an object", entry);
    Value value;
    value.id = required_string(entry, "id", where);
    if (value.id.empty()) fail(where + ".id", "empty id");
    if (auto [it, inserted] = value_index_.emplace(value.id, index); !inserted)
      fail(where + ".id", "duplicate value id " + single_quoted(value.id) + " (first at values[" +
                              std::to_string(it->second) + "])");
    const std::string kind = required_string(entry, "kind", where);
    auto parsed_kind = parse_value_kind(kind);
    if (!parsed_kind)
      fail(where + ".kind", "unknown kind " + single_quoted(kind) +
                                " (expected input, parameter, buffer, constant or intermediate)");
    value.kind = *parsed_kind;
    value.desc.shape = sizes(entry, "shape", where);
    value.desc.stride = sizes(entry, "stride", where);
    if (value.desc.stride.size() != value.desc.shape.size())
      fail(where + ".stride", "rank " + std::to_string(value.desc.stride.size()) +
                                  " differs from the shape's rank " +
                                  std::to_string(value.desc.shape.size()));
    const std::string dtype = required_string(entry, "dtype", where);
    if (!is_dtype_spelling(dtype)) fail(where + ".dtype", "invalid dtype " + single_quoted(dtype));
    value.desc.dtype = parse_dtype(dtype);
    value.desc.device = required_string(entry, "device", where);
    if (value.kind == ValueKind::Parameter || value.kind == ValueKind::Buffer ||
        value.kind == ValueKind::Constant) {
      value.target = required_string(entry, "target", where);
    } else if (auto target = entry.find("target"); target != entry.end()) {
      if (!target->is_string()) fail_type(where + ".target", "a string", *target);
      value.target = target->get<std::string>();
    }
    if (auto scalar = entry.find("scalar"); scalar != entry.end()) {
      if (scalar->is_number()) {
        value.scalar = scalar->get<double>();
      } else if (scalar->is_string() && non_finite(scalar->get<std::string>())) {
        value.scalar = non_finite(scalar->get<std::string>());
      } else {
        fail(where + ".scalar", "expected a number or \"inf\", \"-inf\", \"nan\", got " +
                                    (scalar->is_string() ? single_quoted(scalar->get<std::string>())
                                                         : json_type_name(*scalar)));
      }
    }
    if (value.kind != ValueKind::Intermediate) defined_.insert(value.id);
    graph_.add_value(std::move(value));
  }

  // First producer of each value, so that a use before its definition can name it.
  void index_producers(const json& nodes) {
    if (!nodes.is_array()) fail_type("nodes", "an array", nodes);
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!nodes[i].is_object()) continue;
      auto outputs = nodes[i].find("outputs");
      if (outputs == nodes[i].end() || !outputs->is_array()) continue;
      for (const json& out : *outputs)
        if (out.is_string()) later_producer_.emplace(out.get<std::string>(), i);
    }
  }

  void read_nodes(const json& nodes) {
    for (size_t i = 0; i < nodes.size(); ++i) read_node(nodes[i], i);
  }

  void read_node(const json& entry, size_t index) {
    const std::string where = entry_where("nodes", index, entry);
    if (!entry.is_object()) fail_type(where, "an object", entry);
    Node node;
    node.id = required_string(entry, "id", where);
    if (node.id.empty()) fail(where + ".id", "empty id");
    if (auto [it, inserted] = node_index_.emplace(node.id, index); !inserted)
      fail(where + ".id", "duplicate node id " + single_quoted(node.id) + " (first at nodes[" +
                              std::to_string(it->second) + "])");
    node.target = required_string(entry, "target", where);
    if (node.target.empty()) fail(where + ".target", "empty target");

    const json& args = required(entry, "args", where);
    if (!args.is_array()) fail_type(where + ".args", "an array", args);
    for (size_t i = 0; i < args.size(); ++i)
      node.args.push_back(read_arg(args[i], where + ".args[" + std::to_string(i) + "]"));
    if (auto kwargs = entry.find("kwargs"); kwargs != entry.end()) {
      if (!kwargs->is_object()) fail_type(where + ".kwargs", "an object", *kwargs);
      for (const auto& [key, arg] : kwargs->items())
        node.kwargs.emplace(key, read_arg(arg, where + ".kwargs." + key));
    }
    if (auto attrs = entry.find("attrs"); attrs != entry.end()) {
      if (!attrs->is_object()) fail_type(where + ".attrs", "an object", *attrs);
      node.attrs = *attrs;
    }
    if (auto origin = entry.find("origin"); origin != entry.end()) {
      if (!origin->is_array()) fail_type(where + ".origin", "an array of node ids", *origin);
      for (size_t i = 0; i < origin->size(); ++i) {
        if (!(*origin)[i].is_string())
          fail_type(where + ".origin[" + std::to_string(i) + "]", "a string", (*origin)[i]);
        node.origin.push_back((*origin)[i].get<std::string>());
      }
    }

    const json& outputs = required(entry, "outputs", where);
    if (!outputs.is_array()) fail_type(where + ".outputs", "an array of value ids", outputs);
    for (size_t i = 0; i < outputs.size(); ++i) {
      const std::string out_where = where + ".outputs[" + std::to_string(i) + "]";
      if (!outputs[i].is_string()) fail_type(out_where, "a value id (string)", outputs[i]);
      const std::string id = outputs[i].get<std::string>();
      if (!graph_.has_value(id)) fail(out_where, "unknown value " + single_quoted(id));
      const Value& value = graph_.value(id);
      if (value.kind != ValueKind::Intermediate)
        fail(out_where, "value " + single_quoted(id) + " is a " + std::string(value_kind_name(value.kind)) +
                            ", not an intermediate");
      if (auto it = produced_by_.find(id); it != produced_by_.end())
        fail(out_where, "value " + single_quoted(id) + " is already produced by nodes[" +
                            std::to_string(it->second) + "]");
      produced_by_.emplace(id, index);
      node.outputs.push_back(id);
    }
    for (const ValueId& id : node.outputs) defined_.insert(id);
    graph_.add_node(std::move(node));
  }

  void check_defined(const std::string& id, const std::string& where) {
    if (defined_.count(id)) return;
    if (!graph_.has_value(id)) fail(where, "unknown value " + single_quoted(id));
    auto later = later_producer_.find(id);
    if (later != later_producer_.end())
      fail(where, "value " + single_quoted(id) + " is used before nodes[" + std::to_string(later->second) +
                      "] produces it (nodes must be in topological order)");
    fail(where, "value " + single_quoted(id) + " is an intermediate that no node produces");
  }

  Arg read_arg(const json& entry, const std::string& where) {
    if (!entry.is_object() || entry.size() != 1)
      fail(where, "expected an object with exactly one key (tensor, tensors, const, float, dtype, "
                  "device or repr), got " + (entry.is_object() ? "an object with " +
                  std::to_string(entry.size()) + " keys" : json_type_name(entry)));
    const std::string key = entry.begin().key();
    const json& body = entry.begin().value();
    Arg arg;
    if (key == "tensor") {
      if (!body.is_string()) fail_type(where + ".tensor", "a value id (string)", body);
      arg.kind = Arg::Kind::Tensor;
      arg.tensor = body.get<std::string>();
      check_defined(arg.tensor, where);
    } else if (key == "tensors") {
      if (!body.is_array()) fail_type(where + ".tensors", "an array of value ids or null", body);
      arg.kind = Arg::Kind::TensorList;
      for (size_t i = 0; i < body.size(); ++i) {
        const std::string element_where = where + ".tensors[" + std::to_string(i) + "]";
        if (body[i].is_null()) {
          arg.tensors.emplace_back(std::nullopt);
          continue;
        }
        if (!body[i].is_string()) fail_type(element_where, "a value id (string) or null", body[i]);
        check_defined(body[i].get<std::string>(), element_where);
        arg.tensors.emplace_back(body[i].get<std::string>());
      }
    } else if (key == "const") {
      if (!constant_is_plain(body))
        fail(where + ".const", "expected a number, bool, string, null or a list of those");
      arg.kind = Arg::Kind::Constant;
      arg.constant = body;
    } else if (key == "float") {
      auto value = body.is_string() ? non_finite(body.get<std::string>()) : std::nullopt;
      if (!value) fail(where + ".float", "expected \"inf\", \"-inf\" or \"nan\"");
      arg.kind = Arg::Kind::Constant;
      arg.constant = *value;
    } else if (key == "dtype" || key == "device" || key == "repr") {
      if (!body.is_string()) fail_type(where + "." + key, "a string", body);
      if (key == "dtype" && !is_dtype_spelling(body.get<std::string>()))
        fail(where + ".dtype", "invalid dtype " + single_quoted(body.get<std::string>()));
      arg.kind = Arg::Kind::Constant;
      arg.constant = entry;
    } else {
      fail(where, "unknown argument form " + single_quoted(key) +
                      " (expected tensor, tensors, const, float, dtype, device or repr)");
    }
    return arg;
  }

  std::vector<ValueId> read_inputs(const json& inputs) {
    if (!inputs.is_array()) fail_type("inputs", "an array of value ids", inputs);
    std::vector<ValueId> out;
    std::set<ValueId> seen;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string where = "inputs[" + std::to_string(i) + "]";
      if (!inputs[i].is_string()) fail_type(where, "a value id (string)", inputs[i]);
      const std::string id = inputs[i].get<std::string>();
      if (!graph_.has_value(id)) fail(where, "unknown value " + single_quoted(id));
      if (graph_.value(id).kind != ValueKind::Input)
        fail(where, "value " + single_quoted(id) + " is a " +
                        std::string(value_kind_name(graph_.value(id).kind)) + ", not an input");
      if (!seen.insert(id).second) fail(where, "value " + single_quoted(id) + " is listed twice");
      out.push_back(id);
    }
    return out;
  }

  std::vector<ValueId> read_outputs(const json& outputs) {
    if (!outputs.is_array()) fail_type("outputs", "an array of value ids", outputs);
    std::vector<ValueId> out;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const std::string where = "outputs[" + std::to_string(i) + "]";
      if (!outputs[i].is_string()) fail_type(where, "a value id (string)", outputs[i]);
      check_defined(outputs[i].get<std::string>(), where);
      out.push_back(outputs[i].get<std::string>());
    }
    return out;
  }

  Graph graph_;
  std::map<ValueId, size_t> value_index_;
  std::map<NodeId, size_t> node_index_;
  std::set<ValueId> defined_;
  std::map<ValueId, size_t> produced_by_;
  std::map<ValueId, size_t> later_producer_;
};

}  // namespace

std::string_view value_kind_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::Input: return "input";
    case ValueKind::Parameter: return "parameter";
    case ValueKind::Buffer: return "buffer";
    case ValueKind::Constant: return "constant";
    case ValueKind::Intermediate: return "intermediate";
  }
  return "intermediate";
}

std::optional<ValueKind> parse_value_kind(std::string_view name) {
  if (name == "input") return ValueKind::Input;
  if (name == "parameter") return ValueKind::Parameter;
  if (name == "buffer") return ValueKind::Buffer;
  if (name == "constant") return ValueKind::Constant;
  if (name == "intermediate") return ValueKind::Intermediate;
  return std::nullopt;
}

Graph graph_from_json(const nlohmann::json& doc) { return GraphReader().read(doc); }

Graph load_graph(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw GraphFormatError(path.string(), "cannot open the file for reading");
  std::stringstream text;
  text << file.rdbuf();
  if (file.bad()) throw GraphFormatError(path.string(), "error while reading the file");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& error) {
    throw GraphFormatError(path.string(), std::string("invalid JSON: ") + error.what());
  }
  try {
    return graph_from_json(doc);
  } catch (const GraphFormatError& error) {
    throw GraphFormatError(path.string() + ": " + error.where(), error.problem());
  }
}

}  // namespace fact::graph
