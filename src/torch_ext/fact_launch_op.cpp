// Native CUDA implementation of the `fact::launch` and `fact::launch_out` torch ops (schemas:
// python/fact/ops.py). It knows no problem kind: a call is an argument image (a kind's ABI
// struct as bytes, docs/abi.md), the places where tensor addresses go, the results to allocate
// and a kernel library's entry.
//
// Built at run time by python/fact/native.py (torch.utils.cpp_extension), not by CMake. Loading
// the library registers:
//   - fact::launch / fact::launch_out for the CUDA key: copy the call's image, write each
//     operand's and result's address into its pointer slot (data_ptr + element_offset *
//     element_size), query the entry's workspace size once per call (cached), take the
//     workspace and (launch) the results from the CUDA caching allocator and call the entry on
//     the current stream. No synchronization, so the op can be captured into a CUDA graph. A
//     status other than FACT_OK raises with its FactStatus name.
//   - a symbolic call (docs/dynamic_shapes.md; fact_native::register_sizes after register_call):
//     its shapes, strides, element offsets and patched image fields are polynomials over the
//     plan's symbols, held as one precomputed table; each launch takes the symbols' sizes,
//     picks the bucket (per symbol a binary search over its edges, row-major), copies that
//     bucket's image, writes the patches (4 or 8 bytes, little-endian) and the addresses, and
//     allocates the results with their evaluated shapes and strides. The workspace size is
//     queried per launch for a symbolic call (it may depend on the sizes). No JSON and no
//     parsing per launch. The kernels take `int[]` for the schema's `SymInt[] sizes` (as
//     ATen's own kernels do): the dispatcher hands them the concrete sizes, unboxed.
//   - fact::launch for the Autograd key: torch's "not implemented" autograd kernel (inference
//     only), so a result computed from tensors that require grad fails clearly on backward.
//   - fact_native::register_call(...) -> int: registers a call (mirrored from
//     fact.ops.register_call, which keeps the same numbering); dlopens its kernel library once
//     per (path, entry).
//   - fact_native::register_sizes(...): makes a registered call symbolic (tables written by
//     fact.ops._native_size_tables).
//   - fact_native::registered_libraries() -> str[]: the libraries loaded, in loading order.
//   - fact_native::launch_floor(Tensor[] operands, int call) -> Tensor[]: does nothing and
//     returns nothing; bench/compose/op_overhead.py times it to show what passing fact::launch's
//     arguments from Python through the dispatcher costs by itself.
#include <dlfcn.h>

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "fact/core/fact_abi.h"
#include "fact/core/status_names.hpp"

namespace fact::torch_ext {
namespace {

// Error messages are assembled here, never by iostream: in some builds this extension carries its
// own copy of libstdc++'s number formatting, whose locale facets were never set up, and
// `stream << 42` inside it crashes the process (a segfault instead of the error; seen on the
// GPU host with torch 2.11). TORCH_CHECK then only streams one finished std::string.
void append(std::string& out, const std::string& text) { out += text; }
void append(std::string& out, const char* text) { out += text; }
void append(std::string& out, std::string_view text) { out.append(text.data(), text.size()); }
void append(std::string& out, c10::ScalarType type) { out += c10::toString(type); }
void append(std::string& out, const c10::Device& device) { out += device.str(); }
void append(std::string& out, c10::IntArrayRef values) {
  out += "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  out += "]";
}
template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
void append(std::string& out, T value) {
  out += std::to_string(value);
}
template <class... Parts>
std::string message(const Parts&... parts) {
  std::string out;
  (append(out, parts), ...);
  return out;
}


// The value of the top-level string member `name` of the JSON object `text` ("" when absent).
// fact_kernel_info() returns a JSON object whose "entry" member is a plain identifier; nested
// objects (the spec) are skipped by tracking the nesting depth.
std::string top_level_string(std::string_view text, std::string_view name) {
  auto read_string = [&](size_t& i) {  // text[i] == '"'; leaves i on the closing quote
    std::string value;
    for (++i; i < text.size() && text[i] != '"'; ++i) {
      if (text[i] == '\\' && i + 1 < text.size()) ++i;
      value += text[i];
    }
    return value;
  };
  auto skip_space = [&](size_t i) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r')) ++i;
    return i;
  };
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (ch == '{' || ch == '[') {
      ++depth;
    } else if (ch == '}' || ch == ']') {
      --depth;
    } else if (ch == '"') {
      const std::string token = read_string(i);
      if (depth != 1 || token != name) continue;
      size_t j = skip_space(i + 1);
      if (j >= text.size() || text[j] != ':') continue;
      j = skip_space(j + 1);
      if (j < text.size() && text[j] == '"') return read_string(j);
      return "";
    }
  }
  return "";
}

