// The activation derivatives of a backward pass as GEMM epilogue steps (one ops.def row and one
// formula each): gelu_erf_grad, relu_grad and silu_grad, x · act'(u) with u an M×N operand in D's
// layout (the epilogue of a dgrad GEMM; gelu_tanh_grad is test_kind_epilogue_gelu_grad.cpp's).
// Their float64 references against the central difference of the forward formulas written out
// here, the table rows (ABI ids, operand, the forward activations' derivative columns, the aten
// columns discovery reads), problem JSON, CLI token and packing, and the host reference GEMM.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/kind/pack.hpp"
#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/kind/reference_host.hpp"

namespace fact::gemm {
namespace {

static_assert(FACT_STEP_GELU_ERF_GRAD == 11 && FACT_STEP_RELU_GRAD == 12 && FACT_STEP_SILU_GRAD == 13,
              "ABI ids never change");

double gelu_erf_by_hand(double u) { return 0.5 * u * (1.0 + std::erf(u / std::sqrt(2.0))); }
double relu_by_hand(double u) { return u > 0.0 ? u : 0.0; }
double silu_by_hand(double u) { return u / (1.0 + std::exp(-u)); }

struct GradOp {
  const char* name;
  int32_t abi_id;
  EpilogueStep::Kind kind;
  Activation forward;
  double (*forward_by_hand)(double);
  const char* aten_targets;
  const char* aten_arguments;
};

const std::vector<GradOp>& grad_ops() {
  static const std::vector<GradOp> ops = {
      {"gelu_erf_grad", FACT_STEP_GELU_ERF_GRAD, EpilogueStep::Kind::GeluErfGrad, Activation::GeluErf,
       gelu_erf_by_hand, "aten.gelu_backward", "[approximate=none]"},
      {"relu_grad", FACT_STEP_RELU_GRAD, EpilogueStep::Kind::ReluGrad, Activation::ReLU, relu_by_hand,
       "aten.threshold_backward", "threshold=0"},
      {"silu_grad", FACT_STEP_SILU_GRAD, EpilogueStep::Kind::SiluGrad, Activation::SiLU, silu_by_hand,
       "aten.silu_backward", ""},
  };
  return ops;
}

double slope_by_central_difference(const GradOp& g, double u) {
  const double h = 1e-5;
  return (g.forward_by_hand(u + h) - g.forward_by_hand(u - h)) / (2 * h);
}

TEST(EpilogueActivationGrads, TableRows) {
  for (const GradOp& g : grad_ops()) {
    SCOPED_TRACE(g.name);
    const StepOp* op = find_step_op(g.name);
    ASSERT_NE(op, nullptr);
    EXPECT_EQ(op->abi_id, g.abi_id);
    EXPECT_EQ(op->kind, g.kind);
    EXPECT_EQ(&step_op(g.kind), op);
    EXPECT_EQ(op->kernel_token, g.name);
    EXPECT_EQ(op->operand, OperandShape::MATRIX);
    EXPECT_EQ(op->constants, StepConstantsRead::NONE);
    EXPECT_FALSE(op->stores_d);
    EXPECT_EQ(activation_op(g.forward).derivative, g.name);
    EXPECT_EQ(op->aten_targets, g.aten_targets);
    EXPECT_EQ(op->aten_arguments, g.aten_arguments);
  }
  const StepOp& tanh_grad = step_op(EpilogueStep::Kind::GeluTanhGrad);
  EXPECT_EQ(tanh_grad.aten_targets, "aten.gelu_backward");
  EXPECT_EQ(tanh_grad.aten_arguments, "approximate=tanh");
}

TEST(EpilogueActivationGrads, ReferenceIsTheDerivativeOfTheForwardFormula) {
  const ops::StepConstants<double> none{};
  for (const GradOp& g : grad_ops()) {
    const StepOp& op = step_op(g.kind);
    for (double u : {-9.0, -6.0, -2.5, -1.0, -0.3, -1e-3, 2e-3, 0.2, 1.0, 1.7, 4.0, 9.0}) {
      SCOPED_TRACE(std::string(g.name) + " at " + std::to_string(u));
      const double slope = slope_by_central_difference(g, u);
      EXPECT_NEAR(op.reference(1.0, u, none), slope, 1e-9);
      EXPECT_NEAR(op.reference(-2.5, u, none), -2.5 * slope, 3e-9);
    }
  }
}

// threshold_backward(x, u, 0) is x where u > 0 and 0 where u <= 0, whatever x is (a select, not
// a product): u = 0 gives 0, an infinite or NaN x at u < 0 gives 0, a NaN u passes x.
TEST(EpilogueActivationGrads, ReluGradSelectsLikeThresholdBackward) {
  const StepOp& op = step_op(EpilogueStep::Kind::ReluGrad);
  const ops::StepConstants<double> none{};
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(op.reference(3.0, 0.0, none), 0.0);
  EXPECT_EQ(op.reference(3.0, -0.0, none), 0.0);
  EXPECT_EQ(op.reference(3.0, 1e-30, none), 3.0);
  EXPECT_EQ(op.reference(inf, -1.0, none), 0.0);
  EXPECT_EQ(op.reference(nan, -1.0, none), 0.0);
  EXPECT_EQ(op.reference(-7.0, nan, none), -7.0);
}

TEST(EpilogueActivationGrads, JsonCliAndPacking) {
  for (const GradOp& g : grad_ops()) {
    SCOPED_TRACE(g.name);
    const GemmProblem p = make_gemm_problem(parse_gemm_sizes("m=64,n=128,k=32,batch=2"),
                                            graph::DType::BFloat16, g.name, "tn");
    ASSERT_EQ(p.epilogue.size(), 1u);
    const EpilogueStep& step = p.epilogue[0];
    EXPECT_EQ(step.kind, g.kind);
    EXPECT_EQ(step.operand_dtype, graph::DType::BFloat16);
    EXPECT_EQ(step.operand_ld, 128);
    EXPECT_EQ(step.operand_batch_stride, 64 * 128);
    EXPECT_EQ(p.fusion_name(), std::string("bgemm_") + g.name);
    GemmProblem named = p;
    named.epilogue[0].operand = "saved";
    const nlohmann::json j = gemm_problem_to_json(named);
    EXPECT_EQ(j["epilogue"][0]["kind"], g.name);
    EXPECT_FALSE(j["epilogue"][0].contains("value"));
    const GemmProblem back = gemm_problem_from_json(j);
    EXPECT_EQ(back.epilogue[0].kind, g.kind);
    EXPECT_EQ(back.epilogue[0].operand, "saved");
    EXPECT_EQ(back.epilogue[0].operand_ld, 128);
    EXPECT_EQ(back.epilogue[0].operand_batch_stride, 64 * 128);
    EXPECT_EQ(gemm_problem_to_json(back), j);
    const FactGemmArgs args = gemm_args(p);
    EXPECT_EQ(args.num_steps, 1);
    EXPECT_EQ(args.steps[0].kind, g.abi_id);
    EXPECT_EQ(args.steps[0].operand_type, FACT_DTYPE_BF16);
    EXPECT_EQ(args.steps[0].ld, 128);
    EXPECT_EQ(args.steps[0].batch_stride, 64 * 128);
    EXPECT_EQ(args.steps[0].value, 0.0f);
  }
}

// dX = (dY · Wᵀ) · act'(u): the host reference GEMM with each step, u the saved M×N operand.
TEST(EpilogueActivationGrads, HostReferenceGemm) {
  for (const GradOp& g : grad_ops()) {
    SCOPED_TRACE(g.name);
    GemmProblem p = make_gemm_problem(parse_gemm_sizes("m=3,n=4,k=2"), graph::DType::Float32, g.name, "tn");
    std::vector<float> a = {1, 2, -3, 4, 0.5f, -1}, b = {1, 0, 0, 1, -1, 1, 0.5f, 0.5f}, d(12), u(12);
    for (int e = 0; e < 12; ++e) u[e] = -2.0f + 0.375f * float(e) - 0.0625f;  // never 0
    FactGemmArgs args = gemm_args(p);
    args.a = a.data();
    args.b = b.data();
    args.d = d.data();
    args.steps[0].operand = u.data();
    ASSERT_EQ(reference_gemm_host(args), FACT_OK);
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 4; ++j) {
        const double x = double(a[i * 2]) * b[j * 2] + double(a[i * 2 + 1]) * b[j * 2 + 1];
        const double slope = slope_by_central_difference(g, u[i * 4 + j]);
        EXPECT_NEAR(d[i * 4 + j], x * slope, 1e-5) << i << "," << j;
      }
    }
  }
}

}  // namespace
}  // namespace fact::gemm
