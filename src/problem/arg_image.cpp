#include "fact/problem/arg_image.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <stdexcept>

namespace fact {

namespace {

std::string to_hex(const std::vector<uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

std::vector<uint8_t> from_hex(const std::string& text) {
  if (text.size() % 2 != 0) throw std::invalid_argument("argument image: odd number of hex digits");
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw std::invalid_argument(std::string("argument image: bad hex digit '") + c + "'");
  };
  std::vector<uint8_t> bytes(text.size() / 2);
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<uint8_t>(digit(text[2 * i]) * 16 + digit(text[2 * i + 1]));
  }
  return bytes;
}

// "torch.bfloat16": the spelling Python compares with str(tensor.dtype).
std::string torch_dtype(graph::DType dtype) { return "torch." + std::string(graph::dtype_name(dtype)); }

}  // namespace

size_t ArgImage::operand(const graph::ValueId& value, graph::DType dtype) {
  for (size_t i = 0; i < operands.size(); ++i) {
    if (operands[i].value == value) return i;
  }
  operands.push_back({value, dtype});
  return operands.size() - 1;
}

void ArgImage::put_header(size_t offset, const FactCallHeader& header) {
  put(offset + offsetof(FactCallHeader, abi_version), header.abi_version);
  put(offset + offsetof(FactCallHeader, kind), header.kind);
  put(offset + offsetof(FactCallHeader, size), header.size);
  put(offset + offsetof(FactCallHeader, reserved), header.reserved);
}

void ArgImage::record_int_field(size_t offset, size_t width) {
  // A field written again replaces what overlapped it.
  std::erase_if(int_fields, [&](const IntField& f) { return f.offset < offset + width && offset < f.offset + f.bytes; });
  auto at = std::lower_bound(int_fields.begin(), int_fields.end(), offset,
                             [](const IntField& f, size_t o) { return f.offset < o; });
  int_fields.insert(at, IntField{offset, width});
}

nlohmann::json ArgImage::to_json() const {
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& o : operands) {
    ops.push_back({{"value", o.value}, {"dtype", torch_dtype(o.dtype)}});
  }
  nlohmann::json res = nlohmann::json::array();
  for (const auto& r : results) {
    res.push_back({{"value", r.value}, {"shape", r.shape}, {"stride", r.stride},
                   {"dtype", torch_dtype(r.dtype)}});
    if (!r.alloc_shape.empty()) res.back()["alloc_shape"] = r.alloc_shape;
  }
  nlohmann::json slots = nlohmann::json::array();
  for (const auto& p : pointers) {
    slots.push_back({{"offset", p.offset},
                     {"from", p.from == PointerSlot::From::Operand ? "operand" : "result"},
                     {"index", p.index},
                     {"element_offset", p.element_offset}});
  }
  nlohmann::json fields = nlohmann::json::array();
  for (const auto& f : int_fields) fields.push_back({f.offset, f.bytes});
  return {{"operands", ops},
          {"results", res},
          {"args", {{"size", bytes.size()}, {"hex", to_hex(bytes)}, {"pointers", slots}, {"int_fields", fields}}}};
}

int64_t result_storage_elements(const ResultSpec& result) {
  if (!result.alloc_shape.empty()) {
    int64_t elements = 1;
    for (int64_t v : result.alloc_shape) elements *= v;
    return elements;
  }
  int64_t span = 1;
  for (size_t d = 0; d < result.shape.size() && d < result.stride.size(); ++d) {
    if (result.shape[d] == 0) return 0;
    span += (result.shape[d] - 1) * result.stride[d];
  }
  return span;
}

ArgImage ArgImage::from_json(const nlohmann::json& j) {
  ArgImage image;
  for (const auto& o : j.at("operands")) {
    image.operands.push_back({o.at("value").get<std::string>(),
                              graph::parse_dtype(o.at("dtype").get<std::string>())});
  }
  for (const auto& r : j.at("results")) {
    image.results.push_back({r.at("value").get<std::string>(),
                             r.at("shape").get<std::vector<int64_t>>(),
                             r.at("stride").get<std::vector<int64_t>>(),
                             graph::parse_dtype(r.at("dtype").get<std::string>()),
                             r.value("alloc_shape", std::vector<int64_t>{})});
    const ResultSpec& spec = image.results.back();
    if (!spec.alloc_shape.empty()) {
      int64_t span = 1;
      for (size_t d = 0; d < spec.shape.size() && d < spec.stride.size(); ++d) {
        if (spec.shape[d] == 0) span = 0;
        if (span > 0) span += (spec.shape[d] - 1) * spec.stride[d];
      }
      int64_t elements = 1;
      for (int64_t v : spec.alloc_shape) elements *= v;
      if (span > elements || std::any_of(spec.alloc_shape.begin(), spec.alloc_shape.end(),
                                         [](int64_t v) { return v < 0; }))
        throw std::invalid_argument("argument image: result " + spec.value +
                                    "'s view reaches past its alloc_shape");
    }
  }
  const auto& args = j.at("args");
  image.bytes = from_hex(args.at("hex").get<std::string>());
  if (image.bytes.size() != args.at("size").get<size_t>()) {
    throw std::invalid_argument("argument image: size does not match its bytes");
  }
  for (const auto& p : args.at("pointers")) {
    PointerSlot slot;
    slot.offset = p.at("offset").get<size_t>();
    const std::string from = p.at("from").get<std::string>();
    if (from != "operand" && from != "result") {
      throw std::invalid_argument("argument image: pointer 'from' must be operand or result");
    }
    slot.from = from == "operand" ? PointerSlot::From::Operand : PointerSlot::From::Result;
    slot.index = p.at("index").get<size_t>();
    slot.element_offset = p.value("element_offset", int64_t{0});
    image.pointers.push_back(slot);
  }
  for (const auto& f : args.value("int_fields", nlohmann::json::array())) {
    if (!f.is_array() || f.size() != 2) throw std::invalid_argument("argument image: an int field is [offset, bytes]");
    const IntField field{f[0].get<size_t>(), f[1].get<size_t>()};
    if (field.bytes != 1 && field.bytes != 2 && field.bytes != 4 && field.bytes != 8)
      throw std::invalid_argument("argument image: an int field is 1, 2, 4 or 8 bytes wide");
    if (field.offset + field.bytes > image.bytes.size())
      throw std::invalid_argument("argument image: an int field lies past the struct");
    image.int_fields.push_back(field);
  }
  return image;
}

std::vector<uint8_t> bind_addresses(const ArgImage& image, const std::vector<const void*>& operands,
                                    const std::vector<void*>& results,
                                    const std::vector<int>& operand_element_bytes,
                                    const std::vector<int>& result_element_bytes) {
  std::vector<uint8_t> bytes = image.bytes;
  for (const auto& slot : image.pointers) {
    const bool operand = slot.from == PointerSlot::From::Operand;
    const auto& bases = operand ? operands : std::vector<const void*>(results.begin(), results.end());
    const auto& sizes = operand ? operand_element_bytes : result_element_bytes;
    if (slot.index >= bases.size() || slot.index >= sizes.size()) {
      throw std::out_of_range("argument image: pointer slot names a missing tensor");
    }
    if (slot.offset + sizeof(uint64_t) > bytes.size()) {
      throw std::out_of_range("argument image: pointer slot past the struct");
    }
    const uint64_t address = reinterpret_cast<uint64_t>(bases[slot.index]) +
                             static_cast<uint64_t>(slot.element_offset * sizes[slot.index]);
    std::memcpy(bytes.data() + slot.offset, &address, sizeof(address));
  }
  return bytes;
}

}  // namespace fact
