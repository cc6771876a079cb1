// Element types: the one table of their spellings, sizes and ABI values. Every parser of a dtype
// word (graph files, command lines, problem strings, the C API) and every DType -> FactDType
// switch reads it; Python reads it through fact_engine_tables (include/fact/engine/c_api.h).
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string_view>

namespace fact::core {

enum class DType { Float64, Float32, Float16, BFloat16, Int64, Int32, Int16, Int8, UInt8, Bool, Unknown };

struct DTypeInfo {
  DType dtype;
  std::string_view name;   // torch's name and the capture's spelling: "bfloat16" (torch.bfloat16)
  std::string_view label;  // the short token of reasons and tables: "bf16"
  std::array<std::string_view, 3> aliases;  // other spellings a parser accepts ("" ends the list)
  int32_t abi;             // FactDType (FACT_DTYPE_NONE when the common ABI names no such type)
  int32_t subgraph_abi;    // the element code of a FactTensor (FactDType or FACT_SUBGRAPH_DTYPE_*),
                           // -1 when the subgraph ABI has none
  int bytes;               // one element; 0 for Unknown
  bool floating;
};

// Every dtype, Unknown last.
std::span<const DTypeInfo> dtype_table();
const DTypeInfo& dtype_info(DType dtype);

// Any spelling in the table: the name ("float16"), with or without "torch.", the label ("fp16")
// or an alias ("f16", "half"). Unknown for anything else.
DType parse_dtype(std::string_view text);
// "float32", "bfloat16", ...: the inverse of parse_dtype.
std::string_view dtype_name(DType dtype);
// "bf16", "fp16", "fp32", "fp64", "int8", ...
std::string_view dtype_label(DType dtype);
int dtype_bytes(DType dtype);
bool is_floating(DType dtype);
// FactDType of `dtype` (FACT_DTYPE_NONE when the ABI has none), and back (Unknown for
// FACT_DTYPE_NONE or a value the ABI does not define).
int32_t to_fact_dtype(DType dtype);
DType from_fact_dtype(int32_t abi);

}  // namespace fact::core
