// The logic behind every rendered FACT GEMM kernel: a rendered source only
// declares a `Kernel` struct of type choices and forwards its C entry point here.
//
// A Kernel struct provides:
//   Gemm                        cutlass::gemm::device::GemmUniversalAdapter<...>
//   Chain, EpilogueConfig       the epilogue chain (gemm_epilogue.cuh) and its Config
//   ElementA/B/C/D              operand types (ElementC: the first M×N epilogue operand's, read
//                               through CUTLASS's C; void when no step reads one). A chain whose
//                               last link stores D (kStoresD) writes D itself: the collective
//                               epilogue is built with a void D and ElementD names D's type
//   LayoutA/B/C/D               cutlass::layout::RowMajor / ColumnMajor
//   kAlignmentA/B/D             alignments in elements the kernel was built for
//   kSplitK                     split-K slices baked in (1 = none); FactGemmArgs::split_k > 1
//                               overrides it for stream-K kernels
//   kOrderedReduction           stream-K/split-K partials summed in split order (true) or
//                               in arrival order (false: no serial chain, nondeterministic)
//   kMaxSwizzle, kRasterOrder   tile scheduler defaults
//   kName                       the readable KernelSpec name
//   kDirectStore (optional)     true: the direct-store variant for a D whose rows are not
//                               16-byte aligned. The collective epilogue is FACT's
//                               DirectStore (gemm_direct_store.cuh: Chain per element from
//                               the call's arguments, stored element by element,
//                               residue-predicated), and D needs only its element's
//                               alignment. Absent: false (a TMA epilogue running Chain)
//
// run<Kernel>() implements the FACT C ABI v2 (fact_abi.h, gemm_abi.h): header, dtype, layout and
// epilogue-step checks against the build, size query, can_implement, launch; it returns a
// FactStatus and never throws. A call whose rows are not 16-byte aligned (an unaligned K, lda,
// ldb, ...) runs zero-padded through the workspace (gemm_padding.h, gemm_padding.cuh). A call with two batch modes (outer_batch > 1) runs as
// outer_batch launches of the kernel on the stream, launch o on fact_gemm_outer_slice(args, o)
// (the kernel's own batch mode L is `batch`); they share the workspace, which the stream
// orders.
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

#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/gemm_direct_store.cuh"
#include "patterns/gemm/gemm_padding.cuh"
#include "patterns/gemm/gemm_prepared_launch.cuh"
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

template <class T>
bool aligned_to_element(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) % alignof(T)) == 0;
}

// Kernel::kDirectStore, false when the Kernel does not declare it.
template <class Kernel, class = void>
struct direct_store : std::false_type {};
template <class Kernel>
struct direct_store<Kernel, std::void_t<decltype(Kernel::kDirectStore)>>
    : std::bool_constant<Kernel::kDirectStore> {};

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

}  // namespace detail

// FACT_ROW_MAJOR / FACT_COLUMN_MAJOR of a CUTLASS layout tag.
template <class Layout>
constexpr int32_t layout_id() {
  return detail::is_row_major<Layout>() ? FACT_ROW_MAJOR : FACT_COLUMN_MAJOR;
}

