#include "fact/runtime/element_type.hpp"

#include <cmath>
#include <cstring>
#include <limits>

namespace fact::runtime {

namespace {

double half_to_double(uint16_t bits) {
  const int sign = bits >> 15, exponent = (bits >> 10) & 0x1F, mantissa = bits & 0x3FF;
  double value;
  if (exponent == 0) value = std::ldexp(double(mantissa), -24);
  else if (exponent == 31) value = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else value = std::ldexp(double(mantissa | 0x400), exponent - 25);
  return sign ? -value : value;
}

}  // namespace

double element_to_double(const void* data, ElementType type) {
  switch (type) {
    case ElementType::F32: { float v; std::memcpy(&v, data, 4); return v; }
    case ElementType::F64: { double v; std::memcpy(&v, data, 8); return v; }
    case ElementType::BF16: {
      uint16_t bits; std::memcpy(&bits, data, 2);
      const uint32_t wide = uint32_t(bits) << 16;
      float v; std::memcpy(&v, &wide, 4);
      return v;
    }
    case ElementType::F16: { uint16_t bits; std::memcpy(&bits, data, 2); return half_to_double(bits); }
    case ElementType::I64: { int64_t v; std::memcpy(&v, data, 8); return double(v); }
    case ElementType::I32: { int32_t v; std::memcpy(&v, data, 4); return v; }
    case ElementType::U8: return *static_cast<const uint8_t*>(data);
  }
  return 0.0;
}

bool holds_poison(const void* data, ElementType type) {
  uint64_t bits = 0;
  std::memcpy(&bits, data, size_t(element_bytes(type)));  // little-endian: the low bytes
  return bits == poison_bits(type);
}

}  // namespace fact::runtime
