// FACT's fused GEMM epilogues (ABI v2: the epilogue is data, gemm_abi.h) as chains of links over
// CUTLASS's sm90 epilogue visitor tree (EVT) nodes. A rendered kernel names its epilogue as a
// type, innermost link last:
//
//   using Chain = Activation<fact::gemm::epilogue::GeluErfFast,          // steps[2]
//                  Scale<                                                // steps[1]
//                   ColumnBias<cutlass::bfloat16_t, ScaledAccumulator>>>; // steps[0]
//
// and passes `Chain::Node<Config, ElementD>` to the epilogue CollectiveBuilder as its fusion
// callbacks. Each link is one FactGemmStep: its index is the number of links inside it
// (ScaledAccumulator, alpha · accumulator, has none), and it reads its own constants (value, p0,
// p1) and its own operand (pointer, ld, batch stride) from `args.steps[index]`, so a kernel
// serves every constant and two links of one kind never share a parameter. Every link provides,
// for a Config (CTA tile, compute type, rounding, C layout):
//   kSteps                           steps it and its inner links consume
//   kSourceStep                      the step whose M×N operand CUTLASS's C fetch reads (-1: none)
//   Node<Config, ElementOut>         the CUTLASS EVT node computing the link (output ElementOut;
//                                    inner links output Config::ElementCompute)
//   arguments<Config, ElementOut>(args)   that node's runtime arguments, from FactGemmArgs
//   reference<Config>(args, x, m, n, l)   the same steps on one element in float (the K-slice
//                                    reduction of the strict kernels, debug references)
//   matches(args)                    steps[0..kSteps) have the kinds, activations and operand
//                                    dtypes the chain was compiled for
//   describe(steps)                  writes those kinds, activations and dtypes (tests, runners)
//   check_operands<Config>(args, size_query)   leading dimensions, batch strides; and, unless a
//                                    size query, null pointers and alignment of every operand
// Links (one per ops.def step; its DeviceLink column names it): ScaledAccumulator (alpha · acc),
// Scale (x · value), AddScalar (x + value),
// ColumnBias<E> (x + value · bias[n], any number of them), Activation<Fn> (x = Fn(x; p0, p1)),
// Residual<E> (x + value · C_i[m, n]), Multiply<E> (x · C_i[m, n]), Formula<Op>::Fn (an activation
// written as a formula) and MatrixFormula<Op>::Link<E> (x = Op(x, C_i[m, n])). The first M×N operand of a
// chain (innermost) is read through CUTLASS's source (C) fetch: TMA into shared memory, pipelined
// with the mainloop; every further one through Sm90AuxLoad<0>, which loads the thread's fragment
// straight from global memory into registers (no shared memory).
// The links of steps that pattern folders register (their epilogue_steps.def) are defined in
// those folders' headers, included at the end of this file. A link that stores D itself
// (kStoresD: the chain's last) also provides
//   kHalvesColumns                   D has N/2 columns (it pairs product columns into one)
//   stored(args, m, j, pre)          D[m, j] in float from pre(column), the values of row m
//                                    before the link (the standalone reference)
// and builds its own EVT store node; the rendered kernel then gives the collective a void D.
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
#include "cutlass/layout/matrix.h"
#include "cutlass/numeric_types.h"

#include "patterns/gemm/epilogue/gelu_erf_fast.h"
#include "patterns/gemm/epilogue/op_formulas.h"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/gemm_store_stages.cuh"

namespace fact::gemm::epilogue {

// What every link needs to know about the kernel it lives in.
template <class CtaTile_, class ElementCompute_, cutlass::FloatRoundStyle kRound_, bool kRowMajorC_,
          bool kBiasAlongM_ = false, class EpilogueTile_ = void>
struct Config {
  using CtaTile = CtaTile_;                  // cute::Shape<_M,_N,_K> of one CTA
  // The epilogue subtile the collective uses (needed by links that own shared memory: those
  // that store D);
  // void when no link needs it.
  using EpilogueTile = EpilogueTile_;
  using ElementCompute = ElementCompute_;    // type the epilogue computes in (float)
  static constexpr cutlass::FloatRoundStyle kRound = kRound_;
  static constexpr bool kRowMajorC = kRowMajorC_;  // layout of every M×N operand (D's layout)
  // The bias vector runs along the kernel's M mode: a kernel computing D^T = B^T A^T for a
  // problem whose bias is indexed by the problem's n.
  static constexpr bool kBiasAlongM = kBiasAlongM_;
  using LayoutC = std::conditional_t<kRowMajorC_, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;
};

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
    for (int i = 0; i < N; ++i) result[i] = gelu(values[i]);
    return result;
  }
};

