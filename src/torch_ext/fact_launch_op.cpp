// Native CUDA implementation of the `fact::gemm` torch op (schema: python/fact/ops.py).
//
// Built at run time by python/fact/native.py (torch.utils.cpp_extension), not by CMake. Loading
// the library registers:
//   - fact::gemm for the CUDA key: calls a FACT kernel library's entry point directly (workspace
//     size query cached per problem, workspace from the CUDA caching allocator, launch on the
//     current stream); a kernel that answers FACT_ERR_CANNOT_IMPLEMENT, or no kernel at all, runs
//     the reference op `fact::gemm_reference` (defined in Python); any other status raises.
//   - fact::gemm for the Autograd key: torch's "not implemented" autograd kernel, so a result
//     computed from tensors that require grad fails clearly on backward instead of giving a
//     wrong gradient (inference only).
//   - fact::gemm_planned for the CUDA and Autograd keys: the same, with everything but the
//     tensors taken from a plan registered once (fact_native::register_plan, mirrored from
//     fact.ops.plan_gemm with the same numbering): 5 arguments to pass per call instead of 19.
//   - fact_native::register_kernel(str path) -> int: dlopens a kernel library (fact_abi.h) once
//     per path and returns its handle, the integer the graph's fact::gemm calls carry. Handles
//     count up from 0 in registration order; python/fact/kernels.py keeps the same numbering.
//   - fact_native::registered_paths() -> str[]: the registered libraries, by handle.
//   - fact_native::gemm_call_floor(<fact::gemm's arguments>) -> Tensor: returns `a` and does
//     nothing else; bench/compose/op_overhead.py times it to show what passing fact::gemm's 19
//     arguments from Python through the dispatcher costs by itself.
//
// Capture safety: no synchronization, device memory only from the caching allocator, work only
// on the current stream.
#include <dlfcn.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fact/runtime/fact_abi.h"

namespace fact::torch_ext {
namespace {

const char* status_name(int status) {
  switch (status) {
    case FACT_OK: return "FACT_OK";
    case FACT_ERR_INVALID_ARGS: return "FACT_ERR_INVALID_ARGS";
    case FACT_ERR_CANNOT_IMPLEMENT: return "FACT_ERR_CANNOT_IMPLEMENT";
    case FACT_ERR_WORKSPACE: return "FACT_ERR_WORKSPACE";
    case FACT_ERR_INITIALIZE: return "FACT_ERR_INITIALIZE";
    case FACT_ERR_LAUNCH: return "FACT_ERR_LAUNCH";
    case FACT_ERR_INTERNAL: return "FACT_ERR_INTERNAL";
    default: return "unknown FactStatus";
  }
}

// The value of the top-level string member `name` of the JSON object `text` ("" when absent).
// fact_kernel_info() returns a JSON object whose "entry" and "key" members are plain
// identifiers; nested objects (the spec) are skipped by tracking the nesting depth.
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

struct KernelLibrary {
  std::string path;
  std::string entry_name;
  std::string key;
  FactGemmEntry entry = nullptr;
};

// What the workspace size depends on: the problem and operand geometry, not the pointers.
struct WorkspaceKey {
  int64_t handle, device, m, n, k, batch, lda, stride_a, ldb, stride_b, ldc, stride_c, ldd,
      stride_d;
  bool operator==(const WorkspaceKey& other) const {
    return handle == other.handle && device == other.device && m == other.m && n == other.n &&
           k == other.k && batch == other.batch && lda == other.lda &&
           stride_a == other.stride_a && ldb == other.ldb && stride_b == other.stride_b &&
           ldc == other.ldc && stride_c == other.stride_c && ldd == other.ldd &&
           stride_d == other.stride_d;
  }
};

struct WorkspaceKeyHash {
  size_t operator()(const WorkspaceKey& key) const {
    size_t h = 0;
    for (int64_t v : {key.handle, key.device, key.m, key.n, key.k, key.batch, key.lda,
                      key.stride_a, key.ldb, key.stride_b, key.ldc, key.stride_c, key.ldd,
                      key.stride_d}) {
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    }
    return h;
  }
};

// Everything of a fact::gemm call but its tensors (see fact::gemm's schema).
struct GemmPlan {
  int64_t m, n, k, batch;
  std::vector<int64_t> a_geometry, b_geometry, out_shape;
  c10::ScalarType out_dtype;
  double alpha, beta, act_p0, act_p1;
  std::string epilogue;
  int64_t kernel_handle;
  std::string kernel_id;
};

// Process-wide registry of loaded kernel libraries (handle = index) and cached workspace sizes.
class Registry {
 public:
  static Registry& instance() {
    static Registry registry;
    return registry;
  }

