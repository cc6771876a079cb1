#include <gtest/gtest.h>

#include "fact/runtime/gemm_case.hpp"

namespace fact::runtime {
namespace {

using discover::Activation;
using discover::Layout;
using graph::DType;
using realize::EpilogueOpSpec;
using realize::KernelSpec;
using Kind = discover::EpilogueStep::Kind;

KernelSpec bf16_spec(std::vector<EpilogueOpSpec> epilogue = {}) {
  KernelSpec spec;
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

TEST(ProblemSize, ParsesSizesAndScalars) {
  const ProblemSize s = parse_problem_size("m=4096, n=1024,k=512,batch=3,alpha=0.5,beta=-2,p0=0.1");
  EXPECT_EQ(s.m, 4096);
  EXPECT_EQ(s.n, 1024);
  EXPECT_EQ(s.k, 512);
  EXPECT_EQ(s.batch, 3);
  EXPECT_EQ(s.alpha, 0.5);
  EXPECT_EQ(s.beta, -2.0);
  EXPECT_EQ(s.p0, 0.1);
  EXPECT_FALSE(s.p1.has_value());
  EXPECT_EQ(parse_problem_size("m=1,n=2,k=3").batch, 1);
}

TEST(ProblemSize, RejectsMalformedText) {
  for (const char* bad : {"m=1,n=2", "m=1,n=2,k=0", "m=-1,n=2,k=3", "m=1,n=2,k=3,batch=0",
                          "m=1,n=2,k=3,q=4", "m=1,n=2,k=3,m=5", "m=1x,n=2,k=3", "m=1,n,k=3",
                          "m=1,n=2,k=3,alpha=nan", "m=1,n=2,k=3,alpha=abc", ""}) {
    EXPECT_THROW(parse_problem_size(bad), std::invalid_argument) << bad;
  }
}

TEST(ProblemSize, TextRoundTrip) {
  const ProblemSize s = parse_problem_size("m=7,n=9,k=11,batch=2,alpha=0.1,p1=1e-3");
  EXPECT_EQ(to_string(s), "m=7,n=9,k=11,batch=2,alpha=0.1,p1=0.001");
  EXPECT_EQ(parse_problem_size(to_string(s)), s);
}

TEST(GemmCase, CompactOperandsFollowTheLayouts) {
  KernelSpec spec = bf16_spec();
  spec.batched = true;
  const GemmCase c = make_gemm_case(spec, parse_problem_size("m=64,n=32,k=16,batch=4"),
                                    PrecisionMode::Native);
  const auto& p = c.problem;
  EXPECT_EQ(p.a.ld, 16);  // row-major M×K
  EXPECT_EQ(p.b.ld, 16);  // column-major K×N
  EXPECT_EQ(p.d.ld, 32);  // row-major M×N
  EXPECT_EQ(p.a.batch_stride, 64 * 16);
  EXPECT_EQ(p.b.batch_stride, 16 * 32);
  EXPECT_EQ(p.d.batch_stride, 64 * 32);
  EXPECT_EQ(p.batch, 4);
  EXPECT_EQ(c.math, realize::MathMode::Native);

  spec.a_layout = Layout::ColumnMajor;
  spec.b_layout = Layout::RowMajor;
  spec.d_layout = Layout::ColumnMajor;
  const GemmCase t = make_gemm_case(spec, parse_problem_size("m=64,n=32,k=16"), PrecisionMode::Native);
  EXPECT_EQ(t.problem.a.ld, 64);
  EXPECT_EQ(t.problem.b.ld, 32);
  EXPECT_EQ(t.problem.d.ld, 64);
}

TEST(GemmCase, EpilogueGetsValuesAndOperandDtypes) {
  const KernelSpec spec = bf16_spec({op(Kind::Bias, Activation::Identity, DType::Float32),
                                     op(Kind::Activation, Activation::LeakyReLU),
                                     op(Kind::Residual)});
  const GemmCase c = make_gemm_case(spec, parse_problem_size("m=8,n=8,k=8,beta=0.25"),
                                    PrecisionMode::Native);
  const auto& steps = c.problem.epilogue;
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].operand_dtype, DType::Float32);
  EXPECT_EQ(steps[1].p0, 0.01);
  EXPECT_EQ(steps[2].value, 0.25);
  EXPECT_EQ(steps[2].operand_dtype, DType::BFloat16);  // defaults to D's dtype
  EXPECT_EQ(c_operand_step(c.problem), &steps[2]);
  EXPECT_EQ(bias_step(c.problem), &steps[0]);
  const AbiScalars s = abi_scalars(c.problem);
  EXPECT_EQ(s.alpha, 1.0f);
  EXPECT_EQ(s.beta, 0.25f);
  EXPECT_FLOAT_EQ(s.act_p0, 0.01f);
}

TEST(GemmCase, HardTanhDefaultsAndUserParameters) {
  const KernelSpec spec = bf16_spec({op(Kind::Activation, Activation::HardTanh)});
  const GemmCase d = make_gemm_case(spec, parse_problem_size("m=8,n=8,k=8"), PrecisionMode::Native);
  EXPECT_EQ(d.problem.epilogue[0].p0, -1.0);
  EXPECT_EQ(d.problem.epilogue[0].p1, 1.0);
  const GemmCase u =
      make_gemm_case(spec, parse_problem_size("m=8,n=8,k=8,p0=-2,p1=3"), PrecisionMode::Native);
  EXPECT_EQ(u.problem.epilogue[0].p0, -2.0);
  EXPECT_EQ(u.problem.epilogue[0].p1, 3.0);
}

TEST(GemmCase, LeadingScaleFoldsIntoAlphaOthersAreRejected) {
  const GemmCase c = make_gemm_case(bf16_spec({op(Kind::Scale), op(Kind::Bias)}),
                                    parse_problem_size("m=8,n=8,k=8,alpha=0.125"),
                                    PrecisionMode::Native);
  ASSERT_EQ(c.problem.epilogue.size(), 1u);
  EXPECT_EQ(c.problem.epilogue[0].kind, Kind::Bias);
  EXPECT_EQ(c.problem.alpha, 0.125);
  EXPECT_THROW(make_gemm_case(bf16_spec({op(Kind::Bias), op(Kind::Scale)}),
                              parse_problem_size("m=8,n=8,k=8"), PrecisionMode::Native),
               std::invalid_argument);
}

TEST(GemmCase, RejectsWhatTheAbiCannotCarry) {
  const ProblemSize size = parse_problem_size("m=8,n=8,k=8");
  EXPECT_THROW(make_gemm_case(bf16_spec({op(Kind::Residual), op(Kind::Multiply)}), size,
                              PrecisionMode::Native),
               std::invalid_argument);
  EXPECT_THROW(make_gemm_case(bf16_spec(), parse_problem_size("m=8,n=8,k=8,batch=2"),
                              PrecisionMode::Native),
               std::invalid_argument);  // not batched
  KernelSpec int_out = bf16_spec();
  int_out.d_dtype = DType::Int8;
  EXPECT_THROW(make_gemm_case(int_out, size, PrecisionMode::Native), std::invalid_argument);
}

TEST(GemmCase, AdversarialScalarsDifferFromEveryDefault) {
  const KernelSpec spec = bf16_spec({op(Kind::Activation, Activation::LeakyReLU), op(Kind::Residual)});
  const GemmCase c = make_gemm_case(spec, parse_problem_size("m=8,n=8,k=8"), PrecisionMode::Native);
  const GemmCase a = with_adversarial_scalars(c);
  EXPECT_NE(a.problem.alpha, c.problem.alpha);
  EXPECT_LT(a.problem.alpha, 0.0);
  EXPECT_NE(a.problem.epilogue[0].p0, c.problem.epilogue[0].p0);
  EXPECT_NE(a.problem.epilogue[1].value, c.problem.epilogue[1].value);

  const GemmCase h = with_adversarial_scalars(make_gemm_case(
      bf16_spec({op(Kind::Activation, Activation::HardTanh)}), parse_problem_size("m=8,n=8,k=8"),
      PrecisionMode::Native));
  EXPECT_LT(h.problem.epilogue[0].p0, h.problem.epilogue[0].p1);
  EXPECT_NE(h.problem.epilogue[0].p0, -1.0);
  EXPECT_NE(h.problem.epilogue[0].p1, 1.0);
}

TEST(GemmCase, EpiloguePrefix) {
  const GemmCase c = make_gemm_case(
      bf16_spec({op(Kind::Bias), op(Kind::Activation, Activation::ReLU), op(Kind::Residual)}),
      parse_problem_size("m=8,n=8,k=8"), PrecisionMode::Native);
  EXPECT_EQ(with_epilogue_prefix(c.problem, 2).epilogue.size(), 2u);
  EXPECT_EQ(with_epilogue_prefix(c.problem, 0).fusion_name(), "gemm");
  EXPECT_EQ(with_epilogue_prefix(c.problem, 9).epilogue.size(), 3u);
}

TEST(Tokens, DtypesEpiloguesLayouts) {
  EXPECT_EQ(parse_dtype_token("bf16"), DType::BFloat16);
  EXPECT_EQ(parse_dtype_token("float16"), DType::Float16);
  EXPECT_EQ(parse_dtype_token("fp32"), DType::Float32);
  EXPECT_THROW(parse_dtype_token("int8"), std::invalid_argument);
  EXPECT_THROW(parse_dtype_token("bf17"), std::invalid_argument);

  const auto ops = parse_epilogue_tokens("bias,gelu_tanh,residual,mul,leaky_relu");
  ASSERT_EQ(ops.size(), 5u);
  EXPECT_EQ(ops[0].kind, Kind::Bias);
  EXPECT_EQ(ops[1].kind, Kind::Activation);
  EXPECT_EQ(ops[1].activation, Activation::GeluTanh);
  EXPECT_EQ(ops[2].kind, Kind::Residual);
  EXPECT_EQ(ops[3].kind, Kind::Multiply);
  EXPECT_EQ(ops[4].activation, Activation::LeakyReLU);
  EXPECT_EQ(parse_epilogue_tokens("multiply")[0].kind, Kind::Multiply);
  EXPECT_TRUE(parse_epilogue_tokens("").empty());
  EXPECT_THROW(parse_epilogue_tokens("bias,swish9"), std::invalid_argument);

  EXPECT_EQ(parse_layout_tokens("tn"), std::make_pair(Layout::RowMajor, Layout::ColumnMajor));
  EXPECT_EQ(parse_layout_tokens("nt"), std::make_pair(Layout::ColumnMajor, Layout::RowMajor));
  EXPECT_THROW(parse_layout_tokens("t"), std::invalid_argument);
  EXPECT_THROW(parse_layout_tokens("tx"), std::invalid_argument);
}

TEST(Tokens, BaselineSpecFollowsPrecision) {
  const auto layouts = parse_layout_tokens("tn");
  const KernelSpec strict = baseline_spec(DType::Float32, std::nullopt, {}, layouts,
                                          PrecisionMode::Strict, false);
  EXPECT_EQ(strict.math, realize::MathMode::Simt);
  EXPECT_EQ(strict.d_dtype, DType::Float32);
  const KernelSpec tf32 = baseline_spec(DType::Float32, std::nullopt, {}, layouts,
                                        PrecisionMode::Tf32, true);
  EXPECT_EQ(tf32.math, realize::MathMode::Tf32);
  EXPECT_TRUE(tf32.batched);
  const KernelSpec bf16 = baseline_spec(DType::BFloat16, DType::Float32,
                                        parse_epilogue_tokens("bias"), layouts,
                                        PrecisionMode::Native, false);
  EXPECT_EQ(bf16.math, realize::MathMode::Native);
  EXPECT_EQ(bf16.d_dtype, DType::Float32);
  EXPECT_EQ(bf16.epilogue.size(), 1u);
  EXPECT_FALSE(precision_mismatch(bf16, PrecisionMode::Native));
  EXPECT_FALSE(precision_mismatch(strict, PrecisionMode::Strict));
}

}  // namespace
}  // namespace fact::runtime
