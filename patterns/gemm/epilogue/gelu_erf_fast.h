// The erf-form GELU in float without erff: the device formula of the GELU_ERF activation for
// 16-bit outputs (ops.def's Functor16 column, through gemm_epilogue.cuh's GeluErfFast), written
// as plain C++ so that the host compiles it too (patterns/gemm/tests/test_kind_gelu_erf_fast.cpp
// checks it against a float64 erf-GELU). Float32 outputs keep CUTLASS's erff-based GELU.
//
//   t = min(|x|, 13.25)
//   Q = Φ(−t) = S(u) · 2^(−c·t²),  u = 1 / (1 + p·t),  c = log2(e)/2,  S a degree-7 polynomial
//   gelu(x) = max(x, −0) − t·Q      (x ≥ 0: x·(1 − Q) = x·Φ(x);  x < 0: −t·Q = x·Φ(x))
//
// S is the minimax fit of Φ(−t)·2^(c·t²) in RELATIVE error over t in [0, 13.25], so Φ is
// relatively accurate in the negative tail as well (where gelu(x) = x·Q); erff-based forms lose
// it there to the cancellation in 1 + erf. One branch-free range: no select between polynomials.
// Coefficients: patterns/gemm/epilogue/tools/fit_gelu_erf_fast.py (fit error 3.1e-7 relative
// with these float32 values). Past t = 13.25, 2^(−c·t²) < 2^−126, which ex2.approx.ftz flushes
// to zero: gelu(x) is then x (x > 0) or −0 (x < 0); ±inf give +inf and −0, NaN gives NaN (the
// clamp keeps t·Q finite; max.NaN passes the NaN).
//
// On the device: one rcp.approx.ftz, one ex2.approx.ftz, nine FMAs, three multiplies, abs, min
// and max: 17 PTX instructions against erff's 28 (patterns/gemm/README.md, "erf-GELU epilogue
// cost", has the counts and the measured accuracy). On the host: 1/a and exp2f (flushed to zero below FLT_MIN like the device).
#pragma once
#include <float.h>
#include <math.h>

// FACT_HD as op_formulas.h spells it (the same tokens: either header may come first).
#ifndef FACT_HD
#if defined(__CUDACC__)
#define FACT_HD __host__ __device__
#else
#define FACT_HD
#endif
#endif

namespace fact::gemm::approx {

namespace gelu_erf_fast_detail {

constexpr float kP = 0.3484143018722534f;           // u = 1 / (1 + kP·t)
constexpr float kExp2Scale = 0.7213475108146667f;   // log2(e) / 2
constexpr float kTMax = 13.25f;                     // 2^(−kExp2Scale·kTMax²) < 2^−126
// −S(u) = kS0 + kS1·u + ... + kS7·u^7 (negated: the caller adds t·(−Q), no negation)
constexpr float kS0 = 3.2785694202175364e-05f;
constexpr float kS1 = -0.13973847031593323f;
constexpr float kS2 = -0.13195984065532684f;
constexpr float kS3 = -0.15860077738761902f;
constexpr float kS4 = 0.023734500631690025f;
constexpr float kS5 = -0.2492489516735077f;
constexpr float kS6 = 0.20473887026309967f;
constexpr float kS7 = -0.04895825684070587f;

FACT_HD inline float reciprocal(float a) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
  return r;
#else
  return 1.0f / a;
#endif
}

// 2^a, zero where the result is below FLT_MIN (as ex2.approx.ftz).
FACT_HD inline float exp2_ftz(float a) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
  return r;
#else
  const float r = exp2f(a);
  return r < FLT_MIN ? 0.0f : r;
#endif
}

// max(x, −0) with NaN passed through (x < 0 and −0 give −0).
FACT_HD inline float relu_keep_nan(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(-0.0f));
  return r;
#else
  return x < 0.0f ? -0.0f : x;
#endif
}

}  // namespace gelu_erf_fast_detail

// −Φ(−t) for 0 <= t <= 13.25 (what gelu_erf_fast adds t times): relative error about 3e-7
// from S, plus the float rounding of the exponent (two roundings of c·t²).
FACT_HD inline float negated_normal_tail_fast(float t) {
  using namespace gelu_erf_fast_detail;
  const float u = reciprocal(fmaf(kP, t, 1.0f));
  float s = fmaf(kS7, u, kS6);
  s = fmaf(s, u, kS5);
  s = fmaf(s, u, kS4);
  s = fmaf(s, u, kS3);
  s = fmaf(s, u, kS2);
  s = fmaf(s, u, kS1);
  s = fmaf(s, u, kS0);
  return s * exp2_ftz((t * t) * -kExp2Scale);
}

// x·Φ(x), Φ the standard normal distribution: 0.5·x·(1 + erf(x/√2)).
FACT_HD inline float gelu_erf_fast(float x) {
  using namespace gelu_erf_fast_detail;
  const float t = fminf(fabsf(x), kTMax);  // a NaN x: t = kTMax, the max below passes the NaN
  return fmaf(t, negated_normal_tail_fast(t), relu_keep_nan(x));
}

}  // namespace fact::gemm::approx
