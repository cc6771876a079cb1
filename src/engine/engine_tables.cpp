#include "fact/engine/engine_tables.hpp"

#include <string>

#include "fact/core/dtype.hpp"
#include "fact/core/precision.hpp"
#include "fact/core/status_names.hpp"

namespace fact::engine {

using nlohmann::json;

nlohmann::json engine_tables() {
  json status = json::array();
  for (const auto& entry : core::kStatusNames) {
    status.push_back({{"value", static_cast<int>(entry.status)}, {"name", entry.name}});
  }
  json dtypes = json::array();
  json default_precision = json::object();
  for (const auto& entry : core::dtype_table()) {
    json aliases = json::array();
    for (std::string_view alias : entry.aliases) {
      if (!alias.empty()) aliases.push_back(alias);
    }
    dtypes.push_back({{"name", entry.name}, {"label", entry.label}, {"aliases", aliases}, {"abi", entry.abi},
                      {"subgraph_abi", entry.subgraph_abi}, {"bytes", entry.bytes}, {"floating", entry.floating}});
    if (entry.dtype != core::DType::Unknown) {
      default_precision[std::string(entry.name)] = core::precision_name(core::default_precision(entry.dtype));
    }
  }
  json precisions = json::array();
  json tolerances = json::object();
  for (const auto& mode : core::precision_table()) {
    precisions.push_back({{"name", mode.name}, {"tolerance", mode.tolerance}, {"float32_math", mode.float32_math}});
    json by_dtype = json::object();
    for (const auto& entry : core::dtype_table()) {
      if (entry.floating) by_dtype[std::string(entry.name)] = core::tolerance_for(mode.mode, entry.dtype);
    }
    tolerances[std::string(mode.name)] = by_dtype;
  }
  return {{"schema", "fact.tables/1"},
          {"abi_version", FACT_ABI_VERSION},
          {"status", status},
          {"dtypes", dtypes},
          {"precisions", precisions},
          {"tolerances", tolerances},
          {"default_precision", default_precision},
          {"three_tf32", core::kThreeTf32},
          {"sgemm_error_ratio_limit", core::kSgemmErrorRatioLimit}};
}

}  // namespace fact::engine
