// The logic behind every rendered FACT GEMM kernel (DESIGN.md rule 5): a rendered source only
// declares a `Kernel` struct of type choices and forwards its C entry point here.
//
// A Kernel struct provides:
//   Gemm                        cutlass::gemm::device::GemmUniversalAdapter<...>
//   Chain, EpilogueConfig       the epilogue chain (gemm_epilogue.cuh) and its Config
//   ElementA/B/C/D, ElementBias operand types (ElementC / ElementBias: void when unused)
//   LayoutA/B/C/D               cutlass::layout::RowMajor / ColumnMajor
//   kAlignmentA/B/D             alignments in elements the kernel was built for
//   kSplitK                     split-K slices baked in (1 = none); FactGemmArgs::split_k > 1
//                               overrides it for stream-K kernels
//   kOrderedReduction           stream-K/split-K partials summed in split order (true) or
//                               in arrival order (false: no serial chain, nondeterministic)
//   kMaxSwizzle, kRasterOrder   tile scheduler defaults
//   kName                       the readable KernelSpec name
//
// run<Kernel>() implements the FACT C ABI (fact_abi.h): size query, argument checks,
// can_implement, launch; it returns a FactStatus and never throws.
//
// With -DFACT_STANDALONE_MAIN a rendered source also defines main(), which calls
// standalone_main<Kernel>(): random inputs, one launch, a naive device reference, a status line.
#pragma once
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/layout/matrix.h"

#include "fact/runtime/fact_abi.h"
#include "patterns/gemm/gemm_epilogue.cuh"

#define FACT_EXPORT __attribute__((visibility("default")))

