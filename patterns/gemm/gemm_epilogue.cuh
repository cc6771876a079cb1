// FACT's fused GEMM epilogues as chains of links over CUTLASS's sm90 epilogue visitor tree
// (EVT) nodes. A rendered kernel names its epilogue as a type, innermost link last:
//
//   using Chain = Activation<cutlass::epilogue::thread::GELU_taylor,
//                   ColumnBias<cutlass::bfloat16_t, ScaledAccumulator>>;   // gelu(alpha*acc + bias)
//
// and passes `Chain::Node<Config, ElementD>` to the epilogue CollectiveBuilder as its fusion
// callbacks. Every link provides, for a Config (CTA tile, compute type, rounding, C layout):
//   Node<Config, ElementOut>        the CUTLASS EVT node computing the link (output ElementOut;
//                                   inner links output Config::ElementCompute)
//   arguments<Config, ElementOut>(args)  that node's runtime arguments, packed from FactGemmArgs
//   reference<Config>(args, x, m, n, l)  the same step on one element, for debug references
//   kReadsSource / kReadsBias        whether the chain reads C (args->c) / the bias vector
// The EVT runs only on the TMA warp-specialized epilogues (TmaWarpSpecialized and
// TmaWarpSpecializedCooperative), not on the NoSmem epilogue.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "cutlass/cutlass.h"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/functional.h"
#include "cutlass/numeric_types.h"

#include "fact/runtime/fact_abi.h"

namespace fact::gemm::epilogue {

// What every link needs to know about the kernel it lives in.
template <class CtaTile_, class ElementCompute_, cutlass::FloatRoundStyle kRound_, bool kRowMajorC_,
          bool kBiasAlongM_ = false>
struct Config {
  using CtaTile = CtaTile_;                  // cute::Shape<_M,_N,_K> of one CTA
  using ElementCompute = ElementCompute_;    // type the epilogue computes in (float)
  static constexpr cutlass::FloatRoundStyle kRound = kRound_;
  static constexpr bool kRowMajorC = kRowMajorC_;  // layout of C (the D layout)
  // The bias vector runs along the kernel's M mode: a kernel computing D^T = B^T A^T for a
  // problem whose bias is indexed by the problem's n.
  static constexpr bool kBiasAlongM = kBiasAlongM_;
};

namespace detail {

namespace fusion = cutlass::epilogue::fusion;
using ScalarStride = cute::Stride<cute::_0, cute::_0, int64_t>;
using ColumnVectorStride = cute::Stride<cute::_0, cute::_1, int64_t>;  // indexed by n
using RowVectorStride = cute::Stride<cute::_1, cute::_0, int64_t>;     // indexed by m

// The EVT node that broadcasts a bias vector along the kernel's N mode (or its M mode).
template <class Cfg, class ElementBias>
using BiasBroadcast = std::conditional_t<
    Cfg::kBiasAlongM,
    fusion::Sm90ColBroadcast<0, typename Cfg::CtaTile, ElementBias, typename Cfg::ElementCompute,
                             RowVectorStride>,
    fusion::Sm90RowBroadcast<0, typename Cfg::CtaTile, ElementBias, typename Cfg::ElementCompute,
                             ColumnVectorStride>>;

template <class T, class = void>
struct has_leaky_alpha : std::false_type {};
template <class T>
struct has_leaky_alpha<T, std::void_t<decltype(std::declval<T&>().leaky_alpha)>> : std::true_type {};

template <class T, class = void>
struct has_bounds : std::false_type {};
template <class T>
struct has_bounds<T, std::void_t<decltype(std::declval<T&>().lower_bound),
                                 decltype(std::declval<T&>().upper_bound)>> : std::true_type {};

// Activation hyper-parameters from act_p0 / act_p1: LeakyReLU's slope, Clamp's bounds.
template <class ActivationArguments>
ActivationArguments activation_arguments(const FactGemmArgs& args) {
  ActivationArguments packed{};
  if constexpr (has_leaky_alpha<ActivationArguments>::value) {
    packed.leaky_alpha = static_cast<decltype(packed.leaky_alpha)>(args.act_p0);
  }
  if constexpr (has_bounds<ActivationArguments>::value) {
    packed.lower_bound = static_cast<decltype(packed.lower_bound)>(args.act_p0);
    packed.upper_bound = static_cast<decltype(packed.upper_bound)>(args.act_p1);
  }
  return packed;
}

template <class Element>
CUTLASS_HOST_DEVICE float load_as_float(const void* base, int64_t offset) {
  return static_cast<float>(static_cast<const Element*>(base)[offset]);
}

template <class Cfg>
CUTLASS_HOST_DEVICE int64_t source_offset(const FactGemmArgs& args, int64_t m, int64_t n,
                                          int64_t l) {
  return l * args.stride_c + (Cfg::kRowMajorC ? m * args.ldc + n : n * args.ldc + m);
}

}  // namespace detail

// GELU, tanh form, with an accurate tanhf: CUTLASS's GELU_taylor uses tanh.approx.f32 (about
// 11 correct bits), enough for 16-bit outputs but not for float32 results.
template <class T>
struct GeluTanhAccurate {
  static constexpr bool kIsHeavy = true;
  CUTLASS_HOST_DEVICE T operator()(T const& value) const {
    const float x = static_cast<float>(value);
    const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return T(0.5f * x * (1.0f + tanhf(inner)));
  }
};

template <class T, int N>
struct GeluTanhAccurate<cutlass::Array<T, N>> {
  static constexpr bool kIsHeavy = true;
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& values) const {
    cutlass::Array<T, N> result;
    GeluTanhAccurate<T> gelu;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) {
      result[i] = gelu(values[i]);
    }
    return result;
  }
};

