// Lookup tables from an enum to its C++ spelling and its short token: one
// table per enum. Pattern folders build theirs with these helpers.
#pragma once
#include <array>
#include <stdexcept>
#include <string>
#include <string_view>

namespace fact::realize {

template <class Enum>
struct Spelling {
  Enum value;
  std::string_view cpp;    // empty: no CUTLASS spelling
  std::string_view token;
};

template <class Enum, size_t N>
const Spelling<Enum>& find_value(const std::array<Spelling<Enum>, N>& table, Enum value,
                                 std::string_view what) {
  for (const auto& entry : table) {
    if (entry.value == value) return entry;
  }
  throw std::invalid_argument("no " + std::string(what) + " spelling for enum value " +
                              std::to_string(static_cast<int>(value)));
}

template <class Enum, size_t N>
Enum find_token(const std::array<Spelling<Enum>, N>& table, std::string_view token,
                std::string_view what) {
  for (const auto& entry : table) {
    if (entry.token == token) return entry.value;
  }
  std::string known;
  for (const auto& entry : table) known += (known.empty() ? "" : ", ") + std::string(entry.token);
  throw std::invalid_argument("unknown " + std::string(what) + " '" + std::string(token) +
                              "' (known: " + known + ")");
}

template <class Enum, size_t N>
std::string_view cpp_of(const std::array<Spelling<Enum>, N>& table, Enum value,
                        std::string_view what) {
  const auto& entry = find_value(table, value, what);
  if (entry.cpp.empty()) {
    throw std::invalid_argument(std::string(what) + " '" + std::string(entry.token) +
                                "' has no CUTLASS spelling");
  }
  return entry.cpp;
}

}  // namespace fact::realize
