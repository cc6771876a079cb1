#include "fact/problem/abi_elements.hpp"

#include <cmath>
#include <cstring>

#include "fact/core/dtype.hpp"
#include "fact/core/fact_abi.h"

namespace fact {

namespace {

double half_to_double(uint16_t h) {
  const int sign = (h >> 15) & 1, exponent = (h >> 10) & 31, mantissa = h & 1023;
  double value;
  if (exponent == 0) {
    value = std::ldexp(double(mantissa), -24);
  } else if (exponent == 31) {
    value = mantissa ? std::nan("") : INFINITY;
  } else {
    value = std::ldexp(double(mantissa | 1024), exponent - 25);
  }
  return sign ? -value : value;
}

// Round to nearest even from double directly (no double rounding through float).
uint16_t double_to_half(double d) {
  const uint16_t sign = std::signbit(d) ? 0x8000u : 0u;
  const double a = std::fabs(d);
  if (std::isnan(d)) return static_cast<uint16_t>(sign | 0x7E00u);
  if (a >= 65520.0) return static_cast<uint16_t>(sign | 0x7C00u);
  if (a < std::ldexp(1.0, -14)) {  // subnormal: multiples of 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a * std::ldexp(1.0, 24))));
  }
  int exponent = 0;
  const double fraction = std::frexp(a, &exponent);  // a = fraction * 2^exponent, fraction in [0.5, 1)
  // 11 significant bits: mantissa in [1024, 2048).
  double scaled = std::nearbyint(std::ldexp(fraction, 11));
  if (scaled >= 2048.0) {
    scaled /= 2.0;
    ++exponent;
  }
  const int biased = exponent - 1 + 15;
  if (biased >= 31) return static_cast<uint16_t>(sign | 0x7C00u);
  return static_cast<uint16_t>(sign | (biased << 10) | (static_cast<uint16_t>(scaled) & 1023u));
}

uint16_t double_to_bf16(double d) {
  if (std::isnan(d)) return 0x7FC0u;
  const uint16_t sign = std::signbit(d) ? 0x8000u : 0u;
  const double a = std::fabs(d);
  if (a == 0.0) return sign;
  if (a >= std::ldexp(255.0 / 128.0 + 1.0 / 256.0, 127)) return static_cast<uint16_t>(sign | 0x7F80u);
  int exponent = 0;
  const double fraction = std::frexp(a, &exponent);
  if (exponent < -125) {  // subnormal bf16: multiples of 2^-133
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 133))));
  }
  double scaled = std::nearbyint(std::ldexp(fraction, 8));  // 8 significant bits
  if (scaled >= 256.0) {
    scaled /= 2.0;
    ++exponent;
  }
  const int biased = exponent - 1 + 127;
  if (biased >= 255) return static_cast<uint16_t>(sign | 0x7F80u);
  return static_cast<uint16_t>(sign | (biased << 7) | (static_cast<uint16_t>(scaled) & 127u));
}

}  // namespace

double load_abi_element(const void* base, int64_t index, int32_t type) {
  switch (type) {
    case FACT_DTYPE_F32: return static_cast<const float*>(base)[index];
    case FACT_DTYPE_F64: return static_cast<const double*>(base)[index];
    case FACT_DTYPE_F16: return half_to_double(static_cast<const uint16_t*>(base)[index]);
    case FACT_DTYPE_BF16: {
      const uint32_t bits = uint32_t(static_cast<const uint16_t*>(base)[index]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    default: return std::nan("");
  }
}

void store_abi_element(void* base, int64_t index, int32_t type, double value) {
  switch (type) {
    case FACT_DTYPE_F32: static_cast<float*>(base)[index] = static_cast<float>(value); break;
    case FACT_DTYPE_F64: static_cast<double*>(base)[index] = value; break;
    case FACT_DTYPE_F16: static_cast<uint16_t*>(base)[index] = double_to_half(value); break;
    case FACT_DTYPE_BF16: static_cast<uint16_t*>(base)[index] = double_to_bf16(value); break;
    default: break;
  }
}

bool known_abi_dtype(int32_t t) {
  return core::from_fact_dtype(t) != core::DType::Unknown;
}

}  // namespace fact
