// An argument image: a kernel call as data (docs/plan.md, "A call"). The bytes of a kind's ABI
// struct with every address zero, the slots where tensor addresses go, and the tensors: the
// graph values the call reads (operands) and the ones it allocates and writes (results).
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "fact/core/fact_abi.h"
#include "fact/graph/graph.hpp"

namespace fact {

struct PointerSlot {
  enum class From { Operand, Result };
  size_t offset = 0;           // byte offset of the 64-bit address in the struct
  From from = From::Operand;
  size_t index = 0;            // into operands / results
  int64_t element_offset = 0;  // added to the tensor's address, in elements
};

struct OperandRef {
  graph::ValueId value;  // the graph value whose tensor the call addresses
  graph::DType dtype = graph::DType::Unknown;
};

struct ResultSpec {
  graph::ValueId value;  // the graph value the call produces
  std::vector<int64_t> shape, stride;
  graph::DType dtype = graph::DType::Unknown;
  // Empty: the result is allocated as itself (empty_strided(shape, stride)). Otherwise the
  // result is allocated as a dense (contiguous) tensor of this shape and the call's value is the
  // view {shape, stride} of it at storage offset 0: its storage holds every element of the
  // allocation, which the kernel may write (a GEMM's D with padded rows: [.., M, ld] whose
  // [..., :N] is the value; docs/plan.md, "alloc_shape"). The plan's JSON key is "alloc_shape".
  std::vector<int64_t> alloc_shape;
};

// Elements a result's storage must hold: those of its allocation (alloc_shape), or the span of
// its shape and strides (0 for an empty view).
int64_t result_storage_elements(const ResultSpec& result);

// An integer field of the struct: `bytes` little-endian bytes at `offset` (a size, a stride, a
// count, an enum). A declared dynamic range fits each one as a polynomial of the sizes
// (docs/dynamic_shapes.md); every other byte must not depend on them.
struct IntField {
  size_t offset = 0;
  size_t bytes = 0;  // 1, 2, 4 or 8
  bool operator==(const IntField&) const = default;
};

struct ArgImage {
  std::vector<uint8_t> bytes;
  std::vector<IntField> int_fields;  // every integer put wrote, by offset
  std::vector<PointerSlot> pointers;
  std::vector<OperandRef> operands;
  std::vector<ResultSpec> results;

  // Index of `value` in operands, appended when new.
  size_t operand(const graph::ValueId& value, graph::DType dtype);
  // Writes `value` at byte `offset` (which must lie inside bytes). An integer or enum value is
  // recorded in int_fields (replacing a field at the same offset); a float or a struct is not.
  // Kinds write every integer of their struct through put, so that int_fields is complete.
  template <class T>
  void put(size_t offset, const T& value);
  // Writes a kind struct's FactCallHeader at `offset`, field by field (put).
  void put_header(size_t offset, const FactCallHeader& header);

  // {"operands":[{"value","dtype"}], "results":[{"value","shape","stride","dtype"[,"alloc_shape"]}],
  //  "args":{"size","hex","pointers":[{"offset","from","index","element_offset"}],
  //          "int_fields":[[offset, bytes], ...]}}
  nlohmann::json to_json() const;
  static ArgImage from_json(const nlohmann::json& j);

 private:
  void record_int_field(size_t offset, size_t width);
};

// Fills a copy of image.bytes with addresses: operands[i] / results[i] are the tensors' base
// addresses. Used by the host reference path and tests (Python does the same from the JSON).
std::vector<uint8_t> bind_addresses(const ArgImage& image, const std::vector<const void*>& operands,
                                    const std::vector<void*>& results,
                                    const std::vector<int>& operand_element_bytes,
                                    const std::vector<int>& result_element_bytes);

template <class T>
void ArgImage::put(size_t offset, const T& value) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (offset + sizeof(T) > bytes.size()) throw std::out_of_range("ArgImage::put past the struct");
  const auto* raw = reinterpret_cast<const uint8_t*>(&value);
  std::copy(raw, raw + sizeof(T), bytes.begin() + static_cast<std::ptrdiff_t>(offset));
  if constexpr (std::is_integral_v<T> || std::is_enum_v<T>) record_int_field(offset, sizeof(T));
}

}  // namespace fact
