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
//   - fact::launch for the Autograd key: torch's "not implemented" autograd kernel (inference
//     only), so a result computed from tensors that require grad fails clearly on backward.
//   - fact_native::register_call(...) -> int: registers a call (mirrored from
//     fact.ops.register_call, which keeps the same numbering); dlopens its kernel library once
//     per (path, entry).
//   - fact_native::registered_libraries() -> str[]: the libraries loaded, in loading order.
//   - fact_native::launch_floor(Tensor[] operands, int call) -> Tensor[]: does nothing and
//     returns nothing; bench/compose/op_overhead.py times it to show what passing fact::launch's
//     arguments from Python through the dispatcher costs by itself.
#include <dlfcn.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_strided.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "fact/core/fact_abi.h"
#include "fact/core/status_names.hpp"

namespace fact::torch_ext {
namespace {

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
  TORCH_CHECK(text.size() % 2 == 0, "fact_native::register_call: odd number of hex digits");
  std::vector<uint8_t> bytes(text.size() / 2);
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int high = hex_value(text[2 * i]), low = hex_value(text[2 * i + 1]);
    TORCH_CHECK(high >= 0 && low >= 0, "fact_native::register_call: image_hex is not hexadecimal");
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
};

// One registered call: everything but its tensors.
struct Call {
  int64_t id = -1;
  std::string label;
  std::vector<uint8_t> image;
  std::vector<PointerSlot> slots;
  std::vector<TensorSpec> results, operands;
  const KernelLibrary* library = nullptr;  // owned by the registry; stays valid
  std::atomic<int64_t> workspace{-1};      // bytes, once queried
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
    TORCH_CHECK(dl != nullptr, "cannot load kernel library ", path, ": ", dlerror());
    KernelLibrary library;
    library.path = path;
    library.entry_name = entry;
    if (library.entry_name.empty()) {
      auto info = reinterpret_cast<FactKernelInfo>(dlsym(dl, "fact_kernel_info"));
      TORCH_CHECK(info != nullptr, path, " exports no fact_kernel_info and the plan names no entry");
      const char* info_text = info();
      TORCH_CHECK(info_text != nullptr, "fact_kernel_info() of ", path, " returned NULL");
      library.entry_name = top_level_string(info_text, "entry");
      TORCH_CHECK(!library.entry_name.empty(), path, ": fact_kernel_info has no \"entry\"");
    }
    library.entry = reinterpret_cast<FactEntry>(dlsym(dl, library.entry_name.c_str()));
    TORCH_CHECK(library.entry != nullptr, path, " does not export ", library.entry_name);
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
    TORCH_CHECK(id >= 0 && id < static_cast<int64_t>(calls_.size()), "fact::launch: no call ", id,
                " (register it with fact.ops.register_call)");
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

TensorSpec spec_of(const at::Tensor& prototype, bool check_layout) {
  return TensorSpec{prototype.sizes().vec(), prototype.strides().vec(), prototype.scalar_type(),
                    check_layout};
}

int64_t register_call(c10::string_view image_hex, c10::IntArrayRef slot_offsets,
                      c10::IntArrayRef slot_sources, c10::IntArrayRef slot_indices,
                      c10::IntArrayRef slot_element_offsets, at::TensorList results,
                      at::TensorList operands, c10::IntArrayRef operand_layout_checked,
                      c10::string_view library, c10::string_view entry, c10::string_view label) {
  auto call = std::make_unique<Call>();
  call->label = std::string(label);
  call->image = from_hex(std::string_view(image_hex.data(), image_hex.size()));
  TORCH_CHECK(call->image.size() >= sizeof(FactCallHeader),
              "fact_native::register_call: the image is shorter than FactCallHeader");
  const size_t slots = slot_offsets.size();
  TORCH_CHECK(slot_sources.size() == slots && slot_indices.size() == slots &&
                  slot_element_offsets.size() == slots,
              "fact_native::register_call: pointer slot arrays differ in length");
  TORCH_CHECK(operand_layout_checked.size() == operands.size(),
              "fact_native::register_call: one operand_layout_checked flag per operand");
  for (const auto& prototype : results) call->results.push_back(spec_of(prototype, true));
  for (size_t i = 0; i < operands.size(); ++i) {
    call->operands.push_back(spec_of(operands[i], operand_layout_checked[i] != 0));
  }
  for (size_t i = 0; i < slots; ++i) {
    PointerSlot slot{slot_offsets[i], slot_sources[i] != 0, slot_indices[i], slot_element_offsets[i]};
    TORCH_CHECK(slot.offset >= static_cast<int64_t>(sizeof(FactCallHeader)) &&
                    slot.offset + 8 <= static_cast<int64_t>(call->image.size()),
                "fact_native::register_call: pointer slot at ", slot.offset, " outside the image");
    const size_t count = slot.from_result ? call->results.size() : call->operands.size();
    TORCH_CHECK(slot.index >= 0 && slot.index < static_cast<int64_t>(count),
                "fact_native::register_call: pointer slot at ", slot.offset, " names ",
                slot.from_result ? "result " : "operand ", slot.index, " of ", count);
    call->slots.push_back(slot);
  }
  if (!library.empty()) {
    call->library = Registry::instance().library(std::string(library), std::string(entry));
  }
  return Registry::instance().add(std::move(call));
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
  TORCH_CHECK(operands.size() == call.operands.size(), describe(call), ": ", operands.size(),
              " operands, the call has ", call.operands.size());
  for (size_t i = 0; i < operands.size(); ++i) {
    const TensorSpec& spec = call.operands[i];
    TORCH_CHECK(operands[i].defined(), describe(call), ": operand ", i, " is an undefined tensor");
    TORCH_CHECK(operands[i].scalar_type() == spec.dtype, describe(call), ": operand ", i, " is ",
                operands[i].scalar_type(), ", the call was planned for ", spec.dtype);
    TORCH_CHECK(!spec.check_layout ||
                    (operands[i].sizes() == c10::IntArrayRef(spec.shape) &&
                     same_strides(operands[i], spec.stride)),
                describe(call), ": operand ", i, " has shape ", operands[i].sizes(), " stride ",
                operands[i].strides(), ", the call was planned for ", c10::IntArrayRef(spec.shape),
                " stride ", c10::IntArrayRef(spec.stride));
  }
}

void check_results(const Call& call, at::TensorList results) {
  TORCH_CHECK(results.size() == call.results.size(), describe(call), ": ", results.size(),
              " results, the call has ", call.results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    const TensorSpec& spec = call.results[i];
    TORCH_CHECK(results[i].defined(), describe(call), ": result ", i, " is an undefined tensor");
    TORCH_CHECK(results[i].scalar_type() == spec.dtype &&
                    results[i].sizes() == c10::IntArrayRef(spec.shape) &&
                    results[i].strides() == c10::IntArrayRef(spec.stride),
                describe(call), ": result ", i, " is ", results[i].scalar_type(), " ",
                results[i].sizes(), " stride ", results[i].strides(), ", the call writes ",
                spec.dtype, " ", c10::IntArrayRef(spec.shape), " stride ",
                c10::IntArrayRef(spec.stride));
  }
}

// Every pointer slot's tensor has elements, and its address (data_ptr + element_offset) and
// the elements its shape and strides span lie inside its storage: a view whose storage is
// smaller than it claims (an unchecked reinterpretation) is refused here instead of handing
// the kernel an address outside the allocation.
void check_slots(const Call& call, at::TensorList operands, at::TensorList results) {
  for (const PointerSlot& slot : call.slots) {
    const at::Tensor& t = slot.from_result ? results[slot.index] : operands[slot.index];
    const char* what = slot.from_result ? "result " : "operand ";
    TORCH_CHECK(t.numel() > 0, describe(call), ": ", what, slot.index, " has no elements (shape ",
                t.sizes(), ")");
    TORCH_CHECK(t.has_storage(), describe(call), ": ", what, slot.index, " has no storage");
    const int64_t item = static_cast<int64_t>(t.element_size());
    const int64_t capacity = static_cast<int64_t>(t.storage().nbytes()) / item;
    int64_t last = t.storage_offset();
    for (int64_t d = 0; d < t.dim(); ++d) {
      TORCH_CHECK(t.stride(d) >= 0, describe(call), ": ", what, slot.index, " has a negative stride");
      last += (t.size(d) - 1) * t.stride(d);
    }
    const int64_t first = t.storage_offset() + slot.element_offset;
    TORCH_CHECK(first >= 0 && first < capacity && last < capacity, describe(call), ": ", what,
                slot.index, " (shape ", t.sizes(), " stride ", t.strides(), " storage offset ",
                t.storage_offset(), ", pointer slot element offset ", slot.element_offset,
                ") reaches outside its storage of ", capacity, " elements");
  }
}

c10::Device device_of(const Call& call, at::TensorList operands, at::TensorList results) {
  if (!operands.empty()) return operands[0].device();
  TORCH_CHECK(!results.empty(), describe(call), ": a call with neither operands nor results");
  return results[0].device();
}

// Fills the image in and calls the entry on the current stream of `device`.
void run(Call& call, at::TensorList operands, at::TensorList results, c10::Device device) {
  TORCH_CHECK(call.library != nullptr, describe(call),
              ": no kernel library was registered for it (CUDA tensors need one)");
  for (const auto& tensor : operands) {
    TORCH_CHECK(tensor.device() == device, describe(call), ": operands on ", tensor.device(),
                " and ", device);
  }
  for (const auto& tensor : results) {
    TORCH_CHECK(tensor.device() == device, describe(call), ": results on ", tensor.device(),
                " and operands on ", device);
  }
  check_slots(call, operands, results);
  c10::cuda::CUDAGuard device_guard(device);
  alignas(16) uint8_t local[512];
  std::vector<uint8_t> heap;
  uint8_t* image = local;
  if (call.image.size() > sizeof(local)) {
    heap.resize(call.image.size() + 16);
    image = heap.data();  // std::vector storage: aligned for any fundamental type
  }
  std::memcpy(image, call.image.data(), call.image.size());
  for (const PointerSlot& slot : call.slots) {
    const at::Tensor& tensor = slot.from_result ? results[slot.index] : operands[slot.index];
    const uint64_t address = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(tensor.data_ptr())) +
                             static_cast<uint64_t>(slot.element_offset * tensor.element_size());
    std::memcpy(image + slot.offset, &address, sizeof(address));
  }
  const auto* header = reinterpret_cast<const FactCallHeader*>(image);
  int64_t workspace_size = call.workspace.load(std::memory_order_acquire);
  if (workspace_size < 0) {
    size_t queried = 0;
    const int status = call.library->entry(header, nullptr, &queried, nullptr);
    TORCH_CHECK(status == FACT_OK, describe(call), ": ", call.library->entry_name,
                " workspace size query returned ", ::fact::core::status_name(status));
    workspace_size = static_cast<int64_t>(queried);
    call.workspace.store(workspace_size, std::memory_order_release);
  }
  c10::DataPtr workspace;
  if (workspace_size > 0) {
    workspace = c10::cuda::CUDACachingAllocator::get()->allocate(static_cast<size_t>(workspace_size));
  }
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  const int status = call.library->entry(header, workspace.get(), nullptr, stream);
  TORCH_CHECK(status == FACT_OK, describe(call), ": ", call.library->entry_name, " returned ",
              ::fact::core::status_name(status));
}

std::vector<at::Tensor> launch_cuda(at::TensorList operands, int64_t call_id) {
  Call& call = Registry::instance().call(call_id);
  check_operands(call, operands);
  const c10::Device device = device_of(call, operands, {});
  std::vector<at::Tensor> results;
  results.reserve(call.results.size());
  const auto options = at::TensorOptions().device(device);
  for (const TensorSpec& spec : call.results) {
    results.push_back(at::empty_strided(spec.shape, spec.stride, options.dtype(spec.dtype)));
  }
  run(call, operands, results, device);
  return results;
}

void launch_out_cuda(at::TensorList operands, at::TensorList results, int64_t call_id) {
  Call& call = Registry::instance().call(call_id);
  check_operands(call, operands);
  check_results(call, results);
  run(call, operands, results, device_of(call, operands, results));
}

std::vector<at::Tensor> launch_floor(at::TensorList, int64_t) { return {}; }

}  // namespace
}  // namespace fact::torch_ext

TORCH_LIBRARY(fact_native, m) {
  m.def("register_call(str image_hex, int[] slot_offsets, int[] slot_sources, "
        "int[] slot_indices, int[] slot_element_offsets, Tensor[] results, Tensor[] operands, "
        "int[] operand_layout_checked, str library, str entry, str label) -> int",
        &fact::torch_ext::register_call);
  m.def("registered_libraries() -> str[]", &fact::torch_ext::registered_libraries);
  m.def("launch_floor(Tensor[] operands, int call) -> Tensor[]", &fact::torch_ext::launch_floor);
}

TORCH_LIBRARY_IMPL(fact, CUDA, m) {
  m.impl("launch", &fact::torch_ext::launch_cuda);
  m.impl("launch_out", &fact::torch_ext::launch_out_cuda);
}

TORCH_LIBRARY_IMPL(fact, Autograd, m) {
  m.impl("launch", torch::autograd::autogradNotImplementedFallback());
}