// Checks the call against what the kernel was built for and what CUTLASS cannot see: the
// header (ABI version, kind, size), dtypes and layouts, the epilogue steps (count, kinds,
// activations, operand dtypes), sizes and leading dimensions, and unless `size_query`, null
// pointers and 16-byte pointer alignment for TMA. Returns FACT_OK or the error to report, and
// the GEMM arguments in `out`.
template <class Kernel>
int check_arguments(const FactCallHeader* header, bool size_query, const FactGemmArgs** out) {
  using Chain = typename Kernel::Chain;
  const FactGemmArgs* call = fact_gemm_args_of(header);
  if (call == nullptr) return FACT_ERR_INVALID_ARGS;
  const FactGemmArgs& args = *call;
  *out = call;
  using epilogue::detail::dtype_id;
  if (args.a_type != dtype_id<typename Kernel::ElementA>() ||
      args.b_type != dtype_id<typename Kernel::ElementB>() ||
      args.d_type != dtype_id<typename Kernel::ElementD>() ||
      args.a_layout != layout_id<typename Kernel::LayoutA>() ||
      args.b_layout != layout_id<typename Kernel::LayoutB>()) {
    return FACT_ERR_INVALID_ARGS;
  }
  if (args.m <= 0 || args.n <= 0 || args.k <= 0 || args.batch <= 0) return FACT_ERR_INVALID_ARGS;
  if (args.split_k < 0) return FACT_ERR_INVALID_ARGS;
  if (args.lda < detail::min_leading<typename Kernel::LayoutA>(args.m, args.k) ||
      args.ldb < detail::min_leading<typename Kernel::LayoutB>(args.k, args.n) ||
      args.ldd < detail::min_leading<typename Kernel::LayoutD>(args.m, fact_gemm_d_cols(&args))) {
    return FACT_ERR_INVALID_ARGS;
  }
  if (args.stride_a < 0 || args.stride_b < 0 || args.stride_d < 0) return FACT_ERR_INVALID_ARGS;
  if (args.m > INT32_MAX || args.n > INT32_MAX || args.k > INT32_MAX || args.batch > INT32_MAX) {
    return FACT_ERR_CANNOT_IMPLEMENT;
  }
  if (int status = epilogue::check_chain<Chain, typename Kernel::EpilogueConfig>(args, size_query);
      status != FACT_OK) {
    return status;
  }
  if (int status = epilogue::check_outer_batch(args, size_query); status != FACT_OK) return status;
  if (size_query) return FACT_OK;
  if (!args.a || !args.b || !args.d) return FACT_ERR_INVALID_ARGS;
  // A TMA-stored D needs a 16-byte aligned base; the direct-store variant writes elements.
  const bool d_aligned = detail::direct_store<Kernel>::value
                             ? detail::aligned_to_element<typename Kernel::ElementD>(args.d)
                             : detail::aligned_16(args.d);
  if (!detail::aligned_16(args.a) || !detail::aligned_16(args.b) || !d_aligned) {
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
  if constexpr (detail::direct_store<Kernel>::value) {
    // The direct-store collective computes the chain per element from the call itself.
    arguments.epilogue.thread = args;
  } else {
    arguments.epilogue.thread =
        Chain::template arguments<EpilogueConfig, typename Kernel::ElementD>(args);
  }
  if constexpr (Chain::kSourceStep >= 0) {
    // The chain's first M×N operand is CUTLASS's C.
    const FactGemmStep& source = args.steps[Chain::kSourceStep];
    arguments.epilogue.ptr_C = static_cast<const ElementCPointee*>(source.operand);
    arguments.epilogue.dC = detail::make_stride<StrideC>(source.ld, source.batch_stride);
  } else {
    arguments.epilogue.ptr_C = nullptr;
    arguments.epilogue.dC = detail::make_stride<StrideC>(args.ldd, args.stride_d);
  }
  if constexpr (Chain::kStoresD) {
    arguments.epilogue.ptr_D = nullptr;  // the chain's last link writes D (its own TMA store)
  } else {
    arguments.epilogue.ptr_D = static_cast<ElementD*>(args.d);
  }
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

// The FACT C ABI for one Kernel (fact_abi.h, gemm_abi.h) on a call the kernel can address
// (16-byte aligned rows; run() pads the others). A call of one launch equal to one this thread
// prepared before launches that preparation (gemm_prepared_launch.cuh).
template <class Kernel>
int run_unpadded(const FactCallHeader* header, void* workspace, size_t* workspace_size,
                 cudaStream_t stream) noexcept {
  using Gemm = typename Kernel::Gemm;
  using GemmKernel = typename Gemm::GemmKernel;
  struct Prepared {
    typename Gemm::Arguments arguments;
    typename GemmKernel::Params params;
  };
  static thread_local PreparedLaunches<Prepared> prepared_launches;
  try {
    const bool size_query = workspace_size != nullptr;
    const FactGemmArgs* call = size_query ? nullptr : fact_gemm_args_of(header);
    int device = 0;
    bool known_device = false;
    if (call != nullptr) {
      known_device = cudaGetDevice(&device) == cudaSuccess;
      if (!known_device) (void)cudaGetLastError();
    }
    if (known_device) {
      if (Prepared* kept = prepared_launches.find(*call, device, workspace)) {
        if (GemmKernel::initialize_workspace(kept->arguments, workspace, stream) !=
            cutlass::Status::kSuccess) {
          return FACT_ERR_INITIALIZE;
        }
        return Gemm::run(kept->params, stream) == cutlass::Status::kSuccess ? FACT_OK
                                                                           : FACT_ERR_LAUNCH;
      }
    }
    // Not kept: checked and prepared. An argument error is reported as such also where the
    // device cannot be asked for.
    const FactGemmArgs* args = nullptr;
    if (int status = check_arguments<Kernel>(header, size_query, &args); status != FACT_OK) {
      return status;
    }
    if (!known_device && cudaGetDevice(&device) != cudaSuccess) {
      (void)cudaGetLastError();
      return FACT_ERR_LAUNCH;
    }
    // One launch per outer batch; the slices differ only in their pointers (aligned alike:
    // check_outer_batch), so can_implement and the workspace size are those of every slice.
    const int64_t outer = fact_gemm_outer_count(args);
    for (int64_t o = 0; o < outer; ++o) {
      const FactGemmArgs slice = outer == 1 ? *args : fact_gemm_outer_slice(args, o);
      Prepared launch{make_arguments<Kernel>(slice, device), {}};
      const size_t needed = Gemm::get_workspace_size(launch.arguments);
      if (size_query) {
        *workspace_size = needed;
        return FACT_OK;
      }
      if (Gemm::can_implement(launch.arguments) != cutlass::Status::kSuccess) {
        return FACT_ERR_CANNOT_IMPLEMENT;
      }
      if (needed > 0 && workspace == nullptr) return FACT_ERR_WORKSPACE;
      if (GemmKernel::initialize_workspace(launch.arguments, workspace, stream) !=
          cutlass::Status::kSuccess) {
        return FACT_ERR_INITIALIZE;
      }
      launch.params = GemmKernel::to_underlying_arguments(launch.arguments, workspace);
      if (!ensure_shared_memory_attribute<GemmKernel>(device)) return FACT_ERR_INITIALIZE;
      if (Gemm::run(launch.params, stream) != cutlass::Status::kSuccess) return FACT_ERR_LAUNCH;
      if (outer == 1) prepared_launches.keep(*args, device, workspace, launch);
    }
    return FACT_OK;
  } catch (...) {
    return FACT_ERR_INTERNAL;
  }
}

// The FACT C ABI for one Kernel: run_unpadded behind gemm_padding.cuh's run_padded, so a call
// whose rows are not 16-byte aligned runs zero-padded (gemm_padding.h).
template <class Kernel>
int run(const FactCallHeader* header, void* workspace, size_t* workspace_size,
        cudaStream_t stream) noexcept {
  return padding::run_padded(header, workspace, workspace_size, stream,
                             detail::direct_store<Kernel>::value, &run_unpadded<Kernel>);
}

// ------------------------------------------------------------------------------------------
// Standalone runner (debugging aid): random inputs, one launch, naive reference.

namespace standalone {

struct Buffer {
  void* device = nullptr;
  ~Buffer() { if (device) cudaFree(device); }
};

template <class Element>
bool fill_random(Buffer& buffer, size_t count, unsigned seed, float scale) {
  std::vector<Element> host(count);
  uint32_t state = seed * 2654435761u + 1u;
  for (auto& x : host) {
    state = state * 1664525u + 1013904223u;
    x = Element(scale * (static_cast<float>(state >> 8) / 8388608.0f - 1.0f));
  }
  if (cudaMalloc(&buffer.device, count * sizeof(Element)) != cudaSuccess) return false;
  return cudaMemcpy(buffer.device, host.data(), count * sizeof(Element),
                    cudaMemcpyHostToDevice) == cudaSuccess;
}

// Random values for an operand of FactDType `type`.
inline bool fill_random_typed(Buffer& buffer, int32_t type, size_t count, unsigned seed) {
  switch (type) {
    case FACT_DTYPE_F32: return fill_random<float>(buffer, count, seed, 1.0f);
    case FACT_DTYPE_BF16: return fill_random<cutlass::bfloat16_t>(buffer, count, seed, 1.0f);
    case FACT_DTYPE_F16: return fill_random<cutlass::half_t>(buffer, count, seed, 1.0f);
    default: return false;
  }
}

template <class Kernel>
__device__ float reference_column(const FactGemmArgs& args, int64_t m, int64_t n, int64_t l) {
  using ElementA = typename Kernel::ElementA;
  using ElementB = typename Kernel::ElementB;
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
  return Kernel::Chain::template reference<typename Kernel::EpilogueConfig>(
      args, static_cast<float>(sum), m, n, l);
}

// One element of D per thread: D's column j (a chain whose last link stores D computes it from
// the row's product columns: Chain::stored).
template <class Kernel>
__global__ void reference_kernel(FactGemmArgs args, float* out) {
  const int64_t cols = fact_gemm_d_cols(&args);
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t m = blockIdx.y;
  const int64_t l = blockIdx.z;
  if (j >= cols) return;
  float value;
  if constexpr (Kernel::Chain::kStoresD) {
    value = Kernel::Chain::stored(args, m, j,
                                  [&](int64_t n) { return reference_column<Kernel>(args, m, n, l); });
  } else {
    value = reference_column<Kernel>(args, m, j, l);
  }
  out[(l * args.m + m) * cols + j] = value;
}

template <class Element>
__global__ void gather_output(FactGemmArgs args, bool row_major, float* out) {
  const int64_t cols = fact_gemm_d_cols(&args);
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t m = blockIdx.y;
  const int64_t l = blockIdx.z;
  if (n >= cols) return;
  const auto* d = static_cast<const Element*>(args.d) + l * args.stride_d;
  out[(l * args.m + m) * cols + n] =
      static_cast<float>(row_major ? d[m * args.ldd + n] : d[n * args.ldd + m]);
}

}  // namespace standalone

// Usage: <binary> [m n k batch outer]. Prints one line: name, status, workspace, time, rel_err.
// Every step gets its own constants (scale 0.75, add 0.25, bias multiplier 1.25, residual beta
// 0.5, leaky slope 0.1, clamp [-0.5, 0.5]) and operand (random values). With outer > 1 the
// operands are [batch][outer][rows][cols] in memory (the kernel's batch mode the outer one in
// memory, as a permuted 4-D matmul has it): the call runs outer launches. Returns 0 when the kernel ran and matched the
// reference (rel_err below the tolerance of the operand type), 1 otherwise.
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
  const int64_t outer = argc > 5 ? std::atoll(argv[5]) : 1;
  const int64_t batches = batch * outer;
  constexpr bool row_d = detail::is_row_major<typename Kernel::LayoutD>();

  FactGemmArgs args{};
  args.header = {FACT_ABI_VERSION, fact_kind_id(FACT_GEMM_KIND_NAME), sizeof(FactGemmArgs), 0};
  args.m = m; args.n = n; args.k = k; args.batch = batch; args.outer_batch = outer;
  args.a_type = epilogue::detail::dtype_id<ElementA>();
  args.b_type = epilogue::detail::dtype_id<ElementB>();
  args.d_type = epilogue::detail::dtype_id<ElementD>();
  args.a_layout = layout_id<typename Kernel::LayoutA>();
  args.b_layout = layout_id<typename Kernel::LayoutB>();
  const int64_t d_cols = Chain::kHalvesColumns ? n / 2 : n;  // its last link may write M x N/2
  args.lda = detail::min_leading<typename Kernel::LayoutA>(m, k);
  args.ldb = detail::min_leading<typename Kernel::LayoutB>(k, n);
  args.ldd = detail::min_leading<typename Kernel::LayoutD>(m, d_cols);
  args.stride_a = outer * m * k; args.stride_b = outer * k * n; args.stride_d = outer * m * d_cols;
  args.outer_stride_a = m * k; args.outer_stride_b = k * n; args.outer_stride_d = m * d_cols;
  args.alpha = 1.0f;
  args.split_k = 0; args.sm_count = 0;
  args.num_steps = Chain::kSteps;
  Chain::describe(args.steps);

  standalone::Buffer a, b, d;
  standalone::Buffer operands[FACT_GEMM_MAX_STEPS];
  standalone::Buffer operands2[FACT_GEMM_MAX_STEPS];  // TABLES steps' second tables
  bool ok = standalone::fill_random<ElementA>(a, size_t(m * k * batches), 1, 1.0f) &&
            standalone::fill_random<ElementB>(b, size_t(k * n * batches), 2, 1.0f) &&
            standalone::fill_random<ElementD>(d, size_t(m * d_cols * batches), 3, 1.0f);
  args.a = a.device; args.b = b.device; args.d = d.device;
  for (int i = 0; i < Chain::kSteps; ++i) {
    FactGemmStep& step = args.steps[i];
    switch (step.kind) {
      case FACT_STEP_SCALE: step.value = 0.75f; break;
      case FACT_STEP_ADD_SCALAR: step.value = 0.25f; break;
      case FACT_STEP_ACTIVATION:
        step.p0 = step.activation == FACT_ACT_LEAKY_RELU ? 0.1f : -0.5f;
        step.p1 = 0.5f;
        break;
      case FACT_STEP_BIAS:
        // One vector per outer batch, shared by the kernel's batches.
        step.value = 1.25f;
        ok = ok && standalone::fill_random_typed(operands[i], step.operand_type,
                                                 size_t(n * outer), 10 + i);
        step.operand = operands[i].device;
        step.outer_batch_stride = n;
        break;
      case FACT_STEP_RESIDUAL:
      case FACT_STEP_MULTIPLY:
        step.value = step.kind == FACT_STEP_RESIDUAL ? 0.5f : 0.0f;
        ok = ok && standalone::fill_random_typed(operands[i], step.operand_type,
                                                 size_t(m * n * batches), 10 + i);
        step.operand = operands[i].device;
        step.ld = row_d ? n : m;
        step.batch_stride = outer * m * n;
        step.outer_batch_stride = m * n;
        break;
      default:
        // Any other step over a length-M vector (ops.def): one per outer batch, shared by the
        // kernel's batches.
        if (epilogue::detail::step_operand(step.kind) == epilogue::detail::StepOperand::ROW_VECTOR) {
          ok = ok && standalone::fill_random_typed(operands[i], step.operand_type,
                                                   size_t(m * outer), 10 + i);
          step.operand = operands[i].device;
          step.outer_batch_stride = m;
        }
        // Any other step over two tables (ops.def's TABLES): one pair for every sequence of 128
        // rows (or M), groups of 128 (or 64) columns, pairs (p, p + group/2)
        // (FACT_STANDALONE_TABLES_INTERLEAVED=1: pairs (2p, 2p+1)).
        if (epilogue::detail::step_operand(step.kind) == epilogue::detail::StepOperand::TABLES) {
          step.period = m % 128 == 0 ? 128 : m;
          step.group = n % 128 == 0 ? 128 : 64;
          step.interleaved = std::getenv("FACT_STANDALONE_TABLES_INTERLEAVED") ? 1 : 0;
          step.ld = step.group;
          step.period_stride = 0;
          ok = ok && standalone::fill_random_typed(operands[i], step.operand_type,
                                                   size_t(step.period * step.group), 10 + i) &&
               standalone::fill_random_typed(operands2[i], step.operand_type,
                                             size_t(step.period * step.group), 20 + i);
          step.operand = operands[i].device;
          step.operand2 = operands2[i].device;
        }
        // Any other step over an M×N operand (ops.def): random data in D's layout.
        if (epilogue::detail::step_operand(step.kind) == epilogue::detail::StepOperand::MATRIX) {
          ok = ok && standalone::fill_random_typed(operands[i], step.operand_type,
                                                   size_t(m * n * batches), 10 + i);
          step.operand = operands[i].device;
          step.ld = row_d ? n : m;
          step.batch_stride = outer * m * n;
          step.outer_batch_stride = m * n;
        }
        break;
    }
  }
  if (!ok) {
    std::printf("%s status=alloc_failed\n", Kernel::kName);
    return 1;
  }

  size_t workspace_bytes = 0;
  int status = entry(&args.header, nullptr, &workspace_bytes, nullptr);
  void* workspace = nullptr;
  if (status == FACT_OK && workspace_bytes > 0 &&
      cudaMalloc(&workspace, workspace_bytes) != cudaSuccess) {
    status = FACT_ERR_WORKSPACE;
  }
  float ms = 0.0f;
  if (status == FACT_OK) {
    status = entry(&args.header, workspace, nullptr, nullptr);
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start);
    constexpr int kRepeats = 10;
    for (int i = 0; i < kRepeats && status == FACT_OK; ++i) {
      status = entry(&args.header, workspace, nullptr, nullptr);
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
    const size_t count = size_t(m * d_cols * batches);
    cudaMalloc(&reference, count * sizeof(float));
    cudaMalloc(&output, count * sizeof(float));
    const dim3 grid(unsigned((d_cols + 127) / 128), unsigned(m), unsigned(batch));
    for (int64_t o = 0; o < outer; ++o) {  // the reference of each outer batch's slice
      const FactGemmArgs slice = fact_gemm_outer_slice(&args, o);
      standalone::reference_kernel<Kernel><<<grid, 128>>>(slice, reference + o * batch * m * d_cols);
      standalone::gather_output<ElementD><<<grid, 128>>>(slice, row_d, output + o * batch * m * d_cols);
    }
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
  std::printf("%s m=%lld n=%lld k=%lld batch=%lld outer=%lld status=%d cuda=%s workspace=%zu "
              "ms=%.4f rel_err=%.3e steps=%d source_step=%d\n",
              Kernel::kName, (long long)m, (long long)n, (long long)k, (long long)batch,
              (long long)outer, status,
              cudaGetErrorString(sync), workspace_bytes, ms, rel_err, Chain::kSteps,
              Chain::kSourceStep);
  return (status == FACT_OK && sync == cudaSuccess && rel_err >= 0.0 && rel_err < tolerance) ? 0
                                                                                          : 1;
}

}  // namespace fact::gemm
