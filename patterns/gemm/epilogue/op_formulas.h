// The formula of every GEMM epilogue op (ops.def names each one's struct in its HostFormula
// column), written once as a template over the scalar type so that one definition serves:
//   - the float64 host reference (patterns/gemm/kind/reference_host.cpp), T = double;
//   - the float64 GPU reference (patterns/gemm/runtime/reference_gemm.cu), T = double;
//   - the device functor of an op without a CUTLASS one (gemm_epilogue.cuh's Formula<Op>::Fn for
//     activations, MatrixFormula<Op>::Link for steps over an M×N operand), T = float.
// Plain C++ (no CUTLASS, no engine headers): host compilers and nvcc both read it.
//
//   activation: struct Name { template <class T> FACT_HD static T apply(T x, T p0, T p1); };
//   step:       struct NameStep { template <class T>
//                 FACT_HD static T apply(T x, T operand, const StepConstants<T>& c); };
// `operand` is the step's operand element at (m, n) as ops.def's OPERAND column reads it (0 when
// it reads none); the steps that store D pair columns and are applied by the references' store
// (PassStep). The formulas of steps a pattern folder registers are in that folder (its
// epilogue_steps.def, asked with FACT_GEMM_STEP_FORMULAS, names their headers), included below.
#pragma once
#include <math.h>

#include <cstdint>

#if defined(__CUDACC__)
#define FACT_HD __host__ __device__
#else
#define FACT_HD
#endif