namespace fact::gemm {

namespace detail {

template <class T, class = void>
struct has_splits : std::false_type {};
template <class T>
struct has_splits<T, std::void_t<decltype(std::declval<T&>().splits),
                                 decltype(std::declval<T&>().decomposition_mode)>>
    : std::true_type {};

template <class T, class = void>
struct has_reduction_mode : std::false_type {};
template <class T>
struct has_reduction_mode<T, std::void_t<decltype(std::declval<T&>().reduction_mode)>> : std::true_type {};

template <class Layout>
constexpr bool is_row_major() {
  return std::is_same_v<Layout, cutlass::layout::RowMajor>;
}

// A CUTLASS 3 rank-3 stride with one static unit mode: writes `leading` into the dynamic mode
// of the first two and `batch` into the third.
template <class Stride>
Stride make_stride(int64_t leading, int64_t batch) {
  Stride stride{};
  if constexpr (cute::is_static_v<cute::remove_cvref_t<decltype(cute::get<0>(stride))>>) {
    cute::get<1>(stride) = leading;
  } else {
    cute::get<0>(stride) = leading;
  }
  cute::get<2>(stride) = batch;
  return stride;
}

inline bool aligned_16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Leading dimension needed by a matrix of `rows` x `cols` in this layout.
template <class Layout>
int64_t min_leading(int64_t rows, int64_t cols) {
  return is_row_major<Layout>() ? cols : rows;
}

// SM count of the current device, queried once per device.
inline int device_sm_count(int device) {
  static std::atomic<int> cache[64];
  if (device < 0 || device >= 64) {
    return cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
  }
  int count = cache[device].load(std::memory_order_relaxed);
  if (count == 0) {
    count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
    cache[device].store(count, std::memory_order_relaxed);
  }
  return count;
}

// cudaFuncSetAttribute for the kernel's dynamic shared memory, once per device.
template <class Kernel>
bool ensure_shared_memory_attribute(int device) {
  using GemmKernel = typename Kernel::Gemm::GemmKernel;
  static std::atomic<bool> done[64];
  const bool cacheable = device >= 0 && device < 64;
  if (cacheable && done[device].load(std::memory_order_acquire)) {
    return true;
  }
  constexpr int smem_size = GemmKernel::SharedStorageSize;
  if (smem_size >= (48 << 10)) {
    if (cudaFuncSetAttribute(cutlass::device_kernel<GemmKernel>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             smem_size) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
  }
  if (cacheable) {
    done[device].store(true, std::memory_order_release);
  }
  return true;
}

}  // namespace detail

// Checks what CUTLASS cannot see: null pointers (unless `size_query`), sizes, leading
// dimensions, 16-byte pointer alignment for TMA. Returns FACT_OK or the error to report.
template <class Kernel>
int check_arguments(const FactGemmArgs& args, bool size_query) {
  using Chain = typename Kernel::Chain;
  if (args.abi_version != FACT_ABI_VERSION) return FACT_ERR_INVALID_ARGS;
  if (args.m <= 0 || args.n <= 0 || args.k <= 0 || args.batch <= 0) return FACT_ERR_INVALID_ARGS;
  if (args.split_k < 0) return FACT_ERR_INVALID_ARGS;
  if (args.lda < detail::min_leading<typename Kernel::LayoutA>(args.m, args.k) ||
      args.ldb < detail::min_leading<typename Kernel::LayoutB>(args.k, args.n) ||
      args.ldd < detail::min_leading<typename Kernel::LayoutD>(args.m, args.n)) {
    return FACT_ERR_INVALID_ARGS;
  }
  if (Chain::kReadsSource &&
      args.ldc < detail::min_leading<typename Kernel::LayoutC>(args.m, args.n)) {
    return FACT_ERR_INVALID_ARGS;
  }
  if (args.stride_a < 0 || args.stride_b < 0 || args.stride_c < 0 || args.stride_d < 0) {
    return FACT_ERR_INVALID_ARGS;
  }
  if (size_query) return FACT_OK;
  if (!args.a || !args.b || !args.d) return FACT_ERR_INVALID_ARGS;
  if (Chain::kReadsSource && !args.c) return FACT_ERR_INVALID_ARGS;
  if (Chain::kReadsBias && !args.bias) return FACT_ERR_INVALID_ARGS;
  if (!detail::aligned_16(args.a) || !detail::aligned_16(args.b) || !detail::aligned_16(args.d) ||
      (Chain::kReadsSource && !detail::aligned_16(args.c)) ||
      (Chain::kReadsBias && !detail::aligned_16(args.bias))) {
    return FACT_ERR_CANNOT_IMPLEMENT;
  }
  return FACT_OK;
}

// FactGemmArgs -> the CUTLASS kernel's Arguments.
template <class Kernel>
typename Kernel::Gemm::Arguments make_arguments(const FactGemmArgs& args, int device) {
  using Gemm = typename Kernel::Gemm;
  using GemmKernel = typename Gemm::GemmKernel;
  using StrideA = typename GemmKernel::StrideA;
  using StrideB = typename GemmKernel::StrideB;
  using StrideC = typename GemmKernel::StrideC;
  using StrideD = typename GemmKernel::StrideD;
  using ElementA = typename Gemm::ElementA;
  using ElementB = typename Gemm::ElementB;
  using ElementD = typename Gemm::ElementD;
  using ElementCPointee = typename GemmKernel::CollectiveEpilogue::ElementC;

  typename Gemm::Arguments arguments{};
  arguments.mode = args.batch > 1 ? cutlass::gemm::GemmUniversalMode::kBatched
                                  : cutlass::gemm::GemmUniversalMode::kGemm;
  arguments.problem_shape = {static_cast<int>(args.m), static_cast<int>(args.n),
                             static_cast<int>(args.k), static_cast<int>(args.batch)};

  arguments.mainloop.ptr_A = static_cast<const ElementA*>(args.a);
  arguments.mainloop.dA = detail::make_stride<StrideA>(args.lda, args.stride_a);
  arguments.mainloop.ptr_B = static_cast<const ElementB*>(args.b);
  arguments.mainloop.dB = detail::make_stride<StrideB>(args.ldb, args.stride_b);

  using Chain = typename Kernel::Chain;
  using EpilogueConfig = typename Kernel::EpilogueConfig;
  arguments.epilogue.thread =
      Chain::template arguments<EpilogueConfig, typename Kernel::ElementD>(args);
  if constexpr (Chain::kReadsSource) {
    arguments.epilogue.ptr_C = static_cast<const ElementCPointee*>(args.c);
    arguments.epilogue.dC = detail::make_stride<StrideC>(args.ldc, args.stride_c);
  } else {
    arguments.epilogue.ptr_C = nullptr;
    arguments.epilogue.dC = detail::make_stride<StrideC>(args.ldd, args.stride_d);
  }
  arguments.epilogue.ptr_D = static_cast<ElementD*>(args.d);
  arguments.epilogue.dD = detail::make_stride<StrideD>(args.ldd, args.stride_d);

  arguments.hw_info.device_id = device;
  arguments.hw_info.sm_count = args.sm_count > 0 ? args.sm_count : detail::device_sm_count(device);

  auto& scheduler = arguments.scheduler;
  scheduler.max_swizzle_size = Kernel::kMaxSwizzle;
  scheduler.raster_order = Kernel::kRasterOrder;
  if constexpr (detail::has_splits<std::remove_reference_t<decltype(scheduler)>>::value) {
    const int splits = args.split_k > 1 ? args.split_k : Kernel::kSplitK;
    scheduler.splits = splits;
    if (splits > 1) {
      scheduler.decomposition_mode = decltype(scheduler.decomposition_mode)::SplitK;
    }
  }
  if constexpr (detail::has_reduction_mode<std::remove_reference_t<decltype(scheduler)>>::value) {
    if constexpr (!Kernel::kOrderedReduction) {
      scheduler.reduction_mode = decltype(scheduler.reduction_mode)::Nondeterministic;
    }
  }
  return arguments;
}

// The FACT C ABI for one Kernel (see fact_abi.h).
template <class Kernel>
int run(const FactGemmArgs* args, void* workspace, size_t* workspace_size,
        cudaStream_t stream) noexcept {
  using Gemm = typename Kernel::Gemm;
  using GemmKernel = typename Gemm::GemmKernel;
  try {
    if (args == nullptr) return FACT_ERR_INVALID_ARGS;
    const bool size_query = workspace_size != nullptr;
    if (int status = check_arguments<Kernel>(*args, size_query); status != FACT_OK) {
      return status;
    }
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
      (void)cudaGetLastError();
      return FACT_ERR_LAUNCH;
    }
    typename Gemm::Arguments arguments = make_arguments<Kernel>(*args, device);
    const size_t needed = Gemm::get_workspace_size(arguments);
    if (size_query) {
      *workspace_size = needed;
      return FACT_OK;
    }
    if (Gemm::can_implement(arguments) != cutlass::Status::kSuccess) {
      return FACT_ERR_CANNOT_IMPLEMENT;
    }
    if (needed > 0 && workspace == nullptr) return FACT_ERR_WORKSPACE;
    if (GemmKernel::initialize_workspace(arguments, workspace, stream) !=
        cutlass::Status::kSuccess) {
      return FACT_ERR_INITIALIZE;
    }
    typename GemmKernel::Params params = GemmKernel::to_underlying_arguments(arguments, workspace);
    if (!detail::ensure_shared_memory_attribute<Kernel>(device)) return FACT_ERR_INITIALIZE;
    if (Gemm::run(params, stream) != cutlass::Status::kSuccess) return FACT_ERR_LAUNCH;
    return FACT_OK;
  } catch (...) {
    return FACT_ERR_INTERNAL;
  }
}

// ------------------------------------------------------------------------------------------
// Standalone runner (debugging aid): random inputs, one launch, naive reference.

namespace standalone {

template <class Element>
struct Buffer {
  Element* device = nullptr;
  size_t count = 0;
  ~Buffer() { if (device) cudaFree(device); }
};

template <class Element>
bool fill_random(Buffer<Element>& buffer, size_t count, unsigned seed, float scale) {
  std::vector<Element> host(count);
  uint32_t state = seed * 2654435761u + 1u;
  for (auto& x : host) {
    state = state * 1664525u + 1013904223u;
    x = Element(scale * (static_cast<float>(state >> 8) / 8388608.0f - 1.0f));
  }
  buffer.count = count;
  if (cudaMalloc(&buffer.device, count * sizeof(Element)) != cudaSuccess) return false;
  return cudaMemcpy(buffer.device, host.data(), count * sizeof(Element),
                    cudaMemcpyHostToDevice) == cudaSuccess;
}

template <class Kernel>
__global__ void reference_kernel(FactGemmArgs args, float* out) {
  using ElementA = typename Kernel::ElementA;
  using ElementB = typename Kernel::ElementB;
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t m = blockIdx.y;
  const int64_t l = blockIdx.z;
  if (n >= args.n) return;
  const auto* a = static_cast<const ElementA*>(args.a) + l * args.stride_a;
  const auto* b = static_cast<const ElementB*>(args.b) + l * args.stride_b;
  constexpr bool row_a = detail::is_row_major<typename Kernel::LayoutA>();
  constexpr bool row_b = detail::is_row_major<typename Kernel::LayoutB>();
  double sum = 0.0;
  for (int64_t k = 0; k < args.k; ++k) {
    const double x = static_cast<float>(row_a ? a[m * args.lda + k] : a[k * args.lda + m]);
    const double y = static_cast<float>(row_b ? b[k * args.ldb + n] : b[n * args.ldb + k]);
    sum += x * y;
  }
  out[(l * args.m + m) * args.n + n] = Kernel::Chain::template reference<
      typename Kernel::EpilogueConfig>(args, static_cast<float>(sum), m, n, l);
}

template <class Element>
__global__ void gather_output(FactGemmArgs args, bool row_major, float* out) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t m = blockIdx.y;
  const int64_t l = blockIdx.z;
  if (n >= args.n) return;
  const auto* d = static_cast<const Element*>(args.d) + l * args.stride_d;
  out[(l * args.m + m) * args.n + n] =
      static_cast<float>(row_major ? d[m * args.ldd + n] : d[n * args.ldd + m]);
}

}  // namespace standalone

