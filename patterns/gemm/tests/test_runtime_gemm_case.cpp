// The GEMM runtime's cases (no GPU): a kernel's spec joined with a problem's sizes and
// constants, the adversarial constants of the `scalars` check, baseline specs, and the precision
// contract's check of a kernel against a mode.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "patterns/gemm/kind/pack.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/runtime/gemm_case.hpp"

namespace fact::gemm {
namespace {

using Kind = EpilogueStep::Kind;

GemmSpec bf16_spec(std::vector<EpilogueOpSpec> epilogue = {}) {
  GemmSpec spec;
  spec.a_dtype = spec.b_dtype = spec.d_dtype = DType::BFloat16;
  spec.a_layout = Layout::RowMajor;
  spec.b_layout = Layout::ColumnMajor;
  spec.epilogue = std::move(epilogue);
  return spec;
}

EpilogueOpSpec op(Kind kind, Activation act = Activation::Identity, DType dtype = DType::Unknown) {
  EpilogueOpSpec o;
  o.kind = kind;
  o.activation = act;
  o.operand_dtype = dtype;
  return o;
}

GemmProblem sizes(int64_t m, int64_t n, int64_t k, int64_t batch = 1) {
  return make_gemm_problem({m, n, k, batch}, DType::BFloat16, "", "tn");
}

EpilogueStep step(Kind kind, double value = 1.0, Activation act = Activation::Identity,
                  double p0 = 0.0, double p1 = 0.0) {
  EpilogueStep s;
  s.kind = kind;
  s.value = value;
  s.activation = act;
  s.p0 = p0;
  s.p1 = p1;
  return s;
}

TEST(GemmCase, CompactOperandsFollowTheLayouts) {
  GemmSpec spec = bf16_spec();
  spec.batched = true;
  const GemmCase c = make_gemm_case(spec, sizes(64, 32, 16, 4), PrecisionMode::Native);
  const auto& p = c.problem;
  EXPECT_EQ(p.a.ld, 16);  // row-major M×K
  EXPECT_EQ(p.b.ld, 16);  // column-major K×N
  EXPECT_EQ(p.d.ld, 32);  // row-major M×N
  EXPECT_EQ(p.a.batch_stride, 64 * 16);
  EXPECT_EQ(p.b.batch_stride, 16 * 32);
  EXPECT_EQ(p.d.batch_stride, 64 * 32);
  EXPECT_EQ(p.batch, 4);
  EXPECT_EQ(c.math, MathMode::Native);

  spec.a_layout = Layout::ColumnMajor;
  spec.b_layout = Layout::RowMajor;
  spec.d_layout = Layout::ColumnMajor;
  const GemmCase t = make_gemm_case(spec, sizes(64, 32, 16), PrecisionMode::Native);
  EXPECT_EQ(t.problem.a.ld, 64);
  EXPECT_EQ(t.problem.b.ld, 32);
  EXPECT_EQ(t.problem.d.ld, 64);
}

// Every operand step gets its own buffer name, dtype, leading dimension and batch stride; the
// call packed from the case (pack.cpp's gemm_args) carries them step by step.
TEST(GemmCase, EveryOperandStepIsItsOwnOperand) {
  GemmSpec spec = bf16_spec({op(Kind::Bias, Activation::Identity, DType::Float32),
                             op(Kind::Activation, Activation::LeakyReLU), op(Kind::Residual),
                             op(Kind::Multiply, Activation::Identity, DType::Float16),
                             op(Kind::Bias)});
  spec.batched = true;
  const GemmCase c = make_gemm_case(spec, sizes(8, 16, 8, 2), PrecisionMode::Native);
  const auto& steps = c.problem.epilogue;
  ASSERT_EQ(steps.size(), 5u);
  std::set<std::string> names;
  for (const auto& s : steps) {
    if (reads_operand(s.kind)) EXPECT_TRUE(names.insert(s.operand).second) << s.operand;
  }
  EXPECT_EQ(names.size(), 4u);
  EXPECT_EQ(steps[0].operand_dtype, DType::Float32);
  EXPECT_EQ(steps[0].operand_batch_stride, 0);  // one bias for every batch
  EXPECT_EQ(steps[2].operand_dtype, DType::BFloat16);  // defaults to D's dtype
  EXPECT_EQ(steps[2].operand_ld, 16);
  EXPECT_EQ(steps[2].operand_batch_stride, 8 * 16);
  EXPECT_EQ(steps[3].operand_dtype, DType::Float16);
  const FactGemmArgs args = gemm_args(c.problem);
  EXPECT_EQ(args.num_steps, 5);
  EXPECT_EQ(args.steps[1].kind, FACT_STEP_ACTIVATION);
  EXPECT_EQ(args.steps[1].activation, FACT_ACT_LEAKY_RELU);
  EXPECT_FLOAT_EQ(args.steps[1].p0, 0.01f);
  EXPECT_EQ(args.steps[3].operand_type, FACT_DTYPE_F16);
  EXPECT_EQ(args.steps[3].ld, 16);
  EXPECT_EQ(args.steps[3].batch_stride, 8 * 16);
  EXPECT_EQ(args.steps[4].operand_type, FACT_DTYPE_BF16);
}

// The problem's own constants when its kernel epilogue has the spec's steps (hardtanh then gelu:
// the two activations keep their own parameters), its alpha always.
TEST(GemmCase, ConstantsComeFromTheProblemStepByStep) {
  GemmProblem issue = sizes(8, 8, 8);
  issue.alpha = 2.0;
  issue.epilogue = {step(Kind::Scale, 0.25), step(Kind::Bias), step(Kind::Scale, 0.5),
                    step(Kind::Activation, 1.0, Activation::HardTanh, -2.0, 2.0),
                    step(Kind::Activation, 1.0, Activation::GeluErf)};
  const GemmSpec spec = bf16_spec({op(Kind::Bias), op(Kind::Scale),
                                   op(Kind::Activation, Activation::HardTanh),
                                   op(Kind::Activation, Activation::GeluErf)});
  const GemmCase c = make_gemm_case(spec, issue, PrecisionMode::Native);
  EXPECT_EQ(c.problem.alpha, 0.5);  // 2 · the leading scale 0.25
  const auto& steps = c.problem.epilogue;
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[1].value, 0.5);
  EXPECT_EQ(steps[2].p0, -2.0);
  EXPECT_EQ(steps[2].p1, 2.0);
  EXPECT_EQ(steps[3].p0, 0.0);
  EXPECT_EQ(steps[3].p1, 0.0);

