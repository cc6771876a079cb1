// Symbolic graph documents (docs/graph_json.md, "Symbolic sizes"; docs/dynamic_shapes.md): the
// declared ranges of a graph's symbols, and the static document for one assignment of them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/core/size_expr.hpp"

namespace fact::graph {

// One declared range: every size a multiple of `multiple` inside [min, max]; `hint` is the size
// planned and verified first; `typical` sizes get their own bucket.
struct SymbolRange {
  std::string name;
  int64_t min = 1, max = 1, hint = 1, multiple = 1;
  std::vector<int64_t> typical;
};

// The document's top-level `symbols` (empty when absent or empty: a static graph). Throws
// GraphFormatError for a malformed entry: a name that is not an identifier or is repeated,
// min < 0, max < min, hint or a typical size outside [min, max], multiple < 1, no multiple of
// `multiple` inside the range.
std::vector<SymbolRange> graph_symbols(const nlohmann::json& document);

// True when the document declares symbols.
bool is_symbolic(const nlohmann::json& document);

// The static document for `assignment` (a value per declared symbol): shape and stride
// expressions become integers, {"sym": e} and {"syms": [...]} arguments become {"const": ...},
// and `symbols` is removed; everything else is copied. Throws GraphFormatError naming the place
// ("values[0] (id 'x').shape[0]") for an expression that does not parse, reads an undeclared
// symbol or is negative, and for an assignment that misses a declared symbol or names an
// undeclared one.
nlohmann::json concretize(const nlohmann::json& document, const core::SizeAssignment& assignment);

// "batch=65, seq=129": an assignment as reasons and progress lines print it, in `order`.
std::string assignment_text(const core::SizeAssignment& assignment, const std::vector<std::string>& order);

}  // namespace fact::graph