int hex_value(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

std::vector<uint8_t> from_hex(std::string_view text) {
  TORCH_CHECK(text.size() % 2 == 0, message("fact_native::register_call: odd number of hex digits"));
  std::vector<uint8_t> bytes(text.size() / 2);
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int high = hex_value(text[2 * i]), low = hex_value(text[2 * i + 1]);
    TORCH_CHECK(high >= 0 && low >= 0, message("fact_native::register_call: image_hex is not hexadecimal"));
    bytes[i] = static_cast<uint8_t>(high * 16 + low);
  }
  return bytes;
}

struct KernelLibrary {
  std::string path;
  std::string entry_name;
  FactEntry entry = nullptr;
};

struct PointerSlot {
  int64_t offset;
  bool from_result;
  int64_t index;
  int64_t element_offset;
};

struct TensorSpec {
  std::vector<int64_t> shape, stride;
  c10::ScalarType dtype;
  bool check_layout;
  // A result whose allocation is larger than its view (docs/plan.md, "alloc_shape"): the
  // elements its storage holds, read from the prototype's storage (fact.ops allocates the
  // prototype as the plan says); 0 when the view's own span is the allocation.
  int64_t storage_elements = 0;
};

// Shape and stride of a symbolic tensor as indices into the call's polynomial table (rank -1:
// not checked, an operand without a layout in the plan).
struct TensorPolys {
  int64_t rank = -1;
  std::vector<int64_t> shape, stride;
};

struct Patch {
  int64_t offset;
  int64_t bytes;  // 4 or 8
  int64_t poly;
};

struct BucketKernel {
  std::vector<uint8_t> image;              // empty: the call's image
  const KernelLibrary* library = nullptr;  // the bucket tuple's kernel
};

constexpr size_t kMaxSymbols = 8;

// A call planned over declared symbols: everything per launch is a table lookup or a
// polynomial evaluation over these flat arrays.
struct SymbolicSizes {
  std::vector<std::vector<int64_t>> edges;  // per symbol, ascending
  std::vector<int64_t> term_starts;         // poly p: terms [term_starts[p], term_starts[p+1])
  std::vector<int64_t> coefficients;        // per term
  std::vector<int64_t> exponents;           // per term, one per symbol
  std::vector<TensorPolys> results, operands;
  std::vector<int64_t> slot_polys;          // element offset per pointer slot
  std::vector<Patch> patches;
  std::vector<BucketKernel> buckets;        // row-major over the symbols' edges

  int64_t value(int64_t poly, const int64_t* sizes) const {
    const size_t count = edges.size();
    int64_t total = 0;
    for (int64_t t = term_starts[poly]; t < term_starts[poly + 1]; ++t) {
      int64_t term = coefficients[t];
      const int64_t* powers = &exponents[static_cast<size_t>(t) * count];
      for (size_t s = 0; s < count; ++s) {
        for (int64_t e = 0; e < powers[s]; ++e) term *= sizes[s];
      }
      total += term;
    }
    return total;
  }
};

// One registered call: everything but its tensors.
struct Call {
  int64_t id = -1;
  std::string label;
  std::vector<uint8_t> image;
  std::vector<PointerSlot> slots;
  std::vector<TensorSpec> results, operands;
  const KernelLibrary* library = nullptr;  // owned by the registry; stays valid
  std::atomic<int64_t> workspace{-1};      // bytes, once queried (static calls)
  std::unique_ptr<SymbolicSizes> symbolic;  // set for a call planned over symbols
};

// Process-wide registry of kernel libraries and calls (call number = index).
class Registry {
 public:
  static Registry& instance() {
    static Registry registry;
    return registry;
  }

  const KernelLibrary* library(const std::string& path, const std::string& entry) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& library : libraries_) {
      if (library.path == path && (entry.empty() || library.entry_name == entry)) return &library;
    }
    void* dl = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    TORCH_CHECK(dl != nullptr, message("cannot load kernel library ", path, ": ", dlerror()));
    KernelLibrary library;
    library.path = path;
    library.entry_name = entry;
    if (library.entry_name.empty()) {
      auto info = reinterpret_cast<FactKernelInfo>(dlsym(dl, "fact_kernel_info"));
      TORCH_CHECK(info != nullptr, message(path, " exports no fact_kernel_info and the plan names no entry"));
      const char* info_text = info();
      TORCH_CHECK(info_text != nullptr, message("fact_kernel_info() of ", path, " returned NULL"));
      library.entry_name = top_level_string(info_text, "entry");
      TORCH_CHECK(!library.entry_name.empty(), message(path, ": fact_kernel_info has no \"entry\""));
    }
    library.entry = reinterpret_cast<FactEntry>(dlsym(dl, library.entry_name.c_str()));
    TORCH_CHECK(library.entry != nullptr, message(path, " does not export ", library.entry_name));
    libraries_.push_back(std::move(library));  // the library stays loaded for the process
    return &libraries_.back();
  }

  int64_t add(std::unique_ptr<Call> call) {
    std::lock_guard<std::mutex> lock(mutex_);
    call->id = static_cast<int64_t>(calls_.size());
    calls_.push_back(std::move(call));
    return calls_.back()->id;
  }

  Call& call(int64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(id >= 0 && id < static_cast<int64_t>(calls_.size()), message("fact::launch: no call ", id, " (register it with fact.ops.register_call)"));
    return *calls_[id];
  }

  std::vector<std::string> library_paths() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> out;
    for (const auto& library : libraries_) out.push_back(library.path);
    return out;
  }

 private:
  std::mutex mutex_;
  std::deque<KernelLibrary> libraries_;
  std::deque<std::unique_ptr<Call>> calls_;
};