// GELU, erf form, for 16-bit outputs: CUTLASS's GELU calls erff (two polynomial ranges chosen
// by selects and a branch, about 28 PTX instructions); this one evaluates one polynomial in
// 1/(1 + p·|x|) times ex2.approx (17 PTX instructions, one rcp.approx and one ex2.approx), with
// |Φ error| <= 3e-7 and GELU relative error <= 7e-6 down to |gelu| = 1e-30
// (epilogue/gelu_erf_fast.h; patterns/gemm/README.md, "erf-GELU epilogue cost"). Float32
// outputs (strict and tf32) keep CUTLASS's erff-based GELU (ops.def's FunctorF32 column).
template <class T>
struct GeluErfFast {
  static constexpr bool kIsHeavy = true;
  CUTLASS_HOST_DEVICE T operator()(T const& value) const {
    return T(fact::gemm::approx::gelu_erf_fast(static_cast<float>(value)));
  }
};

template <class T, int N>
struct GeluErfFast<cutlass::Array<T, N>> {
  static constexpr bool kIsHeavy = true;
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& values) const {
    cutlass::Array<T, N> result;
    GeluErfFast<T> gelu;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) result[i] = gelu(values[i]);
    return result;
  }
};

// tanh with tanhf: CUTLASS's Tanh uses tanh.approx.f32, enough for 16-bit outputs only.
template <class T>
struct TanhAccurate {
  static constexpr bool kIsHeavy = true;
  CUTLASS_HOST_DEVICE T operator()(T const& value) const {
    return T(tanhf(static_cast<float>(value)));
  }
};

template <class T, int N>
struct TanhAccurate<cutlass::Array<T, N>> {
  static constexpr bool kIsHeavy = true;
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& values) const {
    cutlass::Array<T, N> result;
    TanhAccurate<T> tanh_op;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) result[i] = tanh_op(values[i]);
    return result;
  }
};

// The device functor of an activation written only as a formula (op_formulas.h: an op CUTLASS
// has no functor for): Formula<ops::Softplus>::Fn is used like CUTLASS's activation functors,
// computing in float on scalars and element by element on cutlass::Array fragments.
template <class Op>
struct Formula {
  template <class T>
  struct Fn {
    static constexpr bool kIsHeavy = true;
    CUTLASS_HOST_DEVICE T operator()(T const& value) const {
      return T(Op::template apply<float>(static_cast<float>(value), 0.0f, 0.0f));
    }
  };
  template <class T, int N>
  struct Fn<cutlass::Array<T, N>> {
    static constexpr bool kIsHeavy = true;
    CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& values) const {
      cutlass::Array<T, N> result;
      Fn<T> op;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N; ++i) result[i] = op(values[i]);
      return result;
    }
  };
};

namespace detail {

namespace fusion = cutlass::epilogue::fusion;
using ScalarStride = cute::Stride<cute::_0, cute::_0, int64_t>;
using ColumnVectorStride = cute::Stride<cute::_0, cute::_1, int64_t>;  // indexed by n
using RowVectorStride = cute::Stride<cute::_1, cute::_0, int64_t>;     // indexed by m

// A CUTLASS 3 rank-3 stride with one static unit mode: writes `leading` into the dynamic mode
// of the first two and `batch` into the third.
template <class Stride>
CUTLASS_HOST_DEVICE Stride make_stride(int64_t leading, int64_t batch) {
  Stride stride{};
  if constexpr (cute::is_static_v<cute::remove_cvref_t<decltype(cute::get<0>(stride))>>) {
    cute::get<1>(stride) = leading;
  } else {
    cute::get<0>(stride) = leading;
  }
  cute::get<2>(stride) = batch;
  return stride;
}

// FACT_DTYPE_* of a CUTLASS element type (FACT_DTYPE_NONE for void and anything else).
template <class Element>
constexpr int32_t dtype_id() {
  if constexpr (std::is_same_v<Element, float>) return FACT_DTYPE_F32;
  else if constexpr (std::is_same_v<Element, cutlass::bfloat16_t>) return FACT_DTYPE_BF16;
  else if constexpr (std::is_same_v<Element, cutlass::half_t>) return FACT_DTYPE_F16;
  else if constexpr (std::is_same_v<Element, double>) return FACT_DTYPE_F64;
  else return FACT_DTYPE_NONE;
}

// FACT_ACT_* of an activation functor template (-1: unknown, refused at compile time): the
// abi_id of the ops.def entry that names it as its 16-bit or float32 functor.
template <template <class> class Fn>
constexpr int32_t activation_id_of() {
#define FACT_GEMM_ACTIVATION(C_NAME, CPP, ID, NAME, F16, F32, ...)                  \
  if constexpr (std::is_same_v<Fn<float>, F16<float>> || std::is_same_v<Fn<float>, F32<float>>) \
    return ID;                                                                      \
  else
#include "patterns/gemm/epilogue/ops.def"
#undef FACT_GEMM_ACTIVATION
  return -1;
}
template <template <class> class Fn>
struct ActivationId : std::integral_constant<int32_t, activation_id_of<Fn>()> {};

// Whether a gating step may gate with an activation (ops.def's GATES column).
constexpr bool activation_gates(int32_t activation) {
  switch (activation) {
#define FACT_GEMM_ACTIVATION(C_NAME, CPP, ID, NAME, F16, F32, FORMULA, ATEN, ATEN_DEFAULTS, P0, P1, \
                             GATES, ...)                                                             \
    case ID: return GATES != 0;
#include "patterns/gemm/epilogue/ops.def"
#undef FACT_GEMM_ACTIVATION
    default: return false;
  }
}

