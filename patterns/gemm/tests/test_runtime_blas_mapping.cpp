#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "patterns/gemm/runtime/blas_mapping.hpp"

namespace fact::gemm {
namespace {

using Kind = EpilogueStep::Kind;

GemmProblem problem(Layout a, Layout b, Layout d, int64_t m, int64_t n, int64_t k, int64_t batch) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.batch = batch;
  p.a = {.value = "A", .dtype = DType::Float32, .layout = a, .ld = a == Layout::RowMajor ? k : m,
         .batch_stride = m * k};
  p.b = {.value = "B", .dtype = DType::Float32, .layout = b, .ld = b == Layout::RowMajor ? n : k,
         .batch_stride = k * n};
  p.d = {.value = "D", .dtype = DType::Float32, .layout = d, .ld = d == Layout::RowMajor ? n : m,
         .batch_stride = m * n};
  return p;
}

double at(const std::vector<double>& buf, const GemmOperand& o, int64_t l, int64_t r,
          int64_t c) {
  return buf[l * o.batch_stride + (o.layout == Layout::RowMajor ? r * o.ld + c : c * o.ld + r)];
}

// What cuBLAS computes for these arguments, by its column-major definition.
std::vector<double> column_major_gemm(const ColumnMajorGemm& g, int64_t batch,
                                      const std::vector<double>& first,
                                      const std::vector<double>& second, size_t out_size) {
  std::vector<double> out(out_size, 0.0);
  auto op = [](const std::vector<double>& x, bool t, int64_t ld, int64_t stride, int64_t l,
               int64_t r, int64_t c) {
    return t ? x[l * stride + c + r * ld] : x[l * stride + r + c * ld];
  };
  for (int64_t l = 0; l < batch; ++l)
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double acc = 0;
        for (int64_t kk = 0; kk < g.k; ++kk) {
          acc += op(first, g.transpose_first, g.ld_first, g.stride_first, l, i, kk) *
                 op(second, g.transpose_second, g.ld_second, g.stride_second, l, kk, j);
        }
        out[l * g.stride_out + i + j * g.ld_out] = acc;
      }
  return out;
}

class ColumnMajorMapping
    : public ::testing::TestWithParam<std::tuple<Layout, Layout, Layout>> {};

TEST_P(ColumnMajorMapping, ComputesTheRowMajorProduct) {
  const auto [la, lb, ld] = GetParam();
  const int64_t m = 5, n = 7, k = 3, batch = 2;
  const GemmProblem p = problem(la, lb, ld, m, n, k, batch);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<double> a(m * k * batch), b(k * n * batch);
  for (double& x : a) x = dist(rng);
  for (double& x : b) x = dist(rng);

  const ColumnMajorGemm g = map_to_column_major(p);
  const std::vector<double> out =
      column_major_gemm(g, batch, g.first_is_b ? b : a, g.first_is_b ? a : b, m * n * batch);
  for (int64_t l = 0; l < batch; ++l)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double expected = 0;
        for (int64_t kk = 0; kk < k; ++kk) expected += at(a, p.a, l, i, kk) * at(b, p.b, l, kk, j);
        EXPECT_NEAR(at(out, p.d, l, i, j), expected, 1e-12) << l << "," << i << "," << j;
      }
  // Stored shapes as cuBLASLt layouts see them: rows ≤ ld.
  EXPECT_LE(g.first_rows(), g.ld_first);
  EXPECT_LE(g.second_rows(), g.ld_second);
  EXPECT_EQ(g.first_rows() * g.first_cols(), g.first_is_b ? k * n : m * k);
}

INSTANTIATE_TEST_SUITE_P(
    AllLayouts, ColumnMajorMapping,
    ::testing::Combine(::testing::Values(Layout::RowMajor, Layout::ColumnMajor),
                       ::testing::Values(Layout::RowMajor, Layout::ColumnMajor),
                       ::testing::Values(Layout::RowMajor, Layout::ColumnMajor)));

TEST(ColumnMajorMapping, RowMajorDIsTheSwappedProduct) {
  const ColumnMajorGemm g =
      map_to_column_major(problem(Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor, 64, 32, 16, 1));
  EXPECT_TRUE(g.first_is_b);
  EXPECT_EQ(g.m, 32);
  EXPECT_EQ(g.n, 64);
  EXPECT_TRUE(g.transpose_first);    // nn.Linear weight (column-major B) → "T"
  EXPECT_FALSE(g.transpose_second);  // row-major activations → "N"
  EXPECT_EQ(g.ld_out, 32);
}

EpilogueStep step(Kind kind, Activation act = Activation::Identity, DType dtype = DType::Float32,
                  double value = 1.0) {
  EpilogueStep s;
  s.kind = kind;
  s.activation = act;
  s.operand_dtype = dtype;
  s.value = value;
  return s;
}