std::string describe(const Call& call) {
  return "fact::launch call " + std::to_string(call.id) + (call.label.empty() ? "" : " (" + call.label + ")");
}

// Elements from the storage offset to the last element a view spans (0 when empty).
int64_t span_of(c10::IntArrayRef shape, c10::IntArrayRef stride) {
  int64_t span = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return 0;
    span += (shape[d] - 1) * stride[d];
  }
  return span;
}

TensorSpec spec_of(const at::Tensor& prototype, bool check_layout) {
  TensorSpec spec{prototype.sizes().vec(), prototype.strides().vec(), prototype.scalar_type(),
                  check_layout};
  if (prototype.has_storage() && prototype.itemsize() > 0) {
    const int64_t held = static_cast<int64_t>(prototype.storage().nbytes() / prototype.itemsize());
    if (held > span_of(spec.shape, spec.stride)) spec.storage_elements = held;
  }
  return spec;
}

// A result as the plan allocates it: empty_strided, or (storage_elements) a tensor with the
// spec's shape and strides over a storage of the whole allocation, not a view of another
// tensor (the op's outputs alias nothing).
at::Tensor allocate_result(const TensorSpec& spec, const at::TensorOptions& options) {
  if (spec.storage_elements == 0) return at::empty_strided(spec.shape, spec.stride, options.dtype(spec.dtype));
  const at::Tensor storage = at::empty({spec.storage_elements}, options.dtype(spec.dtype));
  at::Tensor result = at::empty({0}, options.dtype(spec.dtype));
  result.set_(storage.storage(), 0, spec.shape, spec.stride);
  return result;
}

int64_t register_call(c10::string_view image_hex, c10::IntArrayRef slot_offsets,
                      c10::IntArrayRef slot_sources, c10::IntArrayRef slot_indices,
                      c10::IntArrayRef slot_element_offsets, at::TensorList results,
                      at::TensorList operands, c10::IntArrayRef operand_layout_checked,
                      c10::string_view library, c10::string_view entry, c10::string_view label) {
  auto call = std::make_unique<Call>();
  call->label = std::string(label);
  call->image = from_hex(std::string_view(image_hex.data(), image_hex.size()));
  TORCH_CHECK(call->image.size() >= sizeof(FactCallHeader), message("fact_native::register_call: the image is shorter than FactCallHeader"));
  const size_t slots = slot_offsets.size();
  TORCH_CHECK(slot_sources.size() == slots && slot_indices.size() == slots &&
                  slot_element_offsets.size() == slots, message("fact_native::register_call: pointer slot arrays differ in length"));
  TORCH_CHECK(operand_layout_checked.size() == operands.size(), message("fact_native::register_call: one operand_layout_checked flag per operand"));
  for (const auto& prototype : results) call->results.push_back(spec_of(prototype, true));
  for (size_t i = 0; i < operands.size(); ++i) {
    call->operands.push_back(spec_of(operands[i], operand_layout_checked[i] != 0));
  }
  for (size_t i = 0; i < slots; ++i) {
    PointerSlot slot{slot_offsets[i], slot_sources[i] != 0, slot_indices[i], slot_element_offsets[i]};
    TORCH_CHECK(slot.offset >= static_cast<int64_t>(sizeof(FactCallHeader)) &&
                    slot.offset + 8 <= static_cast<int64_t>(call->image.size()), message("fact_native::register_call: pointer slot at ", slot.offset, " outside the image"));
    const size_t count = slot.from_result ? call->results.size() : call->operands.size();
    TORCH_CHECK(slot.index >= 0 && slot.index < static_cast<int64_t>(count), message("fact_native::register_call: pointer slot at ", slot.offset, " names ", slot.from_result ? "result " : "operand ", slot.index, " of ", count));
    call->slots.push_back(slot);
  }
  if (!library.empty()) {
    call->library = Registry::instance().library(std::string(library), std::string(entry));
  }
  return Registry::instance().add(std::move(call));
}