// What a step reads besides x (ops.def's OPERAND column), for code that handles every step of
// one operand shape alike (the standalone runner's operand buffers).
enum class StepOperand { NONE, COLUMN_VECTOR, ROW_VECTOR, MATRIX, TABLES };
constexpr StepOperand step_operand(int32_t kind) {
  switch (kind) {
#define FACT_GEMM_STEP(C_NAME, CPP, ID, NAME, TOKEN, LINK, OPERAND, ...) \
    case ID: return StepOperand::OPERAND;
#include "patterns/gemm/epilogue/ops.def"
#undef FACT_GEMM_STEP
    default: return StepOperand::NONE;
  }
}

// FACT_STEP_* of a step formula (op_formulas.h): the abi_id of the ops.def entry whose
// HostFormula it is (-1: none).
template <class Formula>
constexpr int32_t step_id_of_formula() {
#define FACT_GEMM_STEP(C_NAME, CPP, ID, NAME, TOKEN, LINK, OPERAND, CONSTANTS, STORES_D, FORMULA, ...) \
  if constexpr (std::is_same_v<Formula, FORMULA>) return ID; else
#include "patterns/gemm/epilogue/ops.def"
#undef FACT_GEMM_STEP
  return -1;
}

template <class T, class = void>
struct has_leaky_alpha : std::false_type {};
template <class T>
struct has_leaky_alpha<T, std::void_t<decltype(std::declval<T&>().leaky_alpha)>> : std::true_type {};

template <class T, class = void>
struct has_bounds : std::false_type {};
template <class T>
struct has_bounds<T, std::void_t<decltype(std::declval<T&>().lower_bound),
                                 decltype(std::declval<T&>().upper_bound)>> : std::true_type {};

// An activation's hyper-parameters from its step: LeakyReLU's slope (p0), Clamp's bounds
// (p0, p1; ±inf for a one-sided clamp).
template <class ActivationArguments>
ActivationArguments activation_arguments(const FactGemmStep& step) {
  ActivationArguments packed{};
  if constexpr (has_leaky_alpha<ActivationArguments>::value) {
    packed.leaky_alpha = static_cast<decltype(packed.leaky_alpha)>(step.p0);
  }
  if constexpr (has_bounds<ActivationArguments>::value) {
    packed.lower_bound = static_cast<decltype(packed.lower_bound)>(step.p0);
    packed.upper_bound = static_cast<decltype(packed.upper_bound)>(step.p1);
  }
  return packed;
}

template <class Element>
CUTLASS_HOST_DEVICE float load_as_float(const void* base, int64_t offset) {
  return static_cast<float>(static_cast<const Element*>(base)[offset]);
}

// Offset of element (m, n) of batch l of an M×N operand in the Config's C layout.
template <class Cfg>
CUTLASS_HOST_DEVICE int64_t matrix_offset(const FactGemmStep& step, int64_t m, int64_t n,
                                          int64_t l) {
  return l * step.batch_stride + (Cfg::kRowMajorC ? m * step.ld + n : n * step.ld + m);
}

inline bool aligned_16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <class Cfg>
using Scalar = fusion::Sm90ScalarBroadcast<typename Cfg::ElementCompute, ScalarStride>;

template <class Cfg>
typename Scalar<Cfg>::Arguments scalar_arguments(float value) {
  using Compute = typename Cfg::ElementCompute;
  return {{Compute(value)}, {nullptr}, {}};
}

// Elements per 16-byte access of an operand.
template <class Element>
constexpr int kVector = 16 / int(sizeof(Element));

// The node reading an M×N operand: CUTLASS's source fetch for the first of a chain, a direct
// global-memory load (Sm90AuxLoad<0>: no shared memory, 16-byte vectors) for the others.
template <class Cfg, class Element, bool kViaSource>
using MatrixFetch = std::conditional_t<
    kViaSource, fusion::Sm90SrcFetch<Element>,
    fusion::Sm90AuxLoad<0, void, Element, typename Cfg::LayoutC, void, void, kVector<Element>>>;