// alpha * accumulator. The innermost link of every chain.
struct ScaledAccumulator {
  static constexpr bool kReadsSource = false;
  static constexpr bool kReadsBias = false;

  template <class Cfg, class ElementOut>
  using Node = detail::fusion::Sm90EVT<
      detail::fusion::Sm90Compute<cutlass::multiplies, ElementOut, typename Cfg::ElementCompute,
                                  Cfg::kRound>,
      detail::fusion::Sm90ScalarBroadcast<typename Cfg::ElementCompute, detail::ScalarStride>,
      detail::fusion::Sm90AccFetch>;

  template <class Cfg, class ElementOut>
  static typename Node<Cfg, ElementOut>::Arguments arguments(const FactGemmArgs& args) {
    using Compute = typename Cfg::ElementCompute;
    return {{{Compute(args.alpha)}, {nullptr}, {}}, {}, {}};
  }

  template <class Cfg>
  CUTLASS_HOST_DEVICE static float reference(const FactGemmArgs& args, float accumulator, int64_t,
                                             int64_t, int64_t) {
    return args.alpha * accumulator;
  }
};

// x + bias[n]: a length-N vector shared by every row and batch (args->bias); bias[m] under a
// Config with kBiasAlongM.
template <class ElementBias, class Prev>
struct ColumnBias {
  static constexpr bool kReadsSource = Prev::kReadsSource;
  static constexpr bool kReadsBias = true;

  template <class Cfg, class ElementOut>
  using Node = detail::fusion::Sm90EVT<
      detail::fusion::Sm90Compute<cutlass::plus, ElementOut, typename Cfg::ElementCompute,
                                  Cfg::kRound>,
      typename Prev::template Node<Cfg, typename Cfg::ElementCompute>,
      detail::BiasBroadcast<Cfg, ElementBias>>;

  template <class Cfg, class ElementOut>
  static typename Node<Cfg, ElementOut>::Arguments arguments(const FactGemmArgs& args) {
    return {Prev::template arguments<Cfg, typename Cfg::ElementCompute>(args),
            {static_cast<const ElementBias*>(args.bias), ElementBias(0), {}},
            {}};
  }

  template <class Cfg>
  CUTLASS_HOST_DEVICE static float reference(const FactGemmArgs& args, float accumulator, int64_t m,
                                             int64_t n, int64_t l) {
    return Prev::template reference<Cfg>(args, accumulator, m, n, l) +
           detail::load_as_float<ElementBias>(args.bias, Cfg::kBiasAlongM ? m : n);
  }
};

// act(x) with a CUTLASS activation functor (ReLu, GELU, GELU_taylor, SiLu, Sigmoid, LeakyReLU,
// Clamp, ...); LeakyReLU takes its slope from act_p0, Clamp its bounds from act_p0 / act_p1.
template <template <class> class ActivationFn, class Prev>
struct Activation {
  static constexpr bool kReadsSource = Prev::kReadsSource;
  static constexpr bool kReadsBias = Prev::kReadsBias;