void register_sizes(int64_t call_id, c10::IntArrayRef edges, c10::IntArrayRef edge_counts,
                    c10::IntArrayRef term_starts, c10::IntArrayRef coefficients,
                    c10::IntArrayRef exponents, c10::IntArrayRef result_polys,
                    c10::IntArrayRef result_ranks, c10::IntArrayRef operand_polys,
                    c10::IntArrayRef operand_ranks, c10::IntArrayRef slot_polys,
                    c10::IntArrayRef patch_offsets, c10::IntArrayRef patch_bytes,
                    c10::IntArrayRef patch_polys, std::vector<std::string> bucket_images,
                    std::vector<std::string> bucket_libraries,
                    std::vector<std::string> bucket_entries) {
  Call& call = Registry::instance().call(call_id);
  const std::string what = "fact_native::register_sizes(" + describe(call) + "): ";
  TORCH_CHECK(!call.symbolic, message(what, "the call is symbolic already"));
  auto sizes = std::make_unique<SymbolicSizes>();
  TORCH_CHECK(!edge_counts.empty() && edge_counts.size() <= kMaxSymbols, message(what, edge_counts.size(), " symbols (1..", kMaxSymbols, ")"));
  size_t next = 0;
  int64_t buckets = 1;
  for (const int64_t count : edge_counts) {
    TORCH_CHECK(count > 0 && next + static_cast<size_t>(count) <= edges.size(), message(what, "bad edge counts"));
    std::vector<int64_t> values(edges.begin() + next, edges.begin() + next + count);
    TORCH_CHECK(std::is_sorted(values.begin(), values.end()) &&
                    std::adjacent_find(values.begin(), values.end()) == values.end(), message(what, "edges are not ascending"));
    sizes->edges.push_back(std::move(values));
    next += static_cast<size_t>(count);
    buckets *= count;
  }
  TORCH_CHECK(next == edges.size(), message(what, "edge counts do not cover the edges"));
  const size_t symbols = sizes->edges.size();
  sizes->term_starts.assign(term_starts.begin(), term_starts.end());
  sizes->coefficients.assign(coefficients.begin(), coefficients.end());
  sizes->exponents.assign(exponents.begin(), exponents.end());
  TORCH_CHECK(!term_starts.empty() && term_starts.front() == 0 &&
                  std::is_sorted(term_starts.begin(), term_starts.end()) &&
                  static_cast<size_t>(term_starts.back()) == coefficients.size() &&
                  exponents.size() == coefficients.size() * symbols, message(what, "inconsistent polynomial table"));
  const int64_t polys = static_cast<int64_t>(term_starts.size()) - 1;
  auto poly_at = [&](c10::IntArrayRef table, size_t& position) {
    TORCH_CHECK(position < table.size(), message(what, "polynomial index list too short"));
    const int64_t poly = table[position++];
    TORCH_CHECK(poly >= 0 && poly < polys, message(what, "polynomial index ", poly, " out of range"));
    return poly;
  };
  auto tensors = [&](c10::IntArrayRef ranks, c10::IntArrayRef table, size_t expected,
                     std::vector<TensorPolys>& out, const char* kind) {
    TORCH_CHECK(ranks.size() == expected, message(what, ranks.size(), " ", kind, " ranks for ", expected, " ", kind, "s"));
    size_t position = 0;
    for (const int64_t rank : ranks) {
      TensorPolys tensor;
      tensor.rank = rank;
      for (int64_t d = 0; d < rank; ++d) tensor.shape.push_back(poly_at(table, position));
      for (int64_t d = 0; d < rank; ++d) tensor.stride.push_back(poly_at(table, position));
      out.push_back(std::move(tensor));
    }
    TORCH_CHECK(position == table.size(), message(what, "unused ", kind, " polynomial indices"));
  };
  tensors(result_ranks, result_polys, call.results.size(), sizes->results, "result");
  tensors(operand_ranks, operand_polys, call.operands.size(), sizes->operands, "operand");
  TORCH_CHECK(slot_polys.size() == call.slots.size(), message(what, "one element offset per pointer slot"));
  size_t position = 0;
  for (size_t i = 0; i < call.slots.size(); ++i) sizes->slot_polys.push_back(poly_at(slot_polys, position));
  TORCH_CHECK(patch_offsets.size() == patch_bytes.size() && patch_polys.size() == patch_bytes.size(), message(what, "patch arrays differ in length"));
  position = 0;
  for (size_t i = 0; i < patch_offsets.size(); ++i) {
    Patch patch{patch_offsets[i], patch_bytes[i], poly_at(patch_polys, position)};
    TORCH_CHECK(patch.bytes == 4 || patch.bytes == 8, message(what, "patch at ", patch.offset, ": ", patch.bytes, " bytes (4 or 8)"));
    TORCH_CHECK(patch.offset >= static_cast<int64_t>(sizeof(FactCallHeader)) &&
                    patch.offset + patch.bytes <= static_cast<int64_t>(call.image.size()), message(what, "patch at ", patch.offset, " outside the image"));
    sizes->patches.push_back(patch);
  }
  TORCH_CHECK(bucket_images.size() == bucket_libraries.size() &&
                  bucket_entries.size() == bucket_libraries.size(), message(what, "bucket arrays differ in length"));
  TORCH_CHECK(bucket_images.size() == 1 || static_cast<int64_t>(bucket_images.size()) == buckets, message(what, bucket_images.size(), " buckets, the edges make ", buckets));
  for (size_t i = 0; i < bucket_images.size(); ++i) {
    BucketKernel bucket;
    if (!bucket_images[i].empty()) {
      bucket.image = from_hex(bucket_images[i]);
      TORCH_CHECK(bucket.image.size() == call.image.size(), message(what, "bucket ", i, "'s image has ", bucket.image.size(), " bytes, the call's ", call.image.size()));
    }
    bucket.library = bucket_libraries[i].empty()
                         ? call.library
                         : Registry::instance().library(bucket_libraries[i], bucket_entries[i]);
    sizes->buckets.push_back(std::move(bucket));
  }
  call.symbolic = std::move(sizes);
}