  // A one-sided clamp keeps its infinite bound.
  GemmProblem clamp = sizes(8, 8, 8);
  clamp.epilogue = {step(Kind::Activation, 1.0, Activation::HardTanh, 0.0,
                         std::numeric_limits<double>::infinity())};
  const GemmCase one_sided = make_gemm_case(bf16_spec({op(Kind::Activation, Activation::HardTanh)}),
                                            clamp, PrecisionMode::Native);
  EXPECT_TRUE(std::isinf(one_sided.problem.epilogue[0].p1));

  // Steps of other kinds than the spec's: the stand-in constants.
  const GemmCase d = make_gemm_case(
      bf16_spec({op(Kind::Activation, Activation::HardTanh), op(Kind::Scale), op(Kind::AddScalar)}),
      sizes(8, 8, 8), PrecisionMode::Native);
  EXPECT_EQ(d.problem.epilogue[0].p0, -1.0);
  EXPECT_EQ(d.problem.epilogue[0].p1, 1.0);
  EXPECT_EQ(d.problem.epilogue[1].value, 0.5);
  EXPECT_EQ(d.problem.epilogue[2].value, 1.0);
}

TEST(GemmCase, RejectsWhatTheKernelCannotRun) {
  EXPECT_THROW(make_gemm_case(bf16_spec(), sizes(8, 8, 8, 2), PrecisionMode::Native),
               std::invalid_argument);  // not batched
  GemmSpec int_out = bf16_spec();
  int_out.d_dtype = DType::Int8;
  EXPECT_THROW(make_gemm_case(int_out, sizes(8, 8, 8), PrecisionMode::Native), std::invalid_argument);
  // A spec epilogue not in kernel form: a leading scale is alpha, not a step.
  EXPECT_THROW(make_gemm_case(bf16_spec({op(Kind::Scale), op(Kind::Bias)}), sizes(8, 8, 8),
                              PrecisionMode::Native),
               std::invalid_argument);
  GemmSpec nine = bf16_spec(std::vector<EpilogueOpSpec>(9, op(Kind::AddScalar)));
  EXPECT_THROW(make_gemm_case(nine, sizes(8, 8, 8), PrecisionMode::Native), std::invalid_argument);
  // Two M×N operands and a scale after other steps are fine (ABI v2).
  EXPECT_NO_THROW(make_gemm_case(bf16_spec({op(Kind::Residual), op(Kind::Multiply), op(Kind::Scale)}),
                                 sizes(8, 8, 8), PrecisionMode::Native));
}

// The `scalars` check changes every constant, to values distinct per step and from every
// default: a kernel reading the wrong step's constant or none computes something else.
TEST(GemmCase, AdversarialConstantsDifferPerStepAndFromEveryDefault) {
  const GemmSpec spec = bf16_spec({op(Kind::Scale), op(Kind::Activation, Activation::LeakyReLU),
                                   op(Kind::Residual), op(Kind::Scale), op(Kind::AddScalar),
                                   op(Kind::Activation, Activation::HardTanh), op(Kind::Residual),
                                   op(Kind::Activation, Activation::HardTanh)});
  GemmProblem given = sizes(8, 8, 8);
  given.epilogue = {step(Kind::Bias)};  // kinds differ: stand-in constants
  // A leading Scale is alpha: start the spec with a bias.
  GemmSpec with_bias = spec;
  with_bias.epilogue.insert(with_bias.epilogue.begin(), op(Kind::Bias));
  with_bias.epilogue.pop_back();
  const GemmCase c = make_gemm_case(with_bias, given, PrecisionMode::Native);
  const GemmCase a = with_adversarial_constants(c);
  EXPECT_LT(a.problem.alpha, 0.0);
  std::set<double> values;
  for (size_t i = 0; i < a.problem.epilogue.size(); ++i) {
    const EpilogueStep& before = c.problem.epilogue[i];
    const EpilogueStep& after = a.problem.epilogue[i];
    switch (after.kind) {
      case Kind::Scale:
      case Kind::AddScalar:
      case Kind::Residual:
      case Kind::Bias:  // its multiplier
        EXPECT_NE(after.value, before.value) << i;
        EXPECT_TRUE(values.insert(after.value).second) << "step " << i << " shares its constant";
        break;
      case Kind::Activation:
        EXPECT_NE(after.p0, before.p0) << i;
        if (after.activation == Activation::HardTanh) {
          EXPECT_NE(after.p1, before.p1) << i;
          EXPECT_LT(after.p0, after.p1);
        }
        EXPECT_TRUE(values.insert(after.p0).second) << "step " << i << " shares its p0";
        break;
      default:
        break;
    }
  }
  // For a launcher that fuses a bias only at multiplier 1 (cuBLASLt) the bias keeps its
  // multiplier; every other constant still changes.
  const GemmCase fixed_bias = with_adversarial_constants(c, /*vary_bias_multiplier=*/false);
  EXPECT_EQ(fixed_bias.problem.alpha, a.problem.alpha);
  for (size_t i = 0; i < fixed_bias.problem.epilogue.size(); ++i) {
    const EpilogueStep& step = fixed_bias.problem.epilogue[i];
    if (step.kind == Kind::Bias) {
      EXPECT_EQ(step.value, c.problem.epilogue[i].value) << i;
    } else {
      EXPECT_EQ(step.value, a.problem.epilogue[i].value) << i;
      EXPECT_EQ(step.p0, a.problem.epilogue[i].p0) << i;
    }
  }
}

TEST(GemmCase, TwoBatchModesGetCompactOuterStrides) {
  GemmSpec spec = bf16_spec({op(Kind::Bias), op(Kind::Residual)});
  spec.batched = true;
  GemmProblem given = make_gemm_problem({64, 32, 16, 4, 3}, DType::BFloat16, "", "tn");
  const GemmCase c = make_gemm_case(spec, given, PrecisionMode::Native);
  const GemmProblem& p = c.problem;
  EXPECT_EQ(p.batch, 4);
  EXPECT_EQ(p.outer_batch, 3);
  EXPECT_EQ(p.a.batch_stride, 64 * 16);
  EXPECT_EQ(p.a.outer_batch_stride, 4 * 64 * 16);
  EXPECT_EQ(p.b.outer_batch_stride, 4 * 16 * 32);
  EXPECT_EQ(p.d.outer_batch_stride, 4 * 64 * 32);
  EXPECT_EQ(p.epilogue[0].operand_outer_batch_stride, 0);  // one bias for every batch
  EXPECT_EQ(p.epilogue[1].operand_batch_stride, 64 * 32);
  EXPECT_EQ(p.epilogue[1].operand_outer_batch_stride, 4 * 64 * 32);
  const FactGemmArgs args = gemm_args(p);
  EXPECT_EQ(args.outer_batch, 3);
  EXPECT_EQ(args.outer_stride_a, 4 * 64 * 16);
  EXPECT_EQ(args.steps[1].outer_batch_stride, 4 * 64 * 32);
  EXPECT_DOUBLE_EQ(p.flops(), 2.0 * 64 * 32 * 16 * 12);
  // What a baseline with one batch mode runs: the compact modes merged.
  const GemmProblem one = as_one_batch_mode(p);
  EXPECT_EQ(one.batch, 12);
  EXPECT_EQ(one.outer_batch, 1);
  EXPECT_EQ(one.a.batch_stride, 64 * 16);
  EXPECT_EQ(one.a.outer_batch_stride, 0);
  EXPECT_EQ(one.epilogue[1].operand_batch_stride, 64 * 32);
  EXPECT_EQ(one.epilogue[0].operand_batch_stride, 0);
  GemmProblem heads_major = p;  // [batch][outer] order: no one stride walks both
  heads_major.a.batch_stride = 3 * 64 * 16;
  heads_major.a.outer_batch_stride = 64 * 16;
  EXPECT_THROW(as_one_batch_mode(heads_major), std::invalid_argument);
}

TEST(GemmCase, EpiloguePrefix) {
  const GemmCase c = make_gemm_case(
      bf16_spec({op(Kind::Bias), op(Kind::Activation, Activation::ReLU), op(Kind::Residual)}),
      sizes(8, 8, 8), PrecisionMode::Native);
  EXPECT_EQ(with_epilogue_prefix(c.problem, 2).epilogue.size(), 2u);
  EXPECT_EQ(with_epilogue_prefix(c.problem, 0).fusion_name(), "gemm");
  EXPECT_EQ(with_epilogue_prefix(c.problem, 9).epilogue.size(), 3u);
}

TEST(GemmCase, BaselineSpecFollowsPrecision) {
  const GemmProblem fp32 = make_gemm_problem({64, 64, 64, 1}, DType::Float32, "", "tn");
  const GemmSpec strict = baseline_spec(fp32, PrecisionMode::Strict);
  EXPECT_EQ(strict.math, MathMode::Simt);
  EXPECT_EQ(strict.d_dtype, DType::Float32);
  const GemmSpec tf32 =
      baseline_spec(make_gemm_problem({64, 64, 64, 3}, DType::Float32, "", "tt"), PrecisionMode::Tf32);
  EXPECT_EQ(tf32.math, MathMode::Tf32);
  EXPECT_TRUE(tf32.batched);
  EXPECT_EQ(tf32.b_layout, Layout::RowMajor);
  const GemmSpec bf16 = baseline_spec(
      make_gemm_problem({64, 64, 64, 1}, DType::BFloat16, "bias,scale,gelu_erf", "tn"),
      PrecisionMode::Native);
  EXPECT_EQ(bf16.math, MathMode::Native);
  EXPECT_EQ(bf16.epilogue.size(), 3u);
  EXPECT_FALSE(precision_mismatch(bf16, PrecisionMode::Native));
  EXPECT_FALSE(precision_mismatch(strict, PrecisionMode::Strict));
}

GemmSpec spec_of(DType operands, MathMode math, DType out = DType::Float32) {
  GemmSpec spec;
  spec.a_dtype = spec.b_dtype = operands;
  spec.d_dtype = out;
  spec.math = math;
  return spec;
}

TEST(PrecisionMismatch, StrictAcceptsOnlyFloat32AccurateMath) {
  EXPECT_FALSE(precision_mismatch(spec_of(DType::Float32, MathMode::Tf32x3), PrecisionMode::Strict));
  EXPECT_FALSE(precision_mismatch(spec_of(DType::Float32, MathMode::Simt), PrecisionMode::Strict));
  const auto tf32 = precision_mismatch(spec_of(DType::Float32, MathMode::Tf32), PrecisionMode::Strict);
  ASSERT_TRUE(tf32);
  EXPECT_NE(tf32->find("tf32"), std::string::npos);
  EXPECT_TRUE(precision_mismatch(spec_of(DType::BFloat16, MathMode::Native), PrecisionMode::Strict));
}

TEST(PrecisionMismatch, Tf32AcceptsTf32AndStricter) {
  for (MathMode m : {MathMode::Tf32, MathMode::Tf32x3, MathMode::Simt}) {
    EXPECT_FALSE(precision_mismatch(spec_of(DType::Float32, m), PrecisionMode::Tf32));
  }
  EXPECT_TRUE(precision_mismatch(spec_of(DType::Float32, MathMode::Native), PrecisionMode::Tf32));
  EXPECT_TRUE(precision_mismatch(spec_of(DType::Float16, MathMode::Native), PrecisionMode::Tf32));
}

TEST(PrecisionMismatch, NativeIsForHalfOperands) {
  EXPECT_FALSE(precision_mismatch(spec_of(DType::BFloat16, MathMode::Native, DType::BFloat16),
                                  PrecisionMode::Native));
  EXPECT_FALSE(precision_mismatch(spec_of(DType::Float16, MathMode::Native), PrecisionMode::Native));
  EXPECT_TRUE(precision_mismatch(spec_of(DType::Float32, MathMode::Tf32), PrecisionMode::Native));
  EXPECT_TRUE(precision_mismatch(spec_of(DType::BFloat16, MathMode::Tf32), PrecisionMode::Native));
}

TEST(PrecisionMismatch, HalfAccumulationIsRejectedEverywhere) {
  GemmSpec spec = spec_of(DType::Float16, MathMode::Native, DType::Float16);
  spec.accumulate = DType::Float16;
  const auto why = precision_mismatch(spec, PrecisionMode::Native);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("accumulat"), std::string::npos);
}

}  // namespace
}  // namespace fact::gemm