// The bias node: broadcast along the kernel's N mode (or its M mode).
template <class Cfg, class ElementBias>
using BiasBroadcast = std::conditional_t<
    Cfg::kBiasAlongM,
    fusion::Sm90ColBroadcast<0, typename Cfg::CtaTile, ElementBias, typename Cfg::ElementCompute,
                             RowVectorStride>,
    fusion::Sm90RowBroadcast<0, typename Cfg::CtaTile, ElementBias, typename Cfg::ElementCompute,
                             ColumnVectorStride>>;

// What every link after the innermost shares: its step index and the bookkeeping of the chain.
template <class Prev>
struct LinkBase {
  static constexpr int kIndex = Prev::kSteps;  // this link's FactGemmStep
  static constexpr int kSteps = kIndex + 1;
  static_assert(kSteps <= FACT_GEMM_MAX_STEPS, "an epilogue has at most FACT_GEMM_MAX_STEPS steps");
  static constexpr int kSourceStep = Prev::kSourceStep;
  static constexpr bool kReadsSource = Prev::kReadsSource;
  static_assert(!Prev::kStoresD, "a step that stores D is the chain's last");
  static constexpr bool kHalvesColumns = false;
  static constexpr bool kStoresD = false;

  CUTLASS_HOST_DEVICE static const FactGemmStep& step(const FactGemmArgs& args) {
    return args.steps[kIndex];
  }
  // Writes this link's step kind, activation and operand dtype (constants and operands 0).
  static void describe_step(FactGemmStep* steps, int32_t kind, int32_t activation,
                            int32_t operand_type) {
    Prev::describe(steps);
    steps[kIndex] = FactGemmStep{};
    steps[kIndex].kind = kind;
    steps[kIndex].activation = activation;
    steps[kIndex].operand_type = operand_type;
  }
};

// Checks of a step that reads an M×N operand, in the problem's terms (Cfg: its C layout).
template <class Cfg, class Element, bool kViaSource>
int check_matrix_operand(const FactGemmArgs& args, const FactGemmStep& step, bool size_query) {
  constexpr int64_t v = kVector<Element>;
  const int64_t contiguous = Cfg::kRowMajorC ? args.n : args.m;
  if (step.ld < contiguous || step.batch_stride < 0) return FACT_ERR_INVALID_ARGS;
  if (size_query) return FACT_OK;
  if (step.operand == nullptr) return FACT_ERR_INVALID_ARGS;
  if (!aligned_16(step.operand) || step.ld % v != 0 || step.batch_stride % v != 0) {
    return FACT_ERR_CANNOT_IMPLEMENT;
  }
  // The direct loads move 16-byte vectors predicated per vector: the contiguous extent must
  // hold whole vectors.
  if (!kViaSource && contiguous % v != 0) return FACT_ERR_CANNOT_IMPLEMENT;
  return FACT_OK;
}

// The checks a per-row or per-column vector operand (a bias, a row scale) passes: a
// non-negative batch stride, and at run time a pointer and batch stride a 16-byte vector load
// can take (the EVT broadcasts load up to 16 bytes of the entries a thread holds).
template <class Element>
int check_vector_operand(const FactGemmStep& s, bool size_query) {
  if (s.batch_stride < 0) return FACT_ERR_INVALID_ARGS;
  if (size_query) return FACT_OK;
  if (s.operand == nullptr) return FACT_ERR_INVALID_ARGS;
  if (!aligned_16(s.operand) || s.batch_stride % kVector<Element> != 0) {
    return FACT_ERR_CANNOT_IMPLEMENT;
  }
  return FACT_OK;
}

}  // namespace detail

// alpha * accumulator. The innermost link of every chain (no step of its own: alpha is
// FactGemmArgs::alpha).
struct ScaledAccumulator {
  static constexpr int kSteps = 0;
  static constexpr int kSourceStep = -1;
  static constexpr bool kReadsSource = false;
  static constexpr bool kHalvesColumns = false;  // true for a chain whose last link writes M×N/2
  static constexpr bool kStoresD = false;  // the last link writes D itself: void collective D

  template <class Cfg, class ElementOut>
  using Node = detail::fusion::Sm90EVT<
      detail::fusion::Sm90Compute<cutlass::multiplies, ElementOut, typename Cfg::ElementCompute,
                                  Cfg::kRound>,
      detail::Scalar<Cfg>, detail::fusion::Sm90AccFetch>;

  template <class Cfg, class ElementOut>
  static typename Node<Cfg, ElementOut>::Arguments arguments(const FactGemmArgs& args) {
    return {detail::scalar_arguments<Cfg>(args.alpha), {}, {}};
  }

