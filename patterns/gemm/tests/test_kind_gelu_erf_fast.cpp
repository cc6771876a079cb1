// The fast erf-GELU (patterns/gemm/epilogue/gelu_erf_fast.h, the device functor of the gelu_erf
// activation for 16-bit outputs) compiled for the host, against a float64 erf-GELU written with
// erfc (relatively accurate in the negative tail, where 1 + erf cancels):
//   - every FACT_GELU_ERF_STRIDE-th float bit pattern in [-10, 10] (default 37: about 59 million
//     values; FACT_GELU_ERF_STRIDE=1 walks all 2.2 billion, a few minutes), and a coarse walk over
//     every finite float: max |Φ_fast − Φ| ≤ 2e-6, and GELU's relative error ≤ 1e-5 wherever
//     |gelu(x)| ≥ 1e-30 (below that, an absolute 1e-30);
//   - the special values: ±0 keep their sign, +inf gives +inf, −inf and x below −13.25 give −0,
//     NaN gives NaN, subnormal x gives x/2.
// The host evaluates 1/a and exp2f where the device uses rcp.approx.ftz and ex2.approx.ftz (a few
// float ulp each): the device's figures differ by an estimated few 1e-7 relative.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "patterns/gemm/epilogue/gelu_erf_fast.h"
#include "patterns/gemm/epilogue/op_formulas.h"

namespace fact::gemm {
namespace {

using approx::gelu_erf_fast;

float float_of(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Φ(x) in float64, relatively accurate for negative x.
double phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

// Φ as the functor computes it: 1 + (−Q) for x >= 0, −(−Q) below, Q = Φ(−min(|x|, 13.25)).
double phi_fast(float x) {
  const float t = std::fmin(std::fabs(x), approx::gelu_erf_fast_detail::kTMax);
  const double negated_tail = approx::negated_normal_tail_fast(t);
  return x >= 0.0f ? 1.0 + negated_tail : -negated_tail;
}

struct Worst {
  double phi_abs = 0, gelu_rel = 0, tiny_abs = 0;
  float phi_at = 0, gelu_at = 0;
  uint64_t samples = 0;

  void check(float x) {
    ++samples;
    const double reference_phi = phi(x);
    const double phi_error = std::fabs(phi_fast(x) - reference_phi);
    if (phi_error > phi_abs) phi_abs = phi_error, phi_at = x;
    const double reference = static_cast<double>(x) * reference_phi;
    const double got = gelu_erf_fast(x);
    if (std::fabs(reference) >= 1e-30) {
      const double rel = std::fabs(got - reference) / std::fabs(reference);
      if (!(rel <= gelu_rel)) gelu_rel = rel, gelu_at = x;  // a NaN sticks
    } else {
      tiny_abs = std::fmax(tiny_abs, std::fabs(got - reference));
    }
  }
};

constexpr double kPhiBound = 2e-6;
constexpr double kGeluRelativeBound = 1e-5;
constexpr double kTinyBound = 1e-30;

uint32_t stride_from_environment() {
  const char* s = std::getenv("FACT_GELU_ERF_STRIDE");
  const long v = s ? std::strtol(s, nullptr, 10) : 0;
  return v >= 1 ? static_cast<uint32_t>(v) : 37u;
}

TEST(GeluErfFast, DenseFloatsInMinusTenToTenMeetTheBounds) {
  const uint32_t stride = stride_from_environment();
  Worst worst;
  // Non-negative floats from +0 to 10, then each one's negative.
  const uint32_t last = bits_of(10.0f);
  for (uint32_t b = 0; b <= last; b += stride) {
    worst.check(float_of(b));
    worst.check(float_of(b | 0x80000000u));
  }
  worst.check(10.0f);
  worst.check(-10.0f);
  std::printf("[gelu_erf_fast] stride %u, %llu values in [-10, 10]: max |Phi err| %.3g at x=%.9g, "
              "max GELU rel err (|gelu| >= 1e-30) %.3g at x=%.9g, max abs err below 1e-30 %.3g\n",
              stride, static_cast<unsigned long long>(worst.samples), worst.phi_abs,
              worst.phi_at, worst.gelu_rel, worst.gelu_at, worst.tiny_abs);
  EXPECT_GE(worst.samples, 50'000'000u);
  EXPECT_LE(worst.phi_abs, kPhiBound) << "at x = " << worst.phi_at;
  EXPECT_LE(worst.gelu_rel, kGeluRelativeBound) << "at x = " << worst.gelu_at;
  EXPECT_LE(worst.tiny_abs, kTinyBound);
}

TEST(GeluErfFast, EveryFiniteFloatCoarselyMeetsTheBounds) {
  Worst worst;
  for (uint64_t b = 0; b < 0x7f800000u; b += 997) {
    worst.check(float_of(static_cast<uint32_t>(b)));
    worst.check(float_of(static_cast<uint32_t>(b) | 0x80000000u));
  }
  worst.check(FLT_MAX);
  worst.check(-FLT_MAX);
  std::printf("[gelu_erf_fast] %llu finite floats: max |Phi err| %.3g at x=%.9g, max GELU rel err "
              "%.3g at x=%.9g\n",
              static_cast<unsigned long long>(worst.samples), worst.phi_abs, worst.phi_at,
              worst.gelu_rel, worst.gelu_at);
  EXPECT_LE(worst.phi_abs, kPhiBound) << "at x = " << worst.phi_at;
  EXPECT_LE(worst.gelu_rel, kGeluRelativeBound) << "at x = " << worst.gelu_at;
  EXPECT_LE(worst.tiny_abs, kTinyBound);
}

TEST(GeluErfFast, SpecialValues) {
  const float inf = INFINITY;
  EXPECT_EQ(bits_of(gelu_erf_fast(0.0f)), bits_of(0.0f));
  EXPECT_EQ(bits_of(gelu_erf_fast(-0.0f)), bits_of(-0.0f));
  EXPECT_EQ(gelu_erf_fast(inf), inf);
  EXPECT_EQ(bits_of(gelu_erf_fast(-inf)), bits_of(-0.0f));
  EXPECT_TRUE(std::isnan(gelu_erf_fast(NAN)));
  EXPECT_TRUE(std::isnan(gelu_erf_fast(-NAN)));
  EXPECT_EQ(gelu_erf_fast(FLT_MAX), FLT_MAX);
  EXPECT_EQ(gelu_erf_fast(1e30f), 1e30f);
  EXPECT_EQ(gelu_erf_fast(13.5f), 13.5f);
  for (float x : {-13.5f, -20.0f, -1e30f, -FLT_MAX}) {
    EXPECT_EQ(bits_of(gelu_erf_fast(x)), bits_of(-0.0f)) << x;
  }
  // Subnormal and tiny inputs: gelu(x) = x/2 to first order.
  for (float x : {1e-40f, -1e-40f, FLT_MIN, -FLT_MIN, 1e-20f, -1e-20f}) {
    EXPECT_NEAR(gelu_erf_fast(x) / x, 0.5, 1e-6) << x;
  }
  // The functor against the float64 reference of ops.def's GELU_ERF entry where 1 + erf does not
  // cancel (that reference's relative accuracy ends in the negative tail).
  for (float x : {-3.0f, -1.0f, -0.5f, 0.25f, 1.0f, 2.0f, 5.0f}) {
    const double reference = ops::GeluErf::apply<double>(x, 0.0, 0.0);
    EXPECT_NEAR(gelu_erf_fast(x), reference, 2e-6 * std::fabs(x) + 1e-7) << x;
  }
}

}  // namespace
}  // namespace fact::gemm
