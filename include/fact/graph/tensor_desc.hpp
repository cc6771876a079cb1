// Tensor metadata as captured from PyTorch: shape, strides (in elements), dtype, device.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fact::graph {

enum class DType { Float64, Float32, Float16, BFloat16, Int64, Int32, Int16, Int8, UInt8, Bool, Unknown };

// Parses the capture's dtype spelling ("float32", "bfloat16", ...); Unknown for anything else.
DType parse_dtype(std::string_view name);
// Inverse of parse_dtype.
std::string_view dtype_name(DType dtype);
// "bf16", "fp16", "fp32", "fp64", "int8", ...: the short token used in reasons and tables.
std::string_view dtype_label(DType dtype);
// Size of one element in bytes (0 for Unknown).
int dtype_bytes(DType dtype);
bool is_floating(DType dtype);

struct TensorDesc {
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;  // in elements, same rank as shape
  DType dtype = DType::Unknown;
  std::string device;  // "cpu", "cuda:0", "meta"

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const;
  // True when strides are those of a row-major (C-contiguous) tensor of this shape.
  bool is_contiguous() const;
  // "[128, 512, 768] bfloat16"
  std::string to_string() const;
};

}  // namespace fact::graph