namespace fact::gemm::ops {

// A step's constants as FactGemmStep carries them (gemm_abi.h).
template <class T>
struct StepConstants {
  T value = T(1);
  T p0 = T(0), p1 = T(0);
  int32_t activation = 0;  // FactActivation
};

// --- activations: apply(x, p0, p1) --------------------------------------------------------------

struct Identity {
  template <class T> FACT_HD static T apply(T x, T, T) { return x; }
};
struct Relu {
  template <class T> FACT_HD static T apply(T x, T, T) { return x > T(0) ? x : T(0); }
};
struct GeluErf {
  template <class T> FACT_HD static T apply(T x, T, T) {
    return T(0.5) * x * (T(1) + ::erf(x / ::sqrt(T(2))));
  }
};
struct GeluTanh {
  template <class T> FACT_HD static T apply(T x, T, T) {
    constexpr T kPi = T(3.14159265358979323846);
    return T(0.5) * x * (T(1) + ::tanh(::sqrt(T(2) / kPi) * (x + T(0.044715) * x * x * x)));
  }
};
struct Silu {
  template <class T> FACT_HD static T apply(T x, T, T) { return x / (T(1) + ::exp(-x)); }
};
struct Sigmoid {
  template <class T> FACT_HD static T apply(T x, T, T) { return T(1) / (T(1) + ::exp(-x)); }
};
struct LeakyRelu {  // slope p0
  template <class T> FACT_HD static T apply(T x, T p0, T) { return x >= T(0) ? x : p0 * x; }
};
struct HardTanh {  // clamp to [p0, p1]
  template <class T> FACT_HD static T apply(T x, T p0, T p1) {
    return x < p0 ? p0 : (x > p1 ? p1 : x);
  }
};
struct Tanh {
  template <class T> FACT_HD static T apply(T x, T, T) { return ::tanh(x); }
};

// softplus with PyTorch's beta = 1 and threshold = 20: log(1 + e^x), and x itself above 20.
struct Softplus {
  template <class T> FACT_HD static T apply(T x, T, T) { return x > T(20) ? x : ::log1p(::exp(x)); }
};

// act(x; p0, p1) for a FactActivation id; NaN for an id ops.def does not list.
template <class T>
FACT_HD T activate(int32_t activation, T x, T p0, T p1) {
  switch (activation) {
#define FACT_GEMM_ACTIVATION(C_NAME, CPP, ID, NAME, F16, F32, FORMULA, ...) \
    case ID: return FORMULA::template apply<T>(x, p0, p1);
#include "patterns/gemm/epilogue/ops.def"
#undef FACT_GEMM_ACTIVATION
    default: return T(NAN);
  }
}

// --- steps: apply(x, operand, constants) --------------------------------------------------------

struct ScaleStep {
  template <class T> FACT_HD static T apply(T x, T, const StepConstants<T>& c) { return x * c.value; }
};
struct AddStep {
  template <class T> FACT_HD static T apply(T x, T, const StepConstants<T>& c) { return x + c.value; }
};
struct BiasStep {  // operand: bias[n]
  template <class T> FACT_HD static T apply(T x, T bias, const StepConstants<T>& c) {
    return x + c.value * bias;
  }
};
struct ActivationStep {
  template <class T> FACT_HD static T apply(T x, T, const StepConstants<T>& c) {
    return activate<T>(c.activation, x, c.p0, c.p1);
  }
};
struct ResidualStep {  // operand: C[m, n]
  template <class T> FACT_HD static T apply(T x, T residual, const StepConstants<T>& c) {
    return x + c.value * residual;
  }
};
struct MultiplyStep {  // operand: C[m, n]
  template <class T> FACT_HD static T apply(T x, T factor, const StepConstants<T>&) { return x * factor; }
};
// A step that stores D itself (ops.def's STORES_D): the value passes unchanged; the references'
// store for that step pairs the columns.
struct PassStep {
  template <class T> FACT_HD static T apply(T x, T, const StepConstants<T>&) { return x; }
};

// The tanh-form GELU's derivative step of a backward pass (the epilogue of a dgrad GEMM):
// x · gelu_tanh'(u), u = operand[m, n] the forward pass's pre-activation, with
// gelu_tanh'(u) = ½(1 + t) + ½·u·(1 − t²)·√(2/π)·(1 + 3·0.044715·u²), t = tanh(√(2/π)(u + 0.044715·u³)).
struct GeluTanhGradStep {
  template <class T> FACT_HD static T apply(T x, T u, const StepConstants<T>&) {
    constexpr T kSqrt2OverPi = T(0.79788456080286535588);
    constexpr T kCubic = T(0.044715);
    const T t = ::tanh(kSqrt2OverPi * (u + kCubic * u * u * u));
    const T slope = T(0.5) * (T(1) + t) +
                    T(0.5) * u * (T(1) - t * t) * kSqrt2OverPi * (T(1) + T(3) * kCubic * u * u);
    return x * slope;
  }
};

// The erf-form GELU's derivative step (aten.gelu_backward without approximate):
// x · gelu_erf'(u) = x · (Φ(u) + u·φ(u)), Φ and φ the standard normal's distribution and density.
struct GeluErfGradStep {
  template <class T> FACT_HD static T apply(T x, T u, const StepConstants<T>&) {
    constexpr T kInvSqrt2 = T(0.70710678118654752440);
    constexpr T kInvSqrt2Pi = T(0.39894228040143267794);
    const T cdf = T(0.5) * (T(1) + ::erf(u * kInvSqrt2));
    return x * (cdf + u * kInvSqrt2Pi * ::exp(T(-0.5) * u * u));
  }
};

// ReLU's derivative step (aten.threshold_backward at threshold 0): x where u > 0, else 0, with
// u the forward ReLU's output or input. A select, not a product, as PyTorch's (u <= 0 gives 0
// whatever x is; a NaN u passes x).
struct ReluGradStep {
  template <class T> FACT_HD static T apply(T x, T u, const StepConstants<T>&) {
    return u <= T(0) ? T(0) : x;
  }
};

// SiLU's derivative step (aten.silu_backward): x · silu'(u) = x · s·(1 + u·(1 − s)),
// s = sigmoid(u), u the forward input.
struct SiluGradStep {
  template <class T> FACT_HD static T apply(T x, T u, const StepConstants<T>&) {
    const T s = T(1) / (T(1) + ::exp(-u));
    return x * (s * (T(1) + u * (T(1) - s)));
  }
};

}  // namespace fact::gemm::ops

#define FACT_GEMM_STEP_FORMULAS
#include "fact/gemm_epilogue_steps.def"
#undef FACT_GEMM_STEP_FORMULAS

namespace fact::gemm::ops {

// One step of kind `kind` (FactGemmStepKind) on x; sets *known = false for a kind ops.def does
// not list.
template <class T>
FACT_HD T apply_step(int32_t kind, T x, T operand, const StepConstants<T>& c, bool* known) {
  switch (kind) {
#define FACT_GEMM_STEP(C_NAME, CPP, ID, NAME, TOKEN, LINK, OPERAND, CONSTANTS, STORES_D, FORMULA, ...) \
    case ID: return FORMULA::template apply<T>(x, operand, c);
#include "patterns/gemm/epilogue/ops.def"
#undef FACT_GEMM_STEP
    default: *known = false; return x;
  }
}

}  // namespace fact::gemm::ops
