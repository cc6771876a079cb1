#include "fact/core/dtype.hpp"

#include "fact/core/fact_subgraph_abi.h"

namespace fact::core {

namespace {

constexpr std::array<DTypeInfo, 11> kDTypes{{
    {DType::Float64, "float64", "fp64", {"f64", "double"}, FACT_DTYPE_F64, FACT_DTYPE_F64, 8, true},
    {DType::Float32, "float32", "fp32", {"f32", "float"}, FACT_DTYPE_F32, FACT_DTYPE_F32, 4, true},
    {DType::Float16, "float16", "fp16", {"f16", "half"}, FACT_DTYPE_F16, FACT_DTYPE_F16, 2, true},
    {DType::BFloat16, "bfloat16", "bf16", {}, FACT_DTYPE_BF16, FACT_DTYPE_BF16, 2, true},
    {DType::Int64, "int64", "int64", {"long"}, FACT_DTYPE_NONE, FACT_SUBGRAPH_DTYPE_I64, 8, false},
    {DType::Int32, "int32", "int32", {"int"}, FACT_DTYPE_NONE, FACT_SUBGRAPH_DTYPE_I32, 4, false},
    {DType::Int16, "int16", "int16", {"short"}, FACT_DTYPE_NONE, -1, 2, false},
    {DType::Int8, "int8", "int8", {}, FACT_DTYPE_NONE, -1, 1, false},
    {DType::UInt8, "uint8", "uint8", {}, FACT_DTYPE_NONE, -1, 1, false},
    {DType::Bool, "bool", "bool", {}, FACT_DTYPE_NONE, FACT_SUBGRAPH_DTYPE_BOOL, 1, false},
    {DType::Unknown, "unknown", "unknown", {}, FACT_DTYPE_NONE, -1, 0, false},
}};

bool spells(const DTypeInfo& entry, std::string_view text) {
  if (entry.name == text || entry.label == text) return true;
  for (std::string_view alias : entry.aliases) {
    if (!alias.empty() && alias == text) return true;
  }
  return false;
}

}  // namespace

std::span<const DTypeInfo> dtype_table() { return kDTypes; }

const DTypeInfo& dtype_info(DType dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.dtype == dtype) return entry;
  }
  return kDTypes.back();
}

DType parse_dtype(std::string_view text) {
  if (text.starts_with("torch.")) text.remove_prefix(6);
  for (const auto& entry : kDTypes) {
    if (entry.dtype != DType::Unknown && spells(entry, text)) return entry.dtype;
  }
  return DType::Unknown;
}

std::string_view dtype_name(DType dtype) { return dtype_info(dtype).name; }
std::string_view dtype_label(DType dtype) { return dtype_info(dtype).label; }
int dtype_bytes(DType dtype) { return dtype_info(dtype).bytes; }
bool is_floating(DType dtype) { return dtype_info(dtype).floating; }
int32_t to_fact_dtype(DType dtype) { return dtype_info(dtype).abi; }

DType from_fact_dtype(int32_t abi) {
  if (abi == FACT_DTYPE_NONE) return DType::Unknown;
  for (const auto& entry : kDTypes) {
    if (entry.abi == abi) return entry.dtype;
  }
  return DType::Unknown;
}

}  // namespace fact::core