  int64_t add(const std::string& path) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < libraries_.size(); ++i) {
      if (libraries_[i].path == path) return static_cast<int64_t>(i);
    }
    void* dl = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    TORCH_CHECK(dl != nullptr, "cannot load kernel library ", path, ": ", dlerror());
    auto info = reinterpret_cast<FactKernelInfo>(dlsym(dl, "fact_kernel_info"));
    TORCH_CHECK(info != nullptr, path, " does not export fact_kernel_info");
    const char* info_text = info();
    TORCH_CHECK(info_text != nullptr, "fact_kernel_info() of ", path, " returned NULL");
    KernelLibrary library;
    library.path = path;
    library.entry_name = top_level_string(info_text, "entry");
    library.key = top_level_string(info_text, "key");
    TORCH_CHECK(!library.entry_name.empty(), path, ": fact_kernel_info has no \"entry\"");
    if (library.key.empty()) library.key = library.entry_name;
    library.entry = reinterpret_cast<FactGemmEntry>(dlsym(dl, library.entry_name.c_str()));
    TORCH_CHECK(library.entry != nullptr, path, " does not export ", library.entry_name);
    libraries_.push_back(std::move(library));  // the library stays loaded for the process
    return static_cast<int64_t>(libraries_.size() - 1);
  }

  // The handle of `handle`'s library, else (handle < 0) of the first library whose key, entry
  // name or key prefix is `kernel_id`; -1 when neither names one. Sets `library` (a deque
  // element: its address stays valid as libraries are added).
  int64_t find(int64_t handle, std::string_view kernel_id, const KernelLibrary*& library) {
    std::lock_guard<std::mutex> lock(mutex_);
    library = nullptr;
    if (handle >= 0) {
      TORCH_CHECK(handle < static_cast<int64_t>(libraries_.size()),
                  "fact::gemm: no FACT kernel library with handle ", handle,
                  " (load it with fact.kernels.load)");
      library = &libraries_[handle];
      return handle;
    }
    if (kernel_id.empty()) return -1;
    for (size_t i = 0; i < libraries_.size(); ++i) {
      const std::string& key = libraries_[i].key;
      if (key == kernel_id || libraries_[i].entry_name == kernel_id ||
          key.compare(0, kernel_id.size(), kernel_id) == 0) {
        library = &libraries_[i];
        return static_cast<int64_t>(i);
      }
    }
    return -1;
  }

  std::optional<size_t> cached_workspace(const WorkspaceKey& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = workspace_sizes_.find(key);
    if (found == workspace_sizes_.end()) return std::nullopt;
    return found->second;
  }

  void remember_workspace(const WorkspaceKey& key, size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    workspace_sizes_[key] = size;
  }

  int64_t add_plan(GemmPlan plan) {
    std::lock_guard<std::mutex> lock(mutex_);
    plans_.push_back(std::move(plan));
    return static_cast<int64_t>(plans_.size() - 1);
  }

  const GemmPlan& plan(int64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(id >= 0 && id < static_cast<int64_t>(plans_.size()),
                "fact::gemm_planned: no plan ", id, " (register it with fact.ops.plan_gemm)");
    return plans_[id];  // deque: references stay valid as plans are added
  }

  std::vector<std::string> paths() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> out;
    for (const auto& library : libraries_) out.push_back(library.path);
    return out;
  }

 private:
  std::mutex mutex_;
  std::deque<KernelLibrary> libraries_;
  std::deque<GemmPlan> plans_;
  std::unordered_map<WorkspaceKey, size_t, WorkspaceKeyHash> workspace_sizes_;
};

int64_t register_kernel(std::string path) { return Registry::instance().add(path); }

std::vector<std::string> registered_paths() { return Registry::instance().paths(); }

