// GemmProblem -> KernelSpec: dtypes and math modes per precision, alignments, epilogue steps.
#include <stdexcept>

#include <gtest/gtest.h>

#include "fact/realize/render.hpp"
#include "fact/realize/spec_from_problem.hpp"

namespace fact::realize {
namespace {

using discover::GemmOperand;
using discover::GemmProblem;
using Kind = EpilogueStep::Kind;

// nn.Linear on [m, k] input with a [n, k] weight: A row-major, B column-major, D row-major.
GemmProblem linear(int64_t m, int64_t n, int64_t k, DType dtype) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = GemmOperand{"x", dtype, Layout::RowMajor, k, 0};
  p.b = GemmOperand{"w", dtype, Layout::ColumnMajor, k, 0};
  p.d = GemmOperand{"y", dtype, Layout::RowMajor, n, 0};
  return p;
}

EpilogueStep step(Kind kind, Activation act = Activation::Identity, DType operand = DType::Unknown) {
  EpilogueStep s;
  s.kind = kind;
  s.activation = act;
  s.operand_dtype = operand;
  return s;
}

TEST(MathMode, FollowsThePrecisionContract) {
  EXPECT_EQ(math_mode_for(DType::BFloat16, "strict"), MathMode::Native);
  EXPECT_EQ(math_mode_for(DType::Float16, "tf32"), MathMode::Native);
  EXPECT_EQ(math_mode_for(DType::Float32, "strict"), MathMode::Tf32x3);
  EXPECT_EQ(math_mode_for(DType::Float32, "tf32"), MathMode::Tf32);
  EXPECT_EQ(math_mode_for(DType::Float32, "native"), MathMode::Tf32x3);
  EXPECT_THROW(math_mode_for(DType::Float32, "fast"), std::invalid_argument);
  EXPECT_THROW(math_mode_for(DType::Int8, "strict"), std::invalid_argument);
}

TEST(OperandAlignment, IsTheLargestDividingPowerOfTwo) {
  GemmOperand a{"a", DType::BFloat16, Layout::RowMajor, 4096, 0};
  EXPECT_EQ(operand_alignment(a, 128, 4096, 1), 8);
  a.ld = 4100;  // 4100 = 4 * 1025
  EXPECT_EQ(operand_alignment(a, 128, 4100, 1), 4);
  a.ld = 4096;
  EXPECT_EQ(operand_alignment(a, 128, 4094, 1), 2);  // contiguous extent K = 4094
  GemmOperand f{"f", DType::Float32, Layout::ColumnMajor, 1024, 1024 * 3};
  EXPECT_EQ(operand_alignment(f, 1024, 3, 4), 4);  // column-major: rows are contiguous
  f.batch_stride = 1026;
  EXPECT_EQ(operand_alignment(f, 1024, 3, 4), 2);
}

TEST(SpecFromProblem, Bf16LinearWithBiasAndGelu) {
  GemmProblem p = linear(8192, 3072, 768, DType::BFloat16);
  p.epilogue = {step(Kind::Bias, Activation::Identity, DType::BFloat16),
                step(Kind::Activation, Activation::GeluTanh)};
  const KernelSpec s = spec_from_problem(p, "strict");
  EXPECT_EQ(s.pattern, "gemm");
  EXPECT_EQ(s.a_dtype, DType::BFloat16);
  EXPECT_EQ(s.math, MathMode::Native);
  EXPECT_EQ(s.a_layout, Layout::RowMajor);
  EXPECT_EQ(s.b_layout, Layout::ColumnMajor);
  EXPECT_EQ(s.align_a, 8);
  EXPECT_FALSE(s.batched);
  ASSERT_EQ(s.epilogue.size(), 2u);
  EXPECT_EQ(s.epilogue[0].kind, Kind::Bias);
  EXPECT_EQ(s.epilogue[0].operand_dtype, DType::BFloat16);
  EXPECT_EQ(s.epilogue[1].activation, Activation::GeluTanh);
  // Large problem with an epilogue: the 128x128 ping-pong tile with a 1x2 cluster (the measured
  // winner for the minGPT epilogue GEMMs on an H200).
  EXPECT_EQ(s.tile, (Shape3{128, 128, 64}));
  EXPECT_EQ(s.mainloop, MainloopSchedule::Pingpong);
  EXPECT_EQ(s.name(), "gemm_bias_gelu_tanh_bf16_tn_128x128x64_c1x2_pp_persistent");
  EXPECT_NO_THROW(render_kernel(s));
}

TEST(SpecFromProblem, DefaultTilesFollowTheProblemSize) {
  EXPECT_EQ(spec_from_problem(linear(1024, 1024, 1024, DType::BFloat16), "strict").tile,
            (Shape3{128, 128, 64}));
  const KernelSpec small_m = spec_from_problem(linear(32, 4096, 4096, DType::Float16), "strict");
  EXPECT_EQ(small_m.tile, (Shape3{64, 128, 64}));
  EXPECT_EQ(small_m.mainloop, MainloopSchedule::Pingpong);
}

TEST(SpecFromProblem, Float32UnderTf32IsTf32WithThirtyTwoWideK) {
  GemmProblem p = linear(4096, 4096, 4096, DType::Float32);
  p.batch = 8;
  p.a.batch_stride = 4096 * 4096;
  p.b.batch_stride = 4096 * 4096;
  p.d.batch_stride = 4096 * 4096;
  const KernelSpec s = spec_from_problem(p, "tf32");
  EXPECT_EQ(s.math, MathMode::Tf32);
  EXPECT_TRUE(s.batched);
  EXPECT_EQ(s.align_a, 4);
  EXPECT_EQ(s.tile.k, 32);
  EXPECT_NO_THROW(render_kernel(s));
}

TEST(SpecFromProblem, StrictFloat32GoesToTheStrictPattern) {
  GemmProblem p = linear(4096, 4096, 4096, DType::Float32);
  const KernelSpec s = spec_from_problem(p, "strict");
  EXPECT_EQ(s.math, MathMode::Tf32x3);
  EXPECT_EQ(s.pattern, "gemm_f32_strict");
  EXPECT_NO_THROW(render_kernel(s));
  // The strict kernels fuse bias + activation (the first candidate).
  p.epilogue = {step(Kind::Bias, Activation::Identity, DType::Float32),
                step(Kind::Activation, Activation::ReLU)};
  const KernelSpec fused = spec_from_problem(p, "strict");
  EXPECT_EQ(fused.pattern, "gemm_f32_strict");
  EXPECT_EQ(fused.epilogue.size(), 2u);
  EXPECT_NO_THROW(render_kernel(fused));
  // An epilogue they cannot fuse (a bf16 bias) keeps the pattern; rendering says why.
  p.epilogue = {step(Kind::Bias, Activation::Identity, DType::BFloat16)};
  const KernelSpec refused = spec_from_problem(p, "strict");
  EXPECT_EQ(refused.pattern, "gemm_f32_strict");
  EXPECT_THROW(render_kernel(refused), RenderError);
}

TEST(SpecFromProblem, FoldsLeadingScalesAndDropsIdentity) {
  GemmProblem p = linear(512, 512, 512, DType::BFloat16);
  p.epilogue = {step(Kind::Scale), step(Kind::Activation, Activation::Identity),
                step(Kind::Residual, Activation::Identity, DType::BFloat16)};
  const KernelSpec s = spec_from_problem(p, "native");
  ASSERT_EQ(s.epilogue.size(), 1u);
  EXPECT_EQ(s.epilogue[0].kind, Kind::Residual);
}

TEST(SpecFromProblem, RefusesWhatAKernelCannotExpress) {
  GemmProblem late_scale = linear(512, 512, 512, DType::BFloat16);
  late_scale.epilogue = {step(Kind::Activation, Activation::ReLU), step(Kind::Scale)};
  EXPECT_THROW(spec_from_problem(late_scale, "strict"), std::invalid_argument);

  GemmProblem two_sources = linear(512, 512, 512, DType::BFloat16);
  two_sources.epilogue = {step(Kind::Residual, Activation::Identity, DType::BFloat16),
                          step(Kind::Multiply, Activation::Identity, DType::BFloat16)};
  EXPECT_THROW(spec_from_problem(two_sources, "strict"), std::invalid_argument);

  GemmProblem mixed = linear(512, 512, 512, DType::BFloat16);
  mixed.b.dtype = DType::Float32;
  EXPECT_THROW(spec_from_problem(mixed, "strict"), std::invalid_argument);

  EXPECT_THROW(spec_from_problem(linear(512, 512, 512, DType::BFloat16), "fast"),
               std::invalid_argument);
}

TEST(SpecFromProblem, UnalignedOperandsAreRecordedAndRefusedByTheTemplate) {
  GemmProblem p = linear(512, 512, 510, DType::BFloat16);  // K = 510: rows of A 4-byte aligned
  const KernelSpec s = spec_from_problem(p, "strict");
  EXPECT_EQ(s.align_a, 2);
  EXPECT_THROW(render_kernel(s), RenderError);
}

}  // namespace
}  // namespace fact::realize
