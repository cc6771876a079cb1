// Loading and saving graph JSON (schema: docs/graph_json.md).
#pragma once
#include <filesystem>
#include <stdexcept>
#include <string>

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
Graph load_graph(const std::filesystem::path& path);  // also reports unreadable files / bad JSON
nlohmann::json graph_to_json(const Graph& g);

}  // namespace fact::graph
