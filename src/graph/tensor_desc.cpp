#include "fact/graph/tensor_desc.hpp"

#include <array>
#include <sstream>
#include <utility>

namespace fact::graph {

namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int bytes;
  bool floating;
};

constexpr std::array<DTypeInfo, 11> kDTypes{{
    {DType::Float64, "float64", 8, true},
    {DType::Float32, "float32", 4, true},
    {DType::Float16, "float16", 2, true},
    {DType::BFloat16, "bfloat16", 2, true},
    {DType::Int64, "int64", 8, false},
    {DType::Int32, "int32", 4, false},
    {DType::Int16, "int16", 2, false},
    {DType::Int8, "int8", 1, false},
    {DType::UInt8, "uint8", 1, false},
    {DType::Bool, "bool", 1, false},
    {DType::Unknown, "unknown", 0, false},
}};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.dtype == dtype) return entry;
  }
  return kDTypes.back();
}

}  // namespace

DType parse_dtype(std::string_view name) {
  if (name.rfind("torch.", 0) == 0) name.remove_prefix(6);
  for (const auto& entry : kDTypes) {
    if (entry.dtype != DType::Unknown && entry.name == name) return entry.dtype;
  }
  return DType::Unknown;
}

std::string_view dtype_name(DType dtype) { return info(dtype).name; }
std::string_view dtype_label(DType dtype) {
  switch (dtype) {
    case DType::Float64: return "fp64";
    case DType::Float32: return "fp32";
    case DType::Float16: return "fp16";
    case DType::BFloat16: return "bf16";
    case DType::Int64: return "int64";
    case DType::Int32: return "int32";
    case DType::Int16: return "int16";
    case DType::Int8: return "int8";
    case DType::UInt8: return "uint8";
    case DType::Bool: return "bool";
    case DType::Unknown: return "unknown";
  }
  return "unknown";
}

int dtype_bytes(DType dtype) { return info(dtype).bytes; }
bool is_floating(DType dtype) { return info(dtype).floating; }

int64_t TensorDesc::numel() const {
  int64_t count = 1;
  for (int64_t size : shape) count *= size;
  return count;
}

bool TensorDesc::is_contiguous() const {
  if (stride.size() != shape.size()) return false;
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 0) return true;
    if (shape[i] != 1 && stride[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::string TensorDesc::to_string() const {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "] " << dtype_name(dtype);
  return out.str();
}

}  // namespace fact::graph
