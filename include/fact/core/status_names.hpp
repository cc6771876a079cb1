// FactStatus names (fact_abi.h): the one table. Header-only, because the torch extension
// (src/torch_ext/fact_launch_op.cpp) compiles on its own from headers; libfact's C API
// (fact_status_name, fact_engine_tables), the kernel library loader and python/fact/abi.py (through
// fact_engine_tables) all read this table.
#pragma once
#include <array>
#include <string>
#include <string_view>

#include "fact/core/fact_abi.h"

namespace fact::core {

struct StatusName {
  FactStatus status;
  std::string_view name;  // the enumerator's spelling in fact_abi.h
};

inline constexpr std::array<StatusName, 7> kStatusNames{{
    {FACT_OK, "FACT_OK"},
    {FACT_ERR_INVALID_ARGS, "FACT_ERR_INVALID_ARGS"},
    {FACT_ERR_CANNOT_IMPLEMENT, "FACT_ERR_CANNOT_IMPLEMENT"},
    {FACT_ERR_WORKSPACE, "FACT_ERR_WORKSPACE"},
    {FACT_ERR_INITIALIZE, "FACT_ERR_INITIALIZE"},
    {FACT_ERR_LAUNCH, "FACT_ERR_LAUNCH"},
    {FACT_ERR_INTERNAL, "FACT_ERR_INTERNAL"},
}};

// The name of a known status; empty for a value fact_abi.h does not define.
constexpr std::string_view known_status_name(int status) {
  for (const auto& entry : kStatusNames) {
    if (static_cast<int>(entry.status) == status) return entry.name;
  }
  return {};
}

// "FACT_OK", "FACT_ERR_CANNOT_IMPLEMENT", ...; "FACT_STATUS_<n>" for an unknown value.
inline std::string status_name(int status) {
  const std::string_view known = known_status_name(status);
  return known.empty() ? "FACT_STATUS_" + std::to_string(status) : std::string(known);
}

}  // namespace fact::core