  template <class Cfg>
  CUTLASS_HOST_DEVICE static float reference(const FactGemmArgs& args, float accumulator, int64_t,
                                             int64_t, int64_t) {
    return args.alpha * accumulator;
  }

  static bool matches(const FactGemmArgs&) { return true; }
  static void describe(FactGemmStep*) {}

  template <class Cfg>
  static int check_operands(const FactGemmArgs&, bool) { return FACT_OK; }
};

// x * value.
template <class Prev>
struct Scale : detail::LinkBase<Prev> {
  using Base = detail::LinkBase<Prev>;

  template <class Cfg, class ElementOut>
  using Node = detail::fusion::Sm90EVT<
      detail::fusion::Sm90Compute<cutlass::multiplies, ElementOut, typename Cfg::ElementCompute,
                                  Cfg::kRound>,
      typename Prev::template Node<Cfg, typename Cfg::ElementCompute>, detail::Scalar<Cfg>>;

  template <class Cfg, class ElementOut>
  static typename Node<Cfg, ElementOut>::Arguments arguments(const FactGemmArgs& args) {
    return {Prev::template arguments<Cfg, typename Cfg::ElementCompute>(args),
            detail::scalar_arguments<Cfg>(Base::step(args).value), {}};
  }

  template <class Cfg>
  CUTLASS_HOST_DEVICE static float reference(const FactGemmArgs& args, float accumulator, int64_t m,
                                             int64_t n, int64_t l) {
    return Prev::template reference<Cfg>(args, accumulator, m, n, l) * Base::step(args).value;
  }

  static bool matches(const FactGemmArgs& args) {
    return Prev::matches(args) && Base::step(args).kind == FACT_STEP_SCALE;
  }
  static void describe(FactGemmStep* steps) {
    Base::describe_step(steps, FACT_STEP_SCALE, FACT_ACT_IDENTITY, FACT_DTYPE_NONE);
  }

  template <class Cfg>
  static int check_operands(const FactGemmArgs& args, bool size_query) {
    return Prev::template check_operands<Cfg>(args, size_query);
  }
};

// x + value.
template <class Prev>
struct AddScalar : detail::LinkBase<Prev> {
  using Base = detail::LinkBase<Prev>;

  template <class Cfg, class ElementOut>
  using Node = detail::fusion::Sm90EVT<
      detail::fusion::Sm90Compute<cutlass::plus, ElementOut, typename Cfg::ElementCompute,
                                  Cfg::kRound>,
      typename Prev::template Node<Cfg, typename Cfg::ElementCompute>, detail::Scalar<Cfg>>;

  template <class Cfg, class ElementOut>
  static typename Node<Cfg, ElementOut>::Arguments arguments(const FactGemmArgs& args) {
    return {Prev::template arguments<Cfg, typename Cfg::ElementCompute>(args),
            detail::scalar_arguments<Cfg>(Base::step(args).value), {}};
  }

  template <class Cfg>
  CUTLASS_HOST_DEVICE static float reference(const FactGemmArgs& args, float accumulator, int64_t m,
                                             int64_t n, int64_t l) {
    return Prev::template reference<Cfg>(args, accumulator, m, n, l) + Base::step(args).value;
  }

  static bool matches(const FactGemmArgs& args) {
    return Prev::matches(args) && Base::step(args).kind == FACT_STEP_ADD_SCALAR;
  }
  static void describe(FactGemmStep* steps) {
    Base::describe_step(steps, FACT_STEP_ADD_SCALAR, FACT_ACT_IDENTITY, FACT_DTYPE_NONE);
  }

  template <class Cfg>
  static int check_operands(const FactGemmArgs& args, bool size_query) {
    return Prev::template check_operands<Cfg>(args, size_query);
  }
};

// x + value · bias[n]: a length-N vector per batch (batch_stride 0: one for every batch), scaled
// by the step's value (1 for a plain bias, addmm's beta otherwise); bias[m] under a Config with
// kBiasAlongM. A chain may hold several.
template <class ElementBias, class Prev>
struct ColumnBias : detail::LinkBase<Prev> {
  using Base = detail::LinkBase<Prev>;

  template <class Cfg, class ElementOut>
  using Node = detail::fusion::Sm90EVT<
      detail::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, ElementOut,
                                  typename Cfg::ElementCompute, Cfg::kRound>,
      detail::Scalar<Cfg>, detail::BiasBroadcast<Cfg, ElementBias>,
      typename Prev::template Node<Cfg, typename Cfg::ElementCompute>>;

