#include "fact/util/json_fields.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace fact::util {

using nlohmann::json;

json number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

const json& field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) throw std::invalid_argument(where + ": missing field '" + key + "'");
  return *it;
}

double number_from(const json& j, const std::string& where) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto s = j.get<std::string>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  }
  throw std::invalid_argument(where + ": expected a number");
}

double number_field(const json& j, const char* key, const std::string& where, double fallback) {
  auto it = j.find(key);
  return it == j.end() ? fallback : number_from(*it, where + "." + key);
}

int64_t int_field(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_number_integer()) throw std::invalid_argument(where + "." + key + ": expected an integer");
  return v.get<int64_t>();
}

std::string string_field(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_string()) throw std::invalid_argument(where + "." + key + ": expected a string");
  return v.get<std::string>();
}

core::DType dtype_field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return core::DType::Unknown;
  if (!it->is_string()) throw std::invalid_argument(where + "." + key + ": expected a string");
  return core::parse_dtype(it->get<std::string>());
}

}  // namespace fact::util