at::Tensor gemm_reference(const at::Tensor& a, const at::Tensor& b,
                          const std::optional<at::Tensor>& bias,
                          const std::optional<at::Tensor>& c, int64_t m, int64_t n, int64_t k,
                          int64_t batch, c10::IntArrayRef a_geometry, c10::IntArrayRef b_geometry,
                          c10::IntArrayRef out_shape, c10::ScalarType out_dtype, double alpha,
                          double beta, double act_p0, double act_p1, c10::string_view epilogue,
                          int64_t kernel_handle, c10::string_view kernel_id) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("fact::gemm_reference", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                                               const std::optional<at::Tensor>&,
                                               const std::optional<at::Tensor>&, int64_t,
                                               int64_t, int64_t, int64_t, c10::IntArrayRef,
                                               c10::IntArrayRef, c10::IntArrayRef,
                                               c10::ScalarType, double, double, double, double,
                                               c10::string_view, int64_t, c10::string_view)>();
  return op.call(a, b, bias, c, m, n, k, batch, a_geometry, b_geometry, out_shape, out_dtype,
                 alpha, beta, act_p0, act_p1, epilogue, kernel_handle, kernel_id);
}

at::Tensor gemm_cuda(const at::Tensor& a, const at::Tensor& b,
                     const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& c,
                     int64_t m, int64_t n, int64_t k, int64_t batch, c10::IntArrayRef a_geometry,
                     c10::IntArrayRef b_geometry, c10::IntArrayRef out_shape,
                     c10::ScalarType out_dtype, double alpha, double beta, double act_p0,
                     double act_p1, c10::string_view epilogue, int64_t kernel_handle,
                     c10::string_view kernel_id) {
  Registry& registry = Registry::instance();
  const KernelLibrary* library = nullptr;
  const int64_t handle = registry.find(kernel_handle, kernel_id, library);
  if (library == nullptr) {
    return gemm_reference(a, b, bias, c, m, n, k, batch, a_geometry, b_geometry, out_shape,
                          out_dtype, alpha, beta, act_p0, act_p1, epilogue, kernel_handle,
                          kernel_id);
  }
  TORCH_CHECK(a.is_cuda() && b.device() == a.device(),
              "fact::gemm: A and B must be on the same CUDA device");
  TORCH_CHECK(a_geometry.size() == 3 && b_geometry.size() == 3,
              "fact::gemm: a_geometry and b_geometry are [layout, leading dimension, batch stride]");
  c10::cuda::CUDAGuard device_guard(a.device());

  const int64_t matrix_stride = batch > 1 ? m * n : 0;
  at::Tensor c_dense, bias_dense;
  if (c.has_value()) {
    c_dense = c->contiguous();
    TORCH_CHECK(c_dense.device() == a.device() && c_dense.numel() == batch * m * n,
                "fact::gemm: C must hold batch*M*N elements on A's device");
  }
  if (bias.has_value()) {
    bias_dense = bias->contiguous();
    TORCH_CHECK(bias_dense.device() == a.device() && bias_dense.numel() == n,
                "fact::gemm: bias must be a length-N vector on A's device");
  }
  at::Tensor d = at::empty(out_shape, a.options().dtype(out_dtype));
  TORCH_CHECK(d.numel() == batch * m * n, "fact::gemm: out_shape must hold batch*M*N elements");

  FactGemmArgs args{};
  args.abi_version = FACT_ABI_VERSION;
  args.m = m;
  args.n = n;
  args.k = k;
  args.batch = batch;
  args.a = a.const_data_ptr();
  args.lda = a_geometry[1];
  args.stride_a = a_geometry[2];
  args.b = b.const_data_ptr();
  args.ldb = b_geometry[1];
  args.stride_b = b_geometry[2];
  if (c_dense.defined()) {
    args.c = c_dense.const_data_ptr();
    args.ldc = n;
    args.stride_c = matrix_stride;
  }
  args.d = d.data_ptr();
  args.ldd = n;
  args.stride_d = matrix_stride;
  args.bias = bias_dense.defined() ? bias_dense.const_data_ptr() : nullptr;
  args.alpha = static_cast<float>(alpha);
  args.beta = static_cast<float>(beta);
  args.act_p0 = static_cast<float>(act_p0);
  args.act_p1 = static_cast<float>(act_p1);
  args.split_k = 1;  // <= 1: the kernel's own split count
  args.sm_count = 0;

  const WorkspaceKey workspace_key{handle,        a.device().index(), m,        n,
                                   k,             batch,              args.lda, args.stride_a,
                                   args.ldb,      args.stride_b,      args.ldc, args.stride_c,
                                   args.ldd,      args.stride_d};
  std::optional<size_t> workspace_size = registry.cached_workspace(workspace_key);
  if (!workspace_size) {
    size_t queried = 0;
    const int status = library->entry(&args, nullptr, &queried, nullptr);
    TORCH_CHECK(status == FACT_OK, "fact::gemm: ", library->entry_name,
                " workspace size query failed: ", status_name(status));
    registry.remember_workspace(workspace_key, queried);
    workspace_size = queried;
  }
  c10::DataPtr workspace;
  if (*workspace_size > 0) {
    workspace = c10::cuda::CUDACachingAllocator::get()->allocate(*workspace_size);
  }
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(a.device().index()).stream();
  const int status = library->entry(&args, workspace.get(), nullptr, stream);
  if (status == FACT_OK) return d;
  if (status == FACT_ERR_CANNOT_IMPLEMENT) {
    TORCH_WARN("fact::gemm: ", library->entry_name, " cannot implement ", batch, "x", m, "x", n,
               "x", k, "; using the reference implementation");
    return gemm_reference(a, b, bias, c, m, n, k, batch, a_geometry, b_geometry, out_shape,
                          out_dtype, alpha, beta, act_p0, act_p1, epilogue, kernel_handle,
                          kernel_id);
  }
  TORCH_CHECK(false, "fact::gemm: ", library->entry_name, " failed: ", status_name(status));
}