  template <class Cfg, class ElementOut>
  static typename Node<Cfg, ElementOut>::Arguments arguments(const FactGemmArgs& args) {
    using Stride = std::conditional_t<Cfg::kBiasAlongM, detail::RowVectorStride,
                                      detail::ColumnVectorStride>;
    Stride stride{};
    cute::get<2>(stride) = Base::step(args).batch_stride;
    return {detail::scalar_arguments<Cfg>(Base::step(args).value),
            {static_cast<const ElementBias*>(Base::step(args).operand), ElementBias(0), stride},
            Prev::template arguments<Cfg, typename Cfg::ElementCompute>(args),
            {}};
  }

  template <class Cfg>
  CUTLASS_HOST_DEVICE static float reference(const FactGemmArgs& args, float accumulator, int64_t m,
                                             int64_t n, int64_t l) {
    const FactGemmStep& s = Base::step(args);
    return s.value * detail::load_as_float<ElementBias>(
                         s.operand, l * s.batch_stride + (Cfg::kBiasAlongM ? m : n)) +
           Prev::template reference<Cfg>(args, accumulator, m, n, l);
  }

  static bool matches(const FactGemmArgs& args) {
    const FactGemmStep& s = Base::step(args);
    return Prev::matches(args) && s.kind == FACT_STEP_BIAS &&
           s.operand_type == detail::dtype_id<ElementBias>();
  }
  static void describe(FactGemmStep* steps) {
    Base::describe_step(steps, FACT_STEP_BIAS, FACT_ACT_IDENTITY, detail::dtype_id<ElementBias>());
  }

  template <class Cfg>
  static int check_operands(const FactGemmArgs& args, bool size_query) {
    if (int status = Prev::template check_operands<Cfg>(args, size_query); status != FACT_OK) {
      return status;
    }
    return detail::check_vector_operand<ElementBias>(Base::step(args), size_query);
  }
};

// act(x; p0, p1) with a CUTLASS activation functor (ReLu, GELU, GELU_taylor, SiLu, Sigmoid,
// LeakyReLU, Clamp, Tanh), FACT's accurate float ones (GeluTanhAccurate, TanhAccurate) or its
// fast erf-GELU for 16-bit outputs (GeluErfFast);
// LeakyReLU takes its slope from this step's p0, Clamp its bounds from its p0 / p1.
template <template <class> class ActivationFn, class Prev>
struct Activation : detail::LinkBase<Prev> {
  using Base = detail::LinkBase<Prev>;
  static constexpr int32_t kActivation = detail::ActivationId<ActivationFn>::value;
  static_assert(kActivation >= 0, "an activation functor FACT_ACT_* does not name");

  template <class Cfg, class ElementOut>
  using Compute = detail::fusion::Sm90Compute<ActivationFn, ElementOut,
                                              typename Cfg::ElementCompute, Cfg::kRound>;
  template <class Cfg, class ElementOut>
  using Node = detail::fusion::Sm90EVT<
      Compute<Cfg, ElementOut>, typename Prev::template Node<Cfg, typename Cfg::ElementCompute>>;

  template <class Cfg, class ElementOut>
  static typename Node<Cfg, ElementOut>::Arguments arguments(const FactGemmArgs& args) {
    return {Prev::template arguments<Cfg, typename Cfg::ElementCompute>(args),
            detail::activation_arguments<typename Compute<Cfg, ElementOut>::Arguments>(
                Base::step(args))};
  }

  template <class Cfg>
  CUTLASS_HOST_DEVICE static float reference(const FactGemmArgs& args, float accumulator, int64_t m,
                                             int64_t n, int64_t l) {
    using Fn = ActivationFn<float>;
    using FnArguments = typename Compute<Cfg, float>::Arguments;
    const FactGemmStep& s = Base::step(args);
    const float x = Prev::template reference<Cfg>(args, accumulator, m, n, l);
    if constexpr (detail::has_leaky_alpha<FnArguments>::value) {
      return Fn{}(x, s.p0);
    } else if constexpr (detail::has_bounds<FnArguments>::value) {
      return Fn{}(x, s.p0, s.p1);
    } else {
      return Fn{}(x);
    }
  }

  static bool matches(const FactGemmArgs& args) {
    const FactGemmStep& s = Base::step(args);
    return Prev::matches(args) && s.kind == FACT_STEP_ACTIVATION && s.activation == kActivation;
  }
  static void describe(FactGemmStep* steps) {
    Base::describe_step(steps, FACT_STEP_ACTIVATION, kActivation, FACT_DTYPE_NONE);
  }

  template <class Cfg>
  static int check_operands(const FactGemmArgs& args, bool size_query) {
    return Prev::template check_operands<Cfg>(args, size_query);
  }
};

