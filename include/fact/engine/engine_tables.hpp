// The engine's vocabulary tables (FactStatus names, dtypes, precision modes, tolerances) as one
// JSON document: what fact_engine_tables (c_api.h) returns, so that Python reads the tables the
// engine compiled rather than a copy of them.
#pragma once
#include <nlohmann/json.hpp>

namespace fact::engine {

// {"schema": "fact.tables/1", "abi_version": N,
//  "status": [{"value", "name"}],
//  "dtypes": [{"name", "label", "aliases", "abi", "subgraph_abi", "bytes", "floating"}],
//  "precisions": [{"name", "tolerance", "float32_math"}],
//  "tolerances": {"<precision>": {"<floating dtype name>": bound}},
//  "default_precision": {"<dtype name>": "<precision>"},
//  "three_tf32": "3xtf32", "sgemm_error_ratio_limit": 20.0}
nlohmann::json engine_tables();

}  // namespace fact::engine
