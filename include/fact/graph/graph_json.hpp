// Loading and saving graph JSON (schema: docs/graph_json.md).
#pragma once
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "fact/graph/graph.hpp"

namespace fact::graph {

// Malformed input: `where` says which node / value / field ("nodes[3] (id 'linear_1').args[0]:
// unknown value 'v9'"), `what()` is the full message.
class GraphFormatError : public std::runtime_error {
 public:
  GraphFormatError(std::string where, std::string problem);
  const std::string& where() const { return where_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string where_;
  std::string problem_;
};

// Parses and validates; throws GraphFormatError on malformed input (wrong schema, missing
// field, wrong type, reference to an undefined value, non-topological order, shape/stride
// rank mismatch). Unknown op targets are fine: they stay opaque nodes.
Graph graph_from_json(const nlohmann::json& doc);
// Reads and parses the file: an unreadable file or invalid JSON is a GraphFormatError whose
// `where` is the path; validation errors have their `where` prefixed with "<path>: ".
Graph load_graph(const std::filesystem::path& path);
nlohmann::json graph_to_json(const Graph& g);

// The JSON spelling of a value kind ("input", "parameter", "buffer", "constant",
// "intermediate") and its inverse (nullopt for anything else).
std::string_view value_kind_name(ValueKind kind);
std::optional<ValueKind> parse_value_kind(std::string_view name);

}  // namespace fact::graph