namespace detail {

// What every link over an M×N operand C_i (this step's operand: pointer, ld, batch stride) has in
// common: the chain's first such operand is fetched through CUTLASS's source (C) fetch, every
// further one straight into registers; its checks, kind match and description. kStep: the step's
// FACT_STEP_* (ops.def).
template <class ElementC, class Prev, int32_t kStep>
struct MatrixOperandLink : LinkBase<Prev> {
  using Base = LinkBase<Prev>;
  static constexpr bool kViaSource = !Prev::kReadsSource;  // the chain's first M×N operand
  static constexpr bool kReadsSource = true;
  static constexpr int kSourceStep = kViaSource ? Base::kIndex : Prev::kSourceStep;

  template <class Cfg>
  using Fetch = MatrixFetch<Cfg, ElementC, kViaSource>;

  template <class Cfg>
  static typename Fetch<Cfg>::Arguments fetch_arguments(const FactGemmArgs& args) {
    if constexpr (kViaSource) {
      return {};  // the collective epilogue's ptr_C / dC (gemm_entry.cuh, strict kernels)
    } else {
      const FactGemmStep& s = Base::step(args);
      using Stride = typename Fetch<Cfg>::StrideMNL;
      return {static_cast<const ElementC*>(s.operand), ElementC(0),
              make_stride<Stride>(s.ld, s.batch_stride)};
    }
  }

  // C_i[m, n] of batch l, in float (the references).
  template <class Cfg>
  CUTLASS_HOST_DEVICE static float operand(const FactGemmArgs& args, int64_t m, int64_t n, int64_t l) {
    const FactGemmStep& s = Base::step(args);
    return load_as_float<ElementC>(s.operand, matrix_offset<Cfg>(s, m, n, l));
  }

  static bool matches(const FactGemmArgs& args) {
    const FactGemmStep& s = Base::step(args);
    return Prev::matches(args) && s.kind == kStep && s.operand_type == dtype_id<ElementC>();
  }
  static void describe(FactGemmStep* steps) {
    Base::describe_step(steps, kStep, FACT_ACT_IDENTITY, dtype_id<ElementC>());
  }

  template <class Cfg>
  static int check_operands(const FactGemmArgs& args, bool size_query) {
    if (int status = Prev::template check_operands<Cfg>(args, size_query); status != FACT_OK) {
      return status;
    }
    return check_matrix_operand<Cfg, ElementC, kViaSource>(args, Base::step(args), size_query);
  }
};

// x = Fn(C_i[m, n], x): a link whose only input besides x is its M×N operand. Fn<T> is called with
// the operand first (the EVT passes its children in order), on scalars and on fragments.
template <template <class> class Fn, int32_t kStep, class ElementC, class Prev>
struct BinaryMatrixLink : MatrixOperandLink<ElementC, Prev, kStep> {
  using Base = MatrixOperandLink<ElementC, Prev, kStep>;

  template <class Cfg, class ElementOut>
  using Node = fusion::Sm90EVT<
      fusion::Sm90Compute<Fn, ElementOut, typename Cfg::ElementCompute, Cfg::kRound>,
      typename Base::template Fetch<Cfg>, typename Prev::template Node<Cfg, typename Cfg::ElementCompute>>;

  template <class Cfg, class ElementOut>
  static typename Node<Cfg, ElementOut>::Arguments arguments(const FactGemmArgs& args) {
    return {Base::template fetch_arguments<Cfg>(args),
            Prev::template arguments<Cfg, typename Cfg::ElementCompute>(args), {}};
  }

  template <class Cfg>
  CUTLASS_HOST_DEVICE static float reference(const FactGemmArgs& args, float accumulator, int64_t m,
                                             int64_t n, int64_t l) {
    return Fn<float>{}(Base::template operand<Cfg>(args, m, n, l),
                       Prev::template reference<Cfg>(args, accumulator, m, n, l));
  }
};

}  // namespace detail

// x + value * C_i[m, n]: a residual connection (value = beta), C_i this step's M×N operand.
template <class ElementC, class Prev>
struct Residual : detail::MatrixOperandLink<ElementC, Prev, FACT_STEP_RESIDUAL> {
  using Base = detail::MatrixOperandLink<ElementC, Prev, FACT_STEP_RESIDUAL>;

  template <class Cfg, class ElementOut>
  using Node = detail::fusion::Sm90EVT<
      detail::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, ElementOut,
                                  typename Cfg::ElementCompute, Cfg::kRound>,
      detail::Scalar<Cfg>, typename Base::template Fetch<Cfg>,
      typename Prev::template Node<Cfg, typename Cfg::ElementCompute>>;

  template <class Cfg, class ElementOut>
  static typename Node<Cfg, ElementOut>::Arguments arguments(const FactGemmArgs& args) {
    return {detail::scalar_arguments<Cfg>(Base::step(args).value),
            Base::template fetch_arguments<Cfg>(args),
            Prev::template arguments<Cfg, typename Cfg::ElementCompute>(args), {}};
  }