  template <class Cfg, class ElementOut>
  using Compute = detail::fusion::Sm90Compute<ActivationFn, ElementOut,
                                              typename Cfg::ElementCompute, Cfg::kRound>;
  template <class Cfg, class ElementOut>
  using Node = detail::fusion::Sm90EVT<
      Compute<Cfg, ElementOut>, typename Prev::template Node<Cfg, typename Cfg::ElementCompute>>;

  template <class Cfg, class ElementOut>
  static typename Node<Cfg, ElementOut>::Arguments arguments(const FactGemmArgs& args) {
    return {Prev::template arguments<Cfg, typename Cfg::ElementCompute>(args),
            detail::activation_arguments<typename Compute<Cfg, ElementOut>::Arguments>(args)};
  }

  template <class Cfg>
  CUTLASS_HOST_DEVICE static float reference(const FactGemmArgs& args, float accumulator, int64_t m,
                                             int64_t n, int64_t l) {
    using Fn = ActivationFn<float>;
    using FnArguments = typename Compute<Cfg, float>::Arguments;
    const float x = Prev::template reference<Cfg>(args, accumulator, m, n, l);
    if constexpr (detail::has_leaky_alpha<FnArguments>::value) {
      return Fn{}(x, args.act_p0);
    } else if constexpr (detail::has_bounds<FnArguments>::value) {
      return Fn{}(x, args.act_p0, args.act_p1);
    } else {
      return Fn{}(x);
    }
  }
};

// beta * C[m, n] + x: a residual connection read from args->c.
template <class ElementC, class Prev>
struct Residual {
  static_assert(!Prev::kReadsSource, "a chain reads C at most once");
  static constexpr bool kReadsSource = true;
  static constexpr bool kReadsBias = Prev::kReadsBias;

  template <class Cfg, class ElementOut>
  using Node = detail::fusion::Sm90EVT<
      detail::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, ElementOut,
                                  typename Cfg::ElementCompute, Cfg::kRound>,
      detail::fusion::Sm90ScalarBroadcast<typename Cfg::ElementCompute, detail::ScalarStride>,
      detail::fusion::Sm90SrcFetch<ElementC>,
      typename Prev::template Node<Cfg, typename Cfg::ElementCompute>>;

  template <class Cfg, class ElementOut>
  static typename Node<Cfg, ElementOut>::Arguments arguments(const FactGemmArgs& args) {
    using Compute = typename Cfg::ElementCompute;
    return {{{Compute(args.beta)}, {nullptr}, {}},
            {},
            Prev::template arguments<Cfg, Compute>(args),
            {}};
  }

  template <class Cfg>
  CUTLASS_HOST_DEVICE static float reference(const FactGemmArgs& args, float accumulator, int64_t m,
                                             int64_t n, int64_t l) {
    const float c = detail::load_as_float<ElementC>(args.c, detail::source_offset<Cfg>(args, m, n, l));
    return args.beta * c + Prev::template reference<Cfg>(args, accumulator, m, n, l);
  }
};

// C[m, n] * x: the elementwise product with args->c (SwiGLU's gate times up-projection).
template <class ElementC, class Prev>
struct MultiplySource {
  static_assert(!Prev::kReadsSource, "a chain reads C at most once");
  static constexpr bool kReadsSource = true;
  static constexpr bool kReadsBias = Prev::kReadsBias;

  template <class Cfg, class ElementOut>
  using Node = detail::fusion::Sm90EVT<
      detail::fusion::Sm90Compute<cutlass::multiplies, ElementOut, typename Cfg::ElementCompute,
                                  Cfg::kRound>,
      detail::fusion::Sm90SrcFetch<ElementC>,
      typename Prev::template Node<Cfg, typename Cfg::ElementCompute>>;

  template <class Cfg, class ElementOut>
  static typename Node<Cfg, ElementOut>::Arguments arguments(const FactGemmArgs& args) {
    return {{}, Prev::template arguments<Cfg, typename Cfg::ElementCompute>(args), {}};
  }

  template <class Cfg>
  CUTLASS_HOST_DEVICE static float reference(const FactGemmArgs& args, float accumulator, int64_t m,
                                             int64_t n, int64_t l) {
    const float c = detail::load_as_float<ElementC>(args.c, detail::source_offset<Cfg>(args, m, n, l));
    return c * Prev::template reference<Cfg>(args, accumulator, m, n, l);
  }
};

}  // namespace fact::gemm::epilogue