// Usage: <binary> [m n k batch]. Prints one line: name, status, workspace, time, rel_err.
// Returns 0 when the kernel ran and matched the reference (rel_err below the tolerance of the
// operand type), 1 otherwise.
template <class Kernel, class Entry>
int standalone_main(int argc, char** argv, Entry entry) {
  using ElementA = typename Kernel::ElementA;
  using ElementB = typename Kernel::ElementB;
  using ElementD = typename Kernel::ElementD;
  using Chain = typename Kernel::Chain;
  const int64_t m = argc > 1 ? std::atoll(argv[1]) : 512;
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 512;
  const int64_t k = argc > 3 ? std::atoll(argv[3]) : 512;
  const int64_t batch = argc > 4 ? std::atoll(argv[4]) : 1;

  FactGemmArgs args{};
  args.abi_version = FACT_ABI_VERSION;
  args.m = m; args.n = n; args.k = k; args.batch = batch;
  args.lda = detail::min_leading<typename Kernel::LayoutA>(m, k);
  args.ldb = detail::min_leading<typename Kernel::LayoutB>(k, n);
  args.ldc = args.ldd = detail::min_leading<typename Kernel::LayoutD>(m, n);
  args.stride_a = m * k; args.stride_b = k * n; args.stride_c = args.stride_d = m * n;
  args.alpha = 1.0f; args.beta = 1.0f;
  args.act_p0 = -0.5f; args.act_p1 = 0.5f;  // leaky slope / clamp bounds
  args.split_k = 0; args.sm_count = 0;

  standalone::Buffer<ElementA> a;
  standalone::Buffer<ElementB> b;
  standalone::Buffer<ElementD> d;
  const float operand_scale = 1.0f;
  bool ok = standalone::fill_random(a, size_t(m * k * batch), 1, operand_scale) &&
            standalone::fill_random(b, size_t(k * n * batch), 2, operand_scale) &&
            standalone::fill_random(d, size_t(m * n * batch), 3, 1.0f);
  args.a = a.device; args.b = b.device; args.d = d.device;
  using ElementC = typename Kernel::ElementC;
  using ElementBias = typename Kernel::ElementBias;
  standalone::Buffer<std::conditional_t<std::is_void_v<ElementC>, float, ElementC>> c;
  standalone::Buffer<std::conditional_t<std::is_void_v<ElementBias>, float, ElementBias>> bias;
  if constexpr (!std::is_void_v<ElementC>) {
    ok = ok && standalone::fill_random(c, size_t(m * n * batch), 4, 1.0f);
    args.c = c.device;
  }
  if constexpr (!std::is_void_v<ElementBias>) {
    ok = ok && standalone::fill_random(bias, size_t(n), 5, 1.0f);
    args.bias = bias.device;
  }
  if (!ok) {
    std::printf("%s status=alloc_failed\n", Kernel::kName);
    return 1;
  }

  size_t workspace_bytes = 0;
  int status = entry(&args, nullptr, &workspace_bytes, nullptr);
  void* workspace = nullptr;
  if (status == FACT_OK && workspace_bytes > 0 &&
      cudaMalloc(&workspace, workspace_bytes) != cudaSuccess) {
    status = FACT_ERR_WORKSPACE;
  }
  float ms = 0.0f;
  if (status == FACT_OK) {
    status = entry(&args, workspace, nullptr, nullptr);
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start);
    constexpr int kRepeats = 10;
    for (int i = 0; i < kRepeats && status == FACT_OK; ++i) {
      status = entry(&args, workspace, nullptr, nullptr);
    }
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    cudaEventElapsedTime(&ms, start, stop);
    ms /= kRepeats;
  }
  const cudaError_t sync = cudaDeviceSynchronize();
  double rel_err = -1.0;
  if (status == FACT_OK && sync == cudaSuccess) {
    float* reference = nullptr;
    float* output = nullptr;
    const size_t count = size_t(m * n * batch);
    cudaMalloc(&reference, count * sizeof(float));
    cudaMalloc(&output, count * sizeof(float));
    const dim3 grid(unsigned((n + 127) / 128), unsigned(m), unsigned(batch));
    standalone::reference_kernel<Kernel><<<grid, 128>>>(args, reference);
    standalone::gather_output<ElementD>
        <<<grid, 128>>>(args, detail::is_row_major<typename Kernel::LayoutD>(), output);
    std::vector<float> ref_host(count), out_host(count);
    cudaMemcpy(ref_host.data(), reference, count * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(out_host.data(), output, count * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(reference);
    cudaFree(output);
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < count; ++i) {
      const double e = double(out_host[i]) - double(ref_host[i]);
      diff += e * e;
      norm += double(ref_host[i]) * double(ref_host[i]);
    }
    rel_err = norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  }
  if (workspace) cudaFree(workspace);
  const double tolerance = sizeof(ElementA) == 4 ? 5e-3 : 2e-2;
  std::printf("%s m=%lld n=%lld k=%lld batch=%lld status=%d cuda=%s workspace=%zu ms=%.4f "
              "rel_err=%.3e reads_c=%d reads_bias=%d\n",
              Kernel::kName, (long long)m, (long long)n, (long long)k, (long long)batch, status,
              cudaGetErrorString(sync), workspace_bytes, ms, rel_err, int(Chain::kReadsSource),
              int(Chain::kReadsBias));
  return (status == FACT_OK && sync == cudaSuccess && rel_err >= 0.0 && rel_err < tolerance) ? 0
                                                                                          : 1;
}

}  // namespace fact::gemm