std::vector<std::string> registered_libraries() { return Registry::instance().library_paths(); }

// The operand's strides are the planned ones on every dim of size > 1 (the stride of a size-1
// dim is never read, and PyTorch and torch.export may record different ones for it).
bool same_strides(const at::Tensor& t, const std::vector<int64_t>& stride) {
  if (static_cast<size_t>(t.dim()) != stride.size()) return false;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) != 1 && t.stride(d) != stride[static_cast<size_t>(d)]) return false;
  }
  return true;
}

void check_operands(const Call& call, at::TensorList operands) {
  TORCH_CHECK(operands.size() == call.operands.size(), message(describe(call), ": ", operands.size(), " operands, the call has ", call.operands.size()));
  for (size_t i = 0; i < operands.size(); ++i) {
    const TensorSpec& spec = call.operands[i];
    TORCH_CHECK(operands[i].defined(), message(describe(call), ": operand ", i, " is an undefined tensor"));
    TORCH_CHECK(operands[i].scalar_type() == spec.dtype, message(describe(call), ": operand ", i, " is ", operands[i].scalar_type(), ", the call was planned for ", spec.dtype));
    TORCH_CHECK(!spec.check_layout ||
                    (operands[i].sizes() == c10::IntArrayRef(spec.shape) &&
                     same_strides(operands[i], spec.stride)), message(describe(call), ": operand ", i, " has shape ", operands[i].sizes(), " stride ", operands[i].strides(), ", the call was planned for ", c10::IntArrayRef(spec.shape), " stride ", c10::IntArrayRef(spec.stride)));
  }
}

void check_results(const Call& call, at::TensorList results) {
  TORCH_CHECK(results.size() == call.results.size(), message(describe(call), ": ", results.size(), " results, the call has ", call.results.size()));
  for (size_t i = 0; i < results.size(); ++i) {
    const TensorSpec& spec = call.results[i];
    TORCH_CHECK(results[i].defined(), message(describe(call), ": result ", i, " is an undefined tensor"));
    TORCH_CHECK(results[i].scalar_type() == spec.dtype &&
                    results[i].sizes() == c10::IntArrayRef(spec.shape) &&
                    results[i].strides() == c10::IntArrayRef(spec.stride), message(describe(call), ": result ", i, " is ", results[i].scalar_type(), " ", results[i].sizes(), " stride ", results[i].strides(), ", the call writes ", spec.dtype, " ", c10::IntArrayRef(spec.shape), " stride ", c10::IntArrayRef(spec.stride)));
    // A result the kernel writes past its view (padded rows) must hold its whole allocation.
    if (spec.storage_elements > 0) {
      const at::Tensor& t = results[i];
      const int64_t held = t.has_storage() ? static_cast<int64_t>(t.storage().nbytes() / t.itemsize()) - t.storage_offset() : 0;
      TORCH_CHECK(held >= spec.storage_elements, message(describe(call), ": result ", i, "'s storage holds ", held, " elements past its offset, the call writes ", spec.storage_elements, " (its allocation, padded rows included)"));
    }
  }
}

// Every pointer slot's tensor has elements, and its address (data_ptr + element_offset) and
// the elements its shape and strides span lie inside its storage: a view whose storage is
// smaller than it claims (an unchecked reinterpretation) is refused here instead of handing
// the kernel an address outside the allocation. `element_offsets`: one per slot.
void check_slots(const Call& call, at::TensorList operands, at::TensorList results,
                 const int64_t* element_offsets) {
  for (size_t i = 0; i < call.slots.size(); ++i) {
    const PointerSlot& slot = call.slots[i];
    const at::Tensor& t = slot.from_result ? results[slot.index] : operands[slot.index];
    const char* what = slot.from_result ? "result " : "operand ";
    TORCH_CHECK(t.numel() > 0, message(describe(call), ": ", what, slot.index, " has no elements (shape ", t.sizes(), ")"));
    TORCH_CHECK(t.has_storage(), message(describe(call), ": ", what, slot.index, " has no storage"));
    const int64_t item = static_cast<int64_t>(t.element_size());
    const int64_t capacity = static_cast<int64_t>(t.storage().nbytes()) / item;
    int64_t last = t.storage_offset();
    for (int64_t d = 0; d < t.dim(); ++d) {
      TORCH_CHECK(t.stride(d) >= 0, message(describe(call), ": ", what, slot.index, " has a negative stride"));
      last += (t.size(d) - 1) * t.stride(d);
    }
    const int64_t first = t.storage_offset() + element_offsets[i];
    TORCH_CHECK(first >= 0 && first < capacity && last < capacity, message(describe(call), ": ", what, slot.index, " (shape ", t.sizes(), " stride ", t.strides(), " storage offset ", t.storage_offset(), ", pointer slot element offset ", element_offsets[i], ") reaches outside its storage of ", capacity, " elements"));
  }
}

