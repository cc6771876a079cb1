// The GEMM kind's RowScale step (FACT_STEP_ROW_SCALE) as the rmsnorm fold uses it: the argument
// image, the problem's JSON form, and the float64 host reference (the CPU path and the verifier)
// on x, W·diag(g) and rstd, checked against the textbook RMSNorm followed by the ORIGINAL
// projection, alone, with a bias, and before a SwiGLU gate (the row scale applies to the gate and
// the up columns alike). A fold or a row index that is wrong fails the comparison.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/kind/pack.hpp"
#include "patterns/gemm/kind/problem.hpp"
#include "patterns/gemm/kind/reference_host.hpp"

namespace fact::gemm {
namespace {

using graph::DType;
using Kind = EpilogueStep::Kind;

constexpr double kEps = 1e-6;

struct Tensors {
  int64_t m = 6, k = 16, n = 10;
  std::vector<float> x, w, g, bias, rstd;
};

Tensors random_tensors(int64_t m, int64_t k, int64_t n) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  auto random = [&](int64_t count) {
    std::vector<float> v(static_cast<size_t>(count));
    for (auto& e : v) e = normal(rng);
    return v;
  };
  Tensors t;
  t.m = m;
  t.k = k;
  t.n = n;
  t.x = random(m * k);
  t.w = random(n * k);
  t.g = random(k);
  t.bias = random(n);
  for (int64_t i = 0; i < m; ++i) {
    double squares = 0.0;
    for (int64_t c = 0; c < k; ++c) squares += double(t.x[i * k + c]) * t.x[i * k + c];
    t.rstd.push_back(static_cast<float>(1.0 / std::sqrt(squares / double(k) + kEps)));
  }
  return t;
}

// Textbook: y = g ∘ (x · rstd), then y · Wᵀ (row i, column j of W's rows `w`).
double normalized_projection(const Tensors& t, const std::vector<float>& w, int64_t i, int64_t j) {
  double sum = 0.0;
  for (int64_t c = 0; c < t.k; ++c) {
    const double y = double(t.g[c]) * (double(t.x[i * t.k + c]) * double(t.rstd[i]));
    sum += y * double(w[j * t.k + c]);
  }
  return sum;
}

// W·diag(g) as the rule's derived operand computes it (float32 product).
std::vector<float> folded(const std::vector<float>& w, const std::vector<float>& g, int64_t k) {
  std::vector<float> out(w.size());
  for (size_t i = 0; i < w.size(); ++i) out[i] = w[i] * g[i % static_cast<size_t>(k)];
  return out;
}

GemmProblem folded_problem(const Tensors& t, int64_t n, std::vector<EpilogueStep> after) {
  GemmProblem p;
  p.m = t.m;
  p.n = n;
  p.k = t.k;
  p.a = {"x", DType::Float32, Layout::RowMajor, t.k, 0, 0};
  p.b = {"derived:y.rmsnorm_weight", DType::Float32, Layout::ColumnMajor, t.k, 0, 0};
  EpilogueStep row_scale;
  row_scale.kind = Kind::RowScale;
  row_scale.operand = "rsqrt";
  row_scale.operand_dtype = DType::Float32;
  p.epilogue = {row_scale};
  p.epilogue.insert(p.epilogue.end(), after.begin(), after.end());
  const int64_t cols = p.gated() ? n / 2 : n;
  p.d = {"y", DType::Float32, Layout::RowMajor, cols, 0, 0};
  return p;
}

static_assert(FACT_STEP_ROW_SCALE == 9, "the row_scale step's ABI id never changes");

// The row this pattern registers in the GEMM's step table (epilogue_steps.def).
TEST(RmsNormKind, ItsRowInTheStepTable) {
  const StepOp* op = find_step_op("row_scale");
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->kind, EpilogueStep::Kind::RowScale);
  EXPECT_EQ(op->abi_id, FACT_STEP_ROW_SCALE);
  EXPECT_EQ(op->kernel_token, "rowscale");
  EXPECT_EQ(op->device_link, "fact::gemm::epilogue::RowScale");
  EXPECT_EQ(op->operand, OperandShape::ROW_VECTOR);
  EXPECT_EQ(op->constants, StepConstantsRead::NONE);
  EXPECT_FALSE(op->stores_d);
  EXPECT_EQ(op->derivative, "row_scale");
  for (double x : {-2.0, 0.5, 3.0}) EXPECT_EQ(op->reference(x, 0.25, {}), x * 0.25);
}

