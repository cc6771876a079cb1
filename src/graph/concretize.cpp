// Symbolic graph documents: the declared ranges and the static document for an assignment.
#include "fact/graph/concretize.hpp"

#include <cctype>
#include <set>

#include "fact/graph/graph_json.hpp"

namespace fact::graph {

namespace {

using nlohmann::json;

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

int64_t integer_field(const json& entry, const char* key, const std::string& where, std::optional<int64_t> fallback) {
  auto it = entry.find(key);
  if (it == entry.end()) {
    if (fallback) return *fallback;
    throw GraphFormatError(where, std::string("missing field '") + key + "'");
  }
  if (!it->is_number_integer()) throw GraphFormatError(where + "." + key, "expected an integer, got " + it->dump());
  return it->get<int64_t>();
}

// An integer stays; a string is an expression evaluated as a size.
json size_of(const json& entry, const core::SizeAssignment& assignment, const std::string& where) {
  if (entry.is_number_integer()) return entry;
  if (!entry.is_string()) throw GraphFormatError(where, "expected an integer or a size expression, got " + entry.dump());
  try {
    return core::evaluate_size_expr(entry.get<std::string>(), assignment);
  } catch (const core::SizeExprError& e) {
    throw GraphFormatError(where, e.what());
  }
}

json sizes_of(const json& list, const core::SizeAssignment& assignment, const std::string& where) {
  if (!list.is_array()) throw GraphFormatError(where, "expected an array, got " + list.dump());
  json out = json::array();
  for (size_t i = 0; i < list.size(); ++i)
    out.push_back(size_of(list[i], assignment, where + "[" + std::to_string(i) + "]"));
  return out;
}

// {"sym": e} -> {"const": value}; {"syms": [...]} -> {"const": [...]}; others unchanged.
json argument_of(const json& arg, const core::SizeAssignment& assignment, const std::string& where) {
  if (!arg.is_object()) return arg;
  if (auto it = arg.find("sym"); it != arg.end()) {
    if (arg.size() != 1) throw GraphFormatError(where, "a {\"sym\"} argument has exactly one key");
    return {{"const", size_of(*it, assignment, where + ".sym")}};
  }
  if (auto it = arg.find("syms"); it != arg.end()) {
    if (arg.size() != 1) throw GraphFormatError(where, "a {\"syms\"} argument has exactly one key");
    return {{"const", sizes_of(*it, assignment, where + ".syms")}};
  }
  return arg;
}

std::string entry_where(const char* array, size_t index, const json& entry) {
  std::string where = std::string(array) + "[" + std::to_string(index) + "]";
  if (entry.is_object() && entry.contains("id") && entry["id"].is_string())
    where += " (id '" + entry["id"].get<std::string>() + "')";
  if (entry.is_object() && entry.contains("name") && entry["name"].is_string())
    where += " (name '" + entry["name"].get<std::string>() + "')";
  return where;
}

}  // namespace

bool is_symbolic(const json& document) {
  if (!document.is_object()) return false;
  auto it = document.find("symbols");
  return it != document.end() && it->is_array() && !it->empty();
}

std::vector<SymbolRange> graph_symbols(const json& document) {
  std::vector<SymbolRange> out;
  if (!document.is_object() || !document.contains("symbols") || document["symbols"].is_null()) return out;
  const json& list = document["symbols"];
  if (!list.is_array()) throw GraphFormatError("symbols", "expected an array, got " + list.dump());
  std::set<std::string> names;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& entry = list[i];
    const std::string where = entry_where("symbols", i, entry);
    if (!entry.is_object()) throw GraphFormatError(where, "expected an object");
    if (!entry.contains("name") || !entry["name"].is_string())
      throw GraphFormatError(where, "missing field 'name' (a string)");
    SymbolRange s;
    s.name = entry["name"].get<std::string>();
    if (!is_identifier(s.name)) throw GraphFormatError(where, "symbol name '" + s.name + "' is not an identifier");
    if (!names.insert(s.name).second) throw GraphFormatError(where, "symbol '" + s.name + "' declared twice");
    s.min = integer_field(entry, "min", where, std::nullopt);
    s.max = integer_field(entry, "max", where, std::nullopt);
    s.multiple = integer_field(entry, "multiple", where, 1);
    s.hint = integer_field(entry, "hint", where, s.min);
    const std::string range = "[" + std::to_string(s.min) + ", " + std::to_string(s.max) + "]";
    if (s.min < 0) throw GraphFormatError(where, "min " + std::to_string(s.min) + " is negative");
    if (s.max < s.min) throw GraphFormatError(where, "max " + std::to_string(s.max) + " is below min " + std::to_string(s.min));
    if (s.multiple < 1) throw GraphFormatError(where, "multiple " + std::to_string(s.multiple) + " is not positive");
    if ((s.min + s.multiple - 1) / s.multiple * s.multiple > s.max)
      throw GraphFormatError(where, "no multiple of " + std::to_string(s.multiple) + " inside " + range);
    if (s.hint < s.min || s.hint > s.max)
      throw GraphFormatError(where, "hint " + std::to_string(s.hint) + " is outside " + range);
    if (auto t = entry.find("typical"); t != entry.end() && !t->is_null()) {
      if (!t->is_array()) throw GraphFormatError(where + ".typical", "expected an array of integers");
      for (const json& v : *t) {
        if (!v.is_number_integer()) throw GraphFormatError(where + ".typical", "expected an integer, got " + v.dump());
        const int64_t size = v.get<int64_t>();
        if (size < s.min || size > s.max)
          throw GraphFormatError(where + ".typical", "typical size " + std::to_string(size) + " is outside " + range);
        s.typical.push_back(size);
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

json concretize(const json& document, const core::SizeAssignment& assignment) {
  if (!document.is_object()) throw GraphFormatError("document", "expected a JSON object");
  const std::vector<SymbolRange> symbols = graph_symbols(document);
  std::set<std::string> declared;
  for (const auto& s : symbols) {
    declared.insert(s.name);
    if (!assignment.count(s.name)) throw GraphFormatError("symbols", "no size given for symbol '" + s.name + "'");
  }
  for (const auto& [name, value] : assignment) {
    if (!declared.count(name)) throw GraphFormatError("symbols", "size given for undeclared symbol '" + name + "'");
    if (value < 0) throw GraphFormatError("symbols", "negative size " + std::to_string(value) + " for '" + name + "'");
  }
  json out = document;
  out.erase("symbols");
  if (out.contains("values") && out["values"].is_array()) {
    for (size_t i = 0; i < out["values"].size(); ++i) {
      json& value = out["values"][i];
      const std::string where = entry_where("values", i, value);
      if (!value.is_object()) continue;  // the loader reports it
      for (const char* key : {"shape", "stride"})
        if (value.contains(key)) value[key] = sizes_of(value[key], assignment, where + "." + key);
    }
  }
  if (out.contains("nodes") && out["nodes"].is_array()) {
    for (size_t i = 0; i < out["nodes"].size(); ++i) {
      json& node = out["nodes"][i];
      const std::string where = entry_where("nodes", i, node);
      if (!node.is_object()) continue;
      if (node.contains("args") && node["args"].is_array())
        for (size_t a = 0; a < node["args"].size(); ++a)
          node["args"][a] = argument_of(node["args"][a], assignment, where + ".args[" + std::to_string(a) + "]");
      if (node.contains("kwargs") && node["kwargs"].is_object())
        for (auto& [key, arg] : node["kwargs"].items())
          arg = argument_of(arg, assignment, where + ".kwargs." + key);
    }
  }
  return out;
}

std::string assignment_text(const core::SizeAssignment& assignment, const std::vector<std::string>& order) {
  std::string out;
  for (const auto& name : order) {
    auto it = assignment.find(name);
    if (it == assignment.end()) continue;
    out += (out.empty() ? "" : ", ") + name + "=" + std::to_string(it->second);
  }
  return out;
}

}  // namespace fact::graph
