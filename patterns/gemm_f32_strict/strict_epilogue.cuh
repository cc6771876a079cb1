// What the strict-float32 kernels (strict_gemm_sm90.cuh, strict_gemm_sm80.cuh) share about their
// epilogue and arguments. Both kernels name their epilogue as a chain of
// patterns/gemm/gemm_epilogue.cuh (ScaledAccumulator, Scale, AddScalar, ColumnBias, Activation,
// Residual, Multiply) with float32 operands, each link reading its own FactGemmStep, e.g.
//
//   Activation<GeluTanhAccurate, ColumnBias<float, ScaledAccumulator>>   // gelu(alpha*acc + bias)
//
//   ProblemConfig               the chain's Config in the FACT problem's terms (C and D
//                               row-major, bias indexed by n): the Config of every per-element
//                               evaluation (Chain::reference) outside the GEMM kernel itself —
//                               the K-slice reduction and the standalone check's reference.
//   validate_arguments<Chain>   the argument checks of both kernels (ONE place): the ABI header
//                               (version, kind, size), dtypes (float32) and layouts, the
//                               epilogue steps against the chain, sizes, leading dimensions,
//                               the second batch mode's strides, null pointers, 16-byte
//                               alignment of every operand the chain reads.
//   AccumulatorOr<Chain>        (sm90) the EVT root of the Hopper kernel: the chain's value, or
//                               the raw float32 accumulator when the run writes K-slice
//                               partials (the chain is then applied once, after the sum).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cutlass/cutlass.h"
#include "cutlass/array.h"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/gemm_epilogue.cuh"
#include "patterns/gemm/gemm_padding.cuh"

namespace fact::strict {

namespace chain = fact::gemm::epilogue;

using ProblemConfig = chain::Config<cute::Shape<cute::_1, cute::_1, cute::_1>, float,
                                    cutlass::FloatRoundStyle::round_to_nearest, true, false>;

constexpr int kFloatAlignment = 4;  // float elements per 16-byte access

inline bool aligned_16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
inline bool aligned_elements(int64_t elements) { return elements % kFloatAlignment == 0; }

// FACT_OK when `header` is a FactGemmArgs (ABI version, kind, size) describing a problem a strict
// kernel with epilogue `Chain` can take: float32 A, B, D, A and B in the given layouts, D row-major,
// the chain's epilogue steps; pointers are not checked for a size query (`size_query`).
// FACT_ERR_INVALID_ARGS for malformed arguments, FACT_ERR_CANNOT_IMPLEMENT for sizes over int32
// or misaligned operands. `args` receives the GEMM arguments.
template <class Chain>
int validate_arguments(const FactCallHeader* header, bool size_query, bool a_row_major,
                       bool b_row_major, const FactGemmArgs** out) {
  const FactGemmArgs* args = fact_gemm_args_of(header);
  if (!args) return FACT_ERR_INVALID_ARGS;
  *out = args;
  if (args->a_type != FACT_DTYPE_F32 || args->b_type != FACT_DTYPE_F32 ||
      args->d_type != FACT_DTYPE_F32 ||
      args->a_layout != (a_row_major ? FACT_ROW_MAJOR : FACT_COLUMN_MAJOR) ||
      args->b_layout != (b_row_major ? FACT_ROW_MAJOR : FACT_COLUMN_MAJOR))
    return FACT_ERR_INVALID_ARGS;
  if (args->m <= 0 || args->n <= 0 || args->k <= 0 || args->batch <= 0) return FACT_ERR_INVALID_ARGS;
  if (args->split_k < 0) return FACT_ERR_INVALID_ARGS;
  if (args->stride_a < 0 || args->stride_b < 0 || args->stride_d < 0) return FACT_ERR_INVALID_ARGS;
  if (args->lda < (a_row_major ? args->k : args->m) || args->ldb < (b_row_major ? args->n : args->k) ||
      args->ldd < args->n)
    return FACT_ERR_INVALID_ARGS;
  if (int status = chain::check_chain<Chain, ProblemConfig>(*args, size_query); status != FACT_OK)
    return status;
  if (int status = chain::check_outer_batch(*args, size_query); status != FACT_OK) return status;
  if (args->m > INT32_MAX || args->n > INT32_MAX || args->k > INT32_MAX || args->batch > INT32_MAX)
    return FACT_ERR_CANNOT_IMPLEMENT;
  if (size_query) return FACT_OK;
  if (!args->a || !args->b || !args->d) return FACT_ERR_INVALID_ARGS;
  const bool ok = aligned_16(args->a) && aligned_16(args->b) && aligned_16(args->d) &&
                  aligned_elements(args->lda) && aligned_elements(args->ldb) &&
                  aligned_elements(args->ldd) && aligned_elements(args->stride_a) &&
                  aligned_elements(args->stride_b) && aligned_elements(args->stride_d);
  return ok ? FACT_OK : FACT_ERR_CANNOT_IMPLEMENT;
}

// raw != 0 ? accumulator : value, elementwise (a select, so a NaN in the unused value never
// reaches the output).
template <class T>
struct SelectAccumulator {
  CUTLASS_HOST_DEVICE T operator()(T const& raw, T const& accumulator, T const& value) const {
    return raw != T(0) ? accumulator : value;
  }
};

template <class T, int N>
struct SelectAccumulator<cutlass::Array<T, N>> {
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& raw,
                                                      cutlass::Array<T, N> const& accumulator,
                                                      cutlass::Array<T, N> const& value) const {
    cutlass::Array<T, N> out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = raw[i] != T(0) ? accumulator[i] : value[i];
    return out;
  }
};

// The Hopper kernel's fusion callbacks: D = raw ? accumulator : Chain(accumulator). One kernel
// type serves both the direct run (raw = 0) and the K-sliced run writing float32 partials
// (raw = 1), so the chain is never applied per slice.
template <class Chain>
struct AccumulatorOr {
  template <class Cfg>
  using Node = chain::detail::fusion::Sm90EVT<
      chain::detail::fusion::Sm90Compute<SelectAccumulator, float, float, Cfg::kRound>,
      chain::detail::fusion::Sm90ScalarBroadcast<float, chain::detail::ScalarStride>,
      chain::detail::fusion::Sm90AccFetch, typename Chain::template Node<Cfg, float>>;

  template <class Cfg>
  static typename Node<Cfg>::Arguments arguments(const FactGemmArgs& args, bool raw) {
    return {chain::detail::scalar_arguments<Cfg>(raw ? 1.0f : 0.0f),
            {},
            Chain::template arguments<Cfg, float>(args),
            {}};
  }
};

// K-sliced runs: D[m][n] = Chain(sum_l partials[l][m][n]), the slices added in order in double
// (deterministic; the partials are float32 sums of equal K-slices), the epilogue applied once
// to the rounded sum with the problem's arguments (alpha and every step's constants and
// operands).
template <class Chain>
__global__ void reduce_k_slices(const float* partials, int slices, FactGemmArgs args) {
  const int64_t count = args.m * args.n;
  float* d = static_cast<float*>(args.d);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    double sum = 0.0;
    for (int l = 0; l < slices; ++l) sum += double(partials[l * count + i]);
    const int64_t row = i / args.n, col = i % args.n;
    d[row * args.ldd + col] =
        Chain::template reference<ProblemConfig>(args, float(sum), row, col, 0);
  }
}

}  // namespace fact::strict