TEST(RmsNormKind, RowScaleStepInTheArgumentImageAndJson) {
  const Tensors t = random_tensors(6, 16, 10);
  const GemmProblem p = folded_problem(t, 10, {});
  const FactGemmArgs args = gemm_args(p);
  ASSERT_EQ(args.num_steps, 1);
  EXPECT_EQ(args.steps[0].kind, FACT_STEP_ROW_SCALE);
  EXPECT_EQ(args.steps[0].operand_type, FACT_DTYPE_F32);
  EXPECT_EQ(args.steps[0].batch_stride, 0);
  EXPECT_EQ(p.fusion_name(), "gemm_row_scale");
  EXPECT_DOUBLE_EQ(p.min_bytes() - 4.0 * (6 * 16 + 16 * 10 + 6 * 10), 4.0 * 6);  // + one float per row
  const GemmProblem back = gemm_problem_from_json(gemm_problem_to_json(p));
  ASSERT_EQ(back.epilogue.size(), 1u);
  EXPECT_EQ(back.epilogue[0].kind, Kind::RowScale);
  EXPECT_EQ(back.epilogue[0].operand, "rsqrt");
  EXPECT_EQ(back.epilogue[0].operand_dtype, DType::Float32);
}

TEST(RmsNormKind, HostReferenceMatchesTheNormThenTheProjection) {
  const Tensors t = random_tensors(6, 16, 10);
  const std::vector<float> wg = folded(t.w, t.g, t.k);
  for (bool bias : {false, true}) {
    SCOPED_TRACE(bias ? "bias" : "plain");
    std::vector<EpilogueStep> after;
    if (bias) {
      EpilogueStep s;
      s.kind = Kind::Bias;
      s.operand = "bias";
      s.operand_dtype = DType::Float32;
      after.push_back(s);
    }
    FactGemmArgs args = gemm_args(folded_problem(t, t.n, after));
    std::vector<float> d(static_cast<size_t>(t.m * t.n), NAN);
    args.a = t.x.data();
    args.b = wg.data();
    args.d = d.data();
    args.steps[0].operand = t.rstd.data();
    if (bias) args.steps[1].operand = t.bias.data();
    ASSERT_EQ(reference_gemm_host(args), FACT_OK);
    for (int64_t i = 0; i < t.m; ++i) {
      for (int64_t j = 0; j < t.n; ++j) {
        const double want = normalized_projection(t, t.w, i, j) + (bias ? t.bias[j] : 0.0);
        EXPECT_NEAR(d[i * t.n + j], want, 1e-5 * (1.0 + std::fabs(want))) << i << "," << j;
      }
    }
  }
}

TEST(RmsNormKind, RowScaleBeforeTheGateScalesGateAndUpAlike) {
  const int64_t intermediate = 8;
  const Tensors t = random_tensors(5, 16, 2 * intermediate);
  // Gate and up weights as the swiglu rule interleaves them (row 2j gate_j, row 2j+1 up_j).
  std::vector<float> gate(t.w.begin(), t.w.begin() + intermediate * t.k);
  std::vector<float> up(t.w.begin() + intermediate * t.k, t.w.end());
  std::vector<float> interleaved;
  for (int64_t j = 0; j < intermediate; ++j) {
    interleaved.insert(interleaved.end(), gate.begin() + j * t.k, gate.begin() + (j + 1) * t.k);
    interleaved.insert(interleaved.end(), up.begin() + j * t.k, up.begin() + (j + 1) * t.k);
  }
  const std::vector<float> wg = folded(interleaved, t.g, t.k);
  EpilogueStep glu;
  glu.kind = Kind::Glu;
  glu.activation = Activation::SiLU;
  FactGemmArgs args = gemm_args(folded_problem(t, 2 * intermediate, {glu}));
  std::vector<float> d(static_cast<size_t>(t.m * intermediate), NAN);
  args.a = t.x.data();
  args.b = wg.data();
  args.d = d.data();
  args.steps[0].operand = t.rstd.data();
  ASSERT_EQ(reference_gemm_host(args), FACT_OK);
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t j = 0; j < intermediate; ++j) {
      const double g = normalized_projection(t, gate, i, j), u = normalized_projection(t, up, i, j);
      const double want = g / (1.0 + std::exp(-g)) * u;
      EXPECT_NEAR(d[i * intermediate + j], want, 1e-5 * (1.0 + std::fabs(want))) << i << "," << j;
    }
  }
}

TEST(RmsNormKind, HostReferenceRefusesARowScaleWithoutItsVector) {
  const Tensors t = random_tensors(4, 8, 8);
  FactGemmArgs args = gemm_args(folded_problem(t, t.n, {}));
  std::vector<float> d(static_cast<size_t>(t.m * t.n));
  args.a = t.x.data();
  args.b = t.w.data();
  args.d = d.data();
  args.steps[0].operand = nullptr;
  EXPECT_EQ(reference_gemm_host(args), FACT_ERR_INVALID_ARGS);
}

}  // namespace
}  // namespace fact::gemm