c10::Device device_of(const Call& call, at::TensorList operands, at::TensorList results) {
  if (!operands.empty()) return operands[0].device();
  TORCH_CHECK(!results.empty(), message(describe(call), ": a call with neither operands nor results"));
  return results[0].device();
}

// What one launch of a call uses: the image to start from, the kernel, and for a symbolic call
// the symbols' sizes (nullptr for a static call).
struct LaunchSource {
  const std::vector<uint8_t>* image;
  const KernelLibrary* library;
  const int64_t* sizes;
};

// `value` little-endian in `bytes` bytes at `where` (two's complement when negative).
void write_little_endian(uint8_t* where, int64_t value, int64_t bytes) {
  const uint64_t bits = static_cast<uint64_t>(value);
  for (int64_t b = 0; b < bytes; ++b) where[b] = static_cast<uint8_t>(bits >> (8 * b));
}

// Fills the image in and calls the entry on the current stream of `device`.
void run(Call& call, at::TensorList operands, at::TensorList results, c10::Device device,
         const LaunchSource& source) {
  TORCH_CHECK(source.library != nullptr, message(describe(call), ": no kernel library was registered for it (CUDA tensors need one)"));
  for (const auto& tensor : operands) {
    TORCH_CHECK(tensor.device() == device, message(describe(call), ": operands on ", tensor.device(), " and ", device));
  }
  for (const auto& tensor : results) {
    TORCH_CHECK(tensor.device() == device, message(describe(call), ": results on ", tensor.device(), " and operands on ", device));
  }
  const SymbolicSizes* symbolic = source.sizes != nullptr ? call.symbolic.get() : nullptr;
  c10::SmallVector<int64_t, 16> element_offsets;
  for (size_t i = 0; i < call.slots.size(); ++i) {
    element_offsets.push_back(symbolic ? symbolic->value(symbolic->slot_polys[i], source.sizes)
                                       : call.slots[i].element_offset);
  }
  check_slots(call, operands, results, element_offsets.data());
  c10::cuda::CUDAGuard device_guard(device);
  const std::vector<uint8_t>& source_image = *source.image;
  alignas(16) uint8_t local[512];
  std::vector<uint8_t> heap;
  uint8_t* image = local;
  if (source_image.size() > sizeof(local)) {
    heap.resize(source_image.size() + 16);
    image = heap.data();  // std::vector storage: aligned for any fundamental type
  }
  std::memcpy(image, source_image.data(), source_image.size());
  if (symbolic) {
    for (const Patch& patch : symbolic->patches) {
      const int64_t value = symbolic->value(patch.poly, source.sizes);
      TORCH_CHECK(patch.bytes == 8 || (value >= INT32_MIN && value <= static_cast<int64_t>(UINT32_MAX)), message(describe(call), ": patch at offset ", patch.offset, " (", value, ") does not fit in 4 bytes"));
      write_little_endian(image + patch.offset, value, patch.bytes);
    }
  }
  for (size_t i = 0; i < call.slots.size(); ++i) {
    const PointerSlot& slot = call.slots[i];
    const at::Tensor& tensor = slot.from_result ? results[slot.index] : operands[slot.index];
    const uint64_t address = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(tensor.data_ptr())) +
                             static_cast<uint64_t>(element_offsets[i] * tensor.element_size());
    std::memcpy(image + slot.offset, &address, sizeof(address));
  }
  const auto* header = reinterpret_cast<const FactCallHeader*>(image);
  const KernelLibrary& library = *source.library;
  // A static call's workspace is queried once; a symbolic call's may depend on the sizes.
  int64_t workspace_size = symbolic ? -1 : call.workspace.load(std::memory_order_acquire);
  if (workspace_size < 0) {
    size_t queried = 0;
    const int status = library.entry(header, nullptr, &queried, nullptr);
    TORCH_CHECK(status == FACT_OK, message(describe(call), ": ", library.entry_name, " workspace size query returned ", ::fact::core::status_name(status)));
    workspace_size = static_cast<int64_t>(queried);
    if (!symbolic) call.workspace.store(workspace_size, std::memory_order_release);
  }
  c10::DataPtr workspace;
  if (workspace_size > 0) {
    workspace = c10::cuda::CUDACachingAllocator::get()->allocate(static_cast<size_t>(workspace_size));
  }
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  const int status = library.entry(header, workspace.get(), nullptr, stream);
  TORCH_CHECK(status == FACT_OK, message(describe(call), ": ", library.entry_name, " returned ", ::fact::core::status_name(status)));
}

