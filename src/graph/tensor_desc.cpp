#include "fact/graph/tensor_desc.hpp"

#include <sstream>

namespace fact::graph {

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
