// The tanh-GELU derivative step (one ops.def entry and one formula): x · gelu_tanh'(u) with u an
// M×N operand in D's layout, the epilogue of a dgrad GEMM. Its float64 reference against the
// central difference of the forward formula, its names, ABI id, problem JSON, CLI token and
// packing, and the host reference GEMM.
#include <gtest/gtest.h>

#include <cmath>

#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/kind/pack.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/kind/reference_host.hpp"

namespace fact::gemm {
namespace {

double gelu_tanh_by_hand(double u) {
  return 0.5 * u * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u)));
}

TEST(EpilogueGeluTanhGrad, ReferenceIsTheDerivativeOfTheForwardFormula) {
  const StepOp* op = find_step_op("gelu_tanh_grad");
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->abi_id, FACT_STEP_GELU_TANH_GRAD);
  EXPECT_EQ(FACT_STEP_GELU_TANH_GRAD, 10);
  EXPECT_EQ(op->operand, OperandShape::MATRIX);
  EXPECT_EQ(activation_op(Activation::GeluTanh).derivative, "gelu_tanh_grad");
  const ops::StepConstants<double> none{};
  for (double u : {-6.0, -2.5, -1.0, -0.3, 0.0, 0.2, 1.0, 1.7, 4.0}) {
    SCOPED_TRACE(u);
    const double h = 1e-5;
    const double slope = (gelu_tanh_by_hand(u + h) - gelu_tanh_by_hand(u - h)) / (2 * h);
    EXPECT_NEAR(op->reference(1.0, u, none), slope, 1e-9);
    EXPECT_NEAR(op->reference(-2.5, u, none), -2.5 * slope, 3e-9);
  }
}

TEST(EpilogueGeluTanhGrad, JsonCliAndPacking) {
  const GemmProblem p = make_gemm_problem(parse_gemm_sizes("m=64,n=128,k=32,batch=2"), graph::DType::BFloat16,
                                          "gelu_tanh_grad", "tn");
  ASSERT_EQ(p.epilogue.size(), 1u);
  const EpilogueStep& step = p.epilogue[0];
  EXPECT_EQ(step.kind, EpilogueStep::Kind::GeluTanhGrad);
  EXPECT_EQ(step.operand_dtype, graph::DType::BFloat16);
  EXPECT_EQ(step.operand_ld, 128);
  EXPECT_EQ(step.operand_batch_stride, 64 * 128);
  EXPECT_EQ(p.fusion_name(), "bgemm_gelu_tanh_grad");
  GemmProblem named = p;
  named.epilogue[0].operand = "pre_activation";
  const nlohmann::json j = gemm_problem_to_json(named);
  EXPECT_EQ(j["epilogue"][0]["kind"], "gelu_tanh_grad");
  EXPECT_FALSE(j["epilogue"][0].contains("value"));
  const GemmProblem back = gemm_problem_from_json(j);
  EXPECT_EQ(back.epilogue[0].kind, EpilogueStep::Kind::GeluTanhGrad);
  EXPECT_EQ(back.epilogue[0].operand, "pre_activation");
  EXPECT_EQ(back.epilogue[0].operand_ld, 128);
  const FactGemmArgs args = gemm_args(p);
  EXPECT_EQ(args.num_steps, 1);
  EXPECT_EQ(args.steps[0].kind, FACT_STEP_GELU_TANH_GRAD);
  EXPECT_EQ(args.steps[0].operand_type, FACT_DTYPE_BF16);
  EXPECT_EQ(args.steps[0].ld, 128);
  EXPECT_EQ(args.steps[0].batch_stride, 64 * 128);
  EXPECT_EQ(args.steps[0].value, 0.0f);
}

// dX = dY · Wᵀ then · gelu'(pre-activation): the host reference GEMM with the step.
TEST(EpilogueGeluTanhGrad, HostReferenceGemm) {
  GemmProblem p = make_gemm_problem(parse_gemm_sizes("m=3,n=4,k=2"), graph::DType::Float32, "gelu_tanh_grad", "tn");
  std::vector<float> a = {1, 2, -3, 4, 0.5f, -1}, b = {1, 0, 0, 1, -1, 1, 0.5f, 0.5f}, d(12), u(12);
  for (int e = 0; e < 12; ++e) u[e] = -2.0f + 0.375f * float(e);
  FactGemmArgs args = gemm_args(p);
  args.a = a.data();
  args.b = b.data();
  args.d = d.data();
  args.steps[0].operand = u.data();
  ASSERT_EQ(reference_gemm_host(args), FACT_OK);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) {
      const double x = double(a[i * 2]) * b[j * 2] + double(a[i * 2 + 1]) * b[j * 2 + 1];
      const double uu = u[i * 4 + j], h = 1e-5;
      const double slope = (gelu_tanh_by_hand(uu + h) - gelu_tanh_by_hand(uu - h)) / (2 * h);
      EXPECT_NEAR(d[i * 4 + j], x * slope, 1e-5) << i << "," << j;
    }
  }
}

}  // namespace
}  // namespace fact::gemm
