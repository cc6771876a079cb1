// Element types of the buffers the verifier allocates, poisons and compares, and their poison
// patterns. Plain values only (no CUDA, no engine headers, C++17: the runtime's .cu files
// include it), so that host code, the CUDA kernels (device_kernels.hpp) and tests share one
// table.
#pragma once
#include <cstdint>

namespace fact::runtime {

enum class ElementType : int { F32 = 0, BF16 = 1, F16 = 2, F64 = 3, I64 = 4, I32 = 5, U8 = 6 };

// Bit patterns written into outputs before a kernel runs. For floating types quiet NaNs with a
// payload that arithmetic does not produce (canonical NaNs are 0x7FC00000 / 0x7FFFFFFF), so an
// element that still holds it was not written and a NaN the kernel wrote is told apart; for
// integer types the byte 0xA5 repeated (not a bool, and an unlikely integer).
inline constexpr uint32_t kPoisonF32 = 0x7FC5A5A5u;
inline constexpr uint16_t kPoisonBF16 = 0x7FC5u;
inline constexpr uint16_t kPoisonF16 = 0x7E5Au;
inline constexpr uint64_t kPoisonF64 = 0x7FF8A5A5A5A5A5A5ull;
inline constexpr uint64_t kPoisonInteger = 0xA5A5A5A5A5A5A5A5ull;  // the low bytes for narrower types

// Bytes of one element (4, 2, 2, 8, 8, 4, 1).
constexpr int element_bytes(ElementType type) {
  switch (type) {
    case ElementType::F32: case ElementType::I32: return 4;
    case ElementType::BF16: case ElementType::F16: return 2;
    case ElementType::F64: case ElementType::I64: return 8;
    case ElementType::U8: return 1;
  }
  return 1;
}

constexpr bool is_floating(ElementType type) {
  return type == ElementType::F32 || type == ElementType::BF16 || type == ElementType::F16 ||
         type == ElementType::F64;
}

// The poison pattern of `type` in the low element_bytes(type) bytes.
constexpr uint64_t poison_bits(ElementType type) {
  switch (type) {
    case ElementType::F32: return kPoisonF32;
    case ElementType::BF16: return kPoisonBF16;
    case ElementType::F16: return kPoisonF16;
    case ElementType::F64: return kPoisonF64;
    case ElementType::I64: return kPoisonInteger;
    case ElementType::I32: return kPoisonInteger & 0xFFFFFFFFull;
    case ElementType::U8: return kPoisonInteger & 0xFFull;
  }
  return 0;
}

// One element at `data` (host memory) as a double: bf16 and fp16 widened exactly.
double element_to_double(const void* data, ElementType type);
// Whether the element at `data` (host memory) holds the poison pattern of `type`.
bool holds_poison(const void* data, ElementType type);

}  // namespace fact::runtime
