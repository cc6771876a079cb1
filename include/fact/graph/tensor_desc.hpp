// Tensor metadata as captured from PyTorch: shape, strides (in elements), dtype, device.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fact/core/dtype.hpp"

namespace fact::graph {

// Element types are declared once, in fact/core/dtype.hpp (names, aliases, sizes, ABI values);
// the graph speaks of them by these names.
using core::DType;
using core::dtype_bytes;
using core::dtype_label;
using core::dtype_name;
using core::is_floating;
using core::parse_dtype;

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