// A symbolic call's sizes (concrete ints), checked against the symbols' count and ranges;
// returns the bucket the sizes fall into.
const BucketKernel& bind_sizes(const Call& call, c10::IntArrayRef sizes, int64_t* values) {
  const SymbolicSizes& symbolic = *call.symbolic;
  TORCH_CHECK(sizes.size() == symbolic.edges.size(), message(describe(call), ": ", sizes.size(), " sizes, the call is planned over ", symbolic.edges.size(), " symbols"));
  int64_t row = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    values[s] = sizes[s];
    const std::vector<int64_t>& edges = symbolic.edges[s];
    TORCH_CHECK(values[s] >= 0, message(describe(call), ": negative size ", values[s], " for symbol ", s));
    const auto edge = std::lower_bound(edges.begin(), edges.end(), values[s]);
    TORCH_CHECK(edge != edges.end(), message(describe(call), ": size ", values[s], " of symbol ", s, " is above its range (largest edge ", edges.back(), ")"));
    row = row * static_cast<int64_t>(edges.size()) + (edge - edges.begin());
  }
  return symbolic.buckets.size() == 1 ? symbolic.buckets.front()
                                      : symbolic.buckets[static_cast<size_t>(row)];
}

void check_operands_symbolic(const Call& call, at::TensorList operands, const int64_t* values) {
  const SymbolicSizes& symbolic = *call.symbolic;
  TORCH_CHECK(operands.size() == call.operands.size(), message(describe(call), ": ", operands.size(), " operands, the call has ", call.operands.size()));
  for (size_t i = 0; i < operands.size(); ++i) {
    const at::Tensor& t = operands[i];
    TORCH_CHECK(t.defined(), message(describe(call), ": operand ", i, " is an undefined tensor"));
    TORCH_CHECK(t.scalar_type() == call.operands[i].dtype, message(describe(call), ": operand ", i, " is ", t.scalar_type(), ", the call was planned for ", call.operands[i].dtype));
    const TensorPolys& polys = symbolic.operands[i];
    if (polys.rank < 0) continue;
    bool same = t.dim() == polys.rank;
    for (int64_t d = 0; same && d < polys.rank; ++d) {
      const int64_t size = symbolic.value(polys.shape[d], values);
      same = t.size(d) == size && (size == 1 || t.stride(d) == symbolic.value(polys.stride[d], values));
    }
    TORCH_CHECK(same, message(describe(call), ": operand ", i, " has shape ", t.sizes(), " stride ", t.strides(), ", not the planned layout at these sizes"));
  }
}

void check_results_symbolic(const Call& call, at::TensorList results, const int64_t* values) {
  const SymbolicSizes& symbolic = *call.symbolic;
  TORCH_CHECK(results.size() == call.results.size(), message(describe(call), ": ", results.size(), " results, the call has ", call.results.size()));
  for (size_t i = 0; i < results.size(); ++i) {
    const at::Tensor& t = results[i];
    const TensorPolys& polys = symbolic.results[i];
    TORCH_CHECK(t.defined(), message(describe(call), ": result ", i, " is an undefined tensor"));
    bool same = t.scalar_type() == call.results[i].dtype && t.dim() == polys.rank;
    for (int64_t d = 0; same && d < polys.rank; ++d) {
      same = t.size(d) == symbolic.value(polys.shape[d], values) &&
             t.stride(d) == symbolic.value(polys.stride[d], values);
    }
    TORCH_CHECK(same, message(describe(call), ": result ", i, " is ", t.scalar_type(), " ", t.sizes(), " stride ", t.strides(), ", not what the call writes at these sizes"));
  }
}

std::vector<at::Tensor> launch_cuda(at::TensorList operands, int64_t call_id, c10::IntArrayRef sizes) {
  Call& call = Registry::instance().call(call_id);
  const c10::Device device = device_of(call, operands, {});
  const auto options = at::TensorOptions().device(device);
  std::vector<at::Tensor> results;
  results.reserve(call.results.size());
  if (!call.symbolic) {
    TORCH_CHECK(sizes.empty(), message(describe(call), ": a static call takes no sizes"));
    check_operands(call, operands);
    for (const TensorSpec& spec : call.results) results.push_back(allocate_result(spec, options));
    run(call, operands, results, device, LaunchSource{&call.image, call.library, nullptr});
    return results;
  }
  int64_t values[kMaxSymbols];
  const BucketKernel& bucket = bind_sizes(call, sizes, values);
  check_operands_symbolic(call, operands, values);
  const SymbolicSizes& symbolic = *call.symbolic;
  for (size_t i = 0; i < call.results.size(); ++i) {
    const TensorPolys& polys = symbolic.results[i];
    c10::SmallVector<int64_t, 8> shape, stride;
    for (int64_t d = 0; d < polys.rank; ++d) {
      shape.push_back(symbolic.value(polys.shape[d], values));
      stride.push_back(symbolic.value(polys.stride[d], values));
    }
    results.push_back(at::empty_strided(shape, stride, options.dtype(call.results[i].dtype)));
  }
  run(call, operands, results, device,
      LaunchSource{bucket.image.empty() ? &call.image : &bucket.image, bucket.library, values});
  return results;
}