GemmProblem with_steps(std::vector<EpilogueStep> steps, Layout d = Layout::RowMajor) {
  GemmProblem p = problem(Layout::RowMajor, Layout::ColumnMajor, d, 8, 8, 8, 1);
  p.epilogue = std::move(steps);
  return p;
}

TEST(CublasLtPlan, FusesBiasAndReluOrTanhGelu) {
  LtEpiloguePlan plan = plan_cublaslt_epilogue(with_steps({}));
  EXPECT_EQ(plan.epilogue, LtEpilogue::Default);
  EXPECT_EQ(plan.fused_steps, 0u);

  plan = plan_cublaslt_epilogue(with_steps({step(Kind::Bias), step(Kind::Activation, Activation::ReLU)}));
  EXPECT_EQ(plan.epilogue, LtEpilogue::ReluBias);
  EXPECT_EQ(plan.fused_steps, 2u);

  plan = plan_cublaslt_epilogue(with_steps({step(Kind::Bias), step(Kind::Activation, Activation::GeluTanh)}));
  EXPECT_EQ(plan.epilogue, LtEpilogue::GeluBias);

  plan = plan_cublaslt_epilogue(with_steps({step(Kind::Activation, Activation::GeluTanh)}));
  EXPECT_EQ(plan.epilogue, LtEpilogue::Gelu);
  EXPECT_EQ(plan.fused_steps, 1u);
}

TEST(CublasLtPlan, ErfGeluAndOtherActivationsAreNotFused) {
  LtEpiloguePlan plan = plan_cublaslt_epilogue(
      with_steps({step(Kind::Bias), step(Kind::Activation, Activation::GeluErf)}));
  EXPECT_EQ(plan.epilogue, LtEpilogue::Bias);
  EXPECT_EQ(plan.fused_steps, 1u);
  plan = plan_cublaslt_epilogue(with_steps({step(Kind::Activation, Activation::SiLU)}));
  EXPECT_EQ(plan.fused_steps, 0u);
}

TEST(CublasLtPlan, ResidualBeforeActivationBecomesBetaC) {
  LtEpiloguePlan plan = plan_cublaslt_epilogue(with_steps(
      {step(Kind::Residual, Activation::Identity, DType::Float32, 0.5), step(Kind::Bias),
       step(Kind::Activation, Activation::ReLU)}));
  EXPECT_TRUE(plan.uses_c);
  EXPECT_EQ(plan.beta, 0.5);
  EXPECT_EQ(plan.residual_step, 0);  // its operand is C, its value beta
  EXPECT_EQ(plan.bias_step, 1);      // its operand is the bias pointer
  EXPECT_EQ(plan.epilogue, LtEpilogue::ReluBias);
  EXPECT_EQ(plan.fused_steps, 3u);
}

TEST(CublasLtPlan, NothingAfterTheActivation) {
  LtEpiloguePlan plan = plan_cublaslt_epilogue(with_steps(
      {step(Kind::Bias), step(Kind::Activation, Activation::ReLU), step(Kind::Residual)}));
  EXPECT_FALSE(plan.uses_c);
  EXPECT_EQ(plan.fused_steps, 2u);
  plan = plan_cublaslt_epilogue(with_steps({step(Kind::Multiply)}));
  EXPECT_EQ(plan.fused_steps, 0u);
  // A scale or a constant after the GEMM ends the prefix (cuBLASLt has no such step).
  plan = plan_cublaslt_epilogue(with_steps({step(Kind::Bias), step(Kind::Scale),
                                            step(Kind::Activation, Activation::ReLU)}));
  EXPECT_EQ(plan.fused_steps, 1u);
  EXPECT_EQ(plan.epilogue, LtEpilogue::Bias);
  plan = plan_cublaslt_epilogue(with_steps({step(Kind::AddScalar)}));
  EXPECT_EQ(plan.fused_steps, 0u);
}

TEST(CublasLtPlan, ResidualOfAnotherDtypeOrColumnMajorBiasIsNotFused) {
  LtEpiloguePlan plan = plan_cublaslt_epilogue(
      with_steps({step(Kind::Residual, Activation::Identity, DType::BFloat16)}));
  EXPECT_EQ(plan.fused_steps, 0u);
  plan = plan_cublaslt_epilogue(with_steps({step(Kind::Bias)}, Layout::ColumnMajor));
  EXPECT_EQ(plan.fused_steps, 0u);
  plan = plan_cublaslt_epilogue(with_steps({step(Kind::Bias), step(Kind::Bias)}));
  EXPECT_EQ(plan.fused_steps, 1u);
  // cuBLASLt adds its bias unscaled: addmm's beta · bias is not its BIAS epilogue.
  plan = plan_cublaslt_epilogue(
      with_steps({step(Kind::Bias, Activation::Identity, DType::Float32, 0.5)}));
  EXPECT_EQ(plan.fused_steps, 0u);
}

}  // namespace
}  // namespace fact::gemm