int64_t register_plan(int64_t m, int64_t n, int64_t k, int64_t batch, c10::IntArrayRef a_geometry,
                      c10::IntArrayRef b_geometry, c10::IntArrayRef out_shape,
                      c10::ScalarType out_dtype, double alpha, double beta, double act_p0,
                      double act_p1, c10::string_view epilogue, int64_t kernel_handle,
                      c10::string_view kernel_id) {
  return Registry::instance().add_plan(GemmPlan{
      m, n, k, batch, a_geometry.vec(), b_geometry.vec(), out_shape.vec(), out_dtype, alpha,
      beta, act_p0, act_p1, std::string(epilogue), kernel_handle, std::string(kernel_id)});
}

at::Tensor gemm_planned_cuda(const at::Tensor& a, const at::Tensor& b,
                             const std::optional<at::Tensor>& bias,
                             const std::optional<at::Tensor>& c, int64_t plan_id) {
  const GemmPlan& plan = Registry::instance().plan(plan_id);
  return gemm_cuda(a, b, bias, c, plan.m, plan.n, plan.k, plan.batch, plan.a_geometry,
                   plan.b_geometry, plan.out_shape, plan.out_dtype, plan.alpha, plan.beta,
                   plan.act_p0, plan.act_p1, plan.epilogue, plan.kernel_handle, plan.kernel_id);
}

at::Tensor gemm_call_floor(const at::Tensor& a, const at::Tensor&, const std::optional<at::Tensor>&,
                           const std::optional<at::Tensor>&, int64_t, int64_t, int64_t, int64_t,
                           c10::IntArrayRef, c10::IntArrayRef, c10::IntArrayRef, c10::ScalarType,
                           double, double, double, double, c10::string_view, int64_t,
                           c10::string_view) {
  return a;
}

}  // namespace
}  // namespace fact::torch_ext

TORCH_LIBRARY(fact_native, m) {
  m.def("register_kernel(str path) -> int", &fact::torch_ext::register_kernel);
  m.def("registered_paths() -> str[]", &fact::torch_ext::registered_paths);
  m.def("register_plan(int m, int n, int k, int batch, int[] a_geometry, int[] b_geometry, "
        "int[] out_shape, ScalarType out_dtype, float alpha, float beta, float act_p0, "
        "float act_p1, str epilogue, int kernel_handle, str kernel_id) -> int",
        &fact::torch_ext::register_plan);
  m.def("gemm_call_floor(Tensor a, Tensor b, Tensor? bias, Tensor? c, int m, int n, int k, "
        "int batch, int[] a_geometry, int[] b_geometry, int[] out_shape, ScalarType out_dtype, "
        "float alpha, float beta, float act_p0, float act_p1, str epilogue, int kernel_handle, "
        "str kernel_id) -> Tensor",
        &fact::torch_ext::gemm_call_floor);
}

TORCH_LIBRARY_IMPL(fact, CUDA, m) {
  m.impl("gemm", &fact::torch_ext::gemm_cuda);
  m.impl("gemm_planned", &fact::torch_ext::gemm_planned_cuda);
}

TORCH_LIBRARY_IMPL(fact, Autograd, m) {
  m.impl("gemm", torch::autograd::autogradNotImplementedFallback());
  m.impl("gemm_planned", torch::autograd::autogradNotImplementedFallback());
}