  template <class Cfg>
  CUTLASS_HOST_DEVICE static float reference(const FactGemmArgs& args, float accumulator, int64_t m,
                                             int64_t n, int64_t l) {
    return Base::step(args).value * Base::template operand<Cfg>(args, m, n, l) +
           Prev::template reference<Cfg>(args, accumulator, m, n, l);
  }
};

// x * C_i[m, n]: the elementwise product with this step's M×N operand (e.g. a gate times an
// up-projection computed by another GEMM).
template <class ElementC, class Prev>
struct Multiply : detail::BinaryMatrixLink<cutlass::multiplies, FACT_STEP_MULTIPLY, ElementC, Prev> {};

// x = Op(x, C_i[m, n]) for a step written only as a formula over an M×N operand (op_formulas.h:
// apply(x, operand, constants), constants unused): MatrixFormula<ops::GeluTanhGradStep>::Link is
// used like Multiply, its operand fetched the same way. Its step kind is the ops.def entry whose
// HostFormula is Op.
template <class Op>
struct MatrixFormula {
  // (c, x) -> Op(x, c): the operand first, as the EVT passes the children.
  template <class T>
  struct Compute {
    CUTLASS_HOST_DEVICE T operator()(T const& c, T const& x) const {
      return T(Op::template apply<float>(static_cast<float>(x), static_cast<float>(c),
                                         ops::StepConstants<float>{}));
    }
  };
  template <class T, int N>
  struct Compute<cutlass::Array<T, N>> {
    CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& c,
                                                        cutlass::Array<T, N> const& x) const {
      cutlass::Array<T, N> result;
      Compute<T> op;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N; ++i) result[i] = op(c[i], x[i]);
      return result;
    }
  };

  static constexpr int32_t kStep = detail::step_id_of_formula<Op>();
  static_assert(kStep >= 0, "no ops.def entry names this formula");

  template <class ElementC, class Prev>
  struct Link : detail::BinaryMatrixLink<Compute, kStep, ElementC, Prev> {};
};

// FACT_OK when `args` carry the chain's steps (count, kinds, activations, operand dtypes) and
// its operands are usable; FACT_ERR_INVALID_ARGS / FACT_ERR_CANNOT_IMPLEMENT otherwise.
template <class Chain, class Cfg>
int check_chain(const FactGemmArgs& args, bool size_query) {
  if (args.num_steps != Chain::kSteps || !Chain::matches(args)) return FACT_ERR_INVALID_ARGS;
  return Chain::template check_operands<Cfg>(args, size_query);
}

// The second batch mode (gemm_abi.h: the entries run it as outer_batch launches, each on the
// call fact_gemm_outer_slice() makes): FACT_ERR_INVALID_ARGS for a negative count or stride;
// unless a size query, FACT_ERR_CANNOT_IMPLEMENT when an outer stride would move a pointer off
// 16-byte alignment (TMA and the 16-byte operand loads need it in every slice). Checked before
// the first launch, so a call is refused whole or run whole.
inline int check_outer_batch(const FactGemmArgs& args, bool size_query) {
  if (args.outer_batch < 0 || args.outer_stride_a < 0 || args.outer_stride_b < 0 ||
      args.outer_stride_d < 0) {
    return FACT_ERR_INVALID_ARGS;
  }
  for (int i = 0; i < args.num_steps && i < FACT_GEMM_MAX_STEPS; ++i) {
    if (args.steps[i].outer_batch_stride < 0) return FACT_ERR_INVALID_ARGS;
  }
  if (size_query || fact_gemm_outer_count(&args) == 1) return FACT_OK;
  auto aligned = [](int64_t elements, int32_t type) {
    return (elements * fact_gemm_dtype_bytes(type)) % 16 == 0;
  };
  if (!aligned(args.outer_stride_a, args.a_type) || !aligned(args.outer_stride_b, args.b_type) ||
      !aligned(args.outer_stride_d, args.d_type)) {
    return FACT_ERR_CANNOT_IMPLEMENT;
  }
  for (int i = 0; i < args.num_steps && i < FACT_GEMM_MAX_STEPS; ++i) {
    const FactGemmStep& step = args.steps[i];
    if (step.operand != nullptr && !aligned(step.outer_batch_stride, step.operand_type)) {
      return FACT_ERR_CANNOT_IMPLEMENT;
    }
  }
  return FACT_OK;
}

}  // namespace fact::gemm::epilogue

// The links of the steps pattern folders register (their epilogue_steps.def, asked with
// FACT_GEMM_STEP_LINKS): each header defines its link in fact::gemm::epilogue on the helpers above.
#define FACT_GEMM_STEP_LINKS
#include "fact/gemm_epilogue_steps.def"
#undef FACT_GEMM_STEP_LINKS