void launch_out_cuda(at::TensorList operands, at::TensorList results, int64_t call_id,
                     c10::IntArrayRef sizes) {
  Call& call = Registry::instance().call(call_id);
  const c10::Device device = device_of(call, operands, results);
  if (!call.symbolic) {
    TORCH_CHECK(sizes.empty(), message(describe(call), ": a static call takes no sizes"));
    check_operands(call, operands);
    check_results(call, results);
    run(call, operands, results, device, LaunchSource{&call.image, call.library, nullptr});
    return;
  }
  int64_t values[kMaxSymbols];
  const BucketKernel& bucket = bind_sizes(call, sizes, values);
  check_operands_symbolic(call, operands, values);
  check_results_symbolic(call, results, values);
  run(call, operands, results, device,
      LaunchSource{bucket.image.empty() ? &call.image : &bucket.image, bucket.library, values});
}

std::vector<at::Tensor> launch_floor(at::TensorList, int64_t) { return {}; }

// fact::launch's Autograd kernel (boxed: launch(Tensor[] operands, int call, SymInt[] sizes)).
// A call no gradient flows through — inference, no_grad, the composed graphs of a training
// module (AOTAutograd runs them with grad off) — goes straight below autograd: PyTorch's generic
// not-implemented fallback would copy the arguments and walk the schema's aliasing on every
// call. Where an operand requires grad, the results get a grad_fn that refuses backward with
// "derivative for fact::launch is not implemented", as that fallback's does.
void launch_autograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  constexpr size_t kArguments = 3;
  TORCH_CHECK(stack->size() >= kArguments, "fact::launch: ", stack->size(), " arguments on the stack");
  const c10::IValue& operands = (*stack)[stack->size() - kArguments];
  bool needs_grad = false;
  if (at::GradMode::is_enabled()) {
    for (const c10::IValue& value : operands.toListRef()) {
      const at::Tensor& tensor = value.toTensor();
      needs_grad = needs_grad || (tensor.defined() && tensor.requires_grad());
    }
  }
  if (!needs_grad) {
    at::AutoDispatchBelowADInplaceOrView below;
    op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
    return;
  }
  std::vector<at::Tensor> inputs;
  for (const c10::IValue& value : operands.toListRef()) inputs.push_back(value.toTensor());
  auto refusal = std::shared_ptr<torch::autograd::NotImplemented>(
      new torch::autograd::NotImplemented("fact::launch"), torch::autograd::deleteNode);
  refusal->set_next_edges(torch::autograd::collect_next_edges(inputs));
  {
    at::AutoDispatchBelowADInplaceOrView below;
    op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
  }
  for (const c10::IValue& value : stack->back().toListRef()) {
    const at::Tensor& result = value.toTensor();
    if (result.defined() && torch::autograd::isDifferentiableType(result.scalar_type())) {
      torch::autograd::set_history(result, refusal);
    }
  }
}

}  // namespace
}  // namespace fact::torch_ext

TORCH_LIBRARY(fact_native, m) {
  m.def("register_call(str image_hex, int[] slot_offsets, int[] slot_sources, "
        "int[] slot_indices, int[] slot_element_offsets, Tensor[] results, Tensor[] operands, "
        "int[] operand_layout_checked, str library, str entry, str label) -> int",
        &fact::torch_ext::register_call);
  m.def("register_sizes(int call, int[] edges, int[] edge_counts, int[] term_starts, "
        "int[] coefficients, int[] exponents, int[] result_polys, int[] result_ranks, "
        "int[] operand_polys, int[] operand_ranks, int[] slot_polys, int[] patch_offsets, "
        "int[] patch_bytes, int[] patch_polys, str[] bucket_images, str[] bucket_libraries, "
        "str[] bucket_entries) -> ()",
        &fact::torch_ext::register_sizes);
  m.def("registered_libraries() -> str[]", &fact::torch_ext::registered_libraries);
  m.def("launch_floor(Tensor[] operands, int call) -> Tensor[]", &fact::torch_ext::launch_floor);
}

TORCH_LIBRARY_IMPL(fact, CUDA, m) {
  m.impl("launch", &fact::torch_ext::launch_cuda);
  m.impl("launch_out", &fact::torch_ext::launch_out_cuda);
}

TORCH_LIBRARY_IMPL(fact, Autograd, m) {
  m.impl("launch", torch::CppFunction::makeFromBoxedFunction<&fact::torch_ext::launch_autograd>());
}
