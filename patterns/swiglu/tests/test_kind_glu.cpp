// The glu epilogue step this pattern registers (epilogue_steps.def, kind/glu_step.cpp): its row
// in the GEMM's step table, and the argument image of a gated projection run through the gemm
// kind's float64 host reference, checked against a direct computation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "fact/graph/graph_builder.hpp"
#include "fact/problem/arg_image.hpp"
#include "fact/problem/problem.hpp"
#include "patterns/gemm/epilogue/op_table.hpp"
#include "patterns/gemm/gemm_abi.h"
#include "patterns/gemm/kind/pack.hpp"
#include "patterns/gemm/kind/problem.hpp"
#include "patterns/gemm/kind/problem_args.hpp"

namespace fact::gemm {
namespace {

using graph::DType;

static_assert(FACT_STEP_GLU == 7, "the glu step's ABI id never changes");

TEST(GluStep, ItsRowInTheStepTable) {
  const StepOp* op = find_step_op("glu");
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->kind, EpilogueStep::Kind::Glu);
  EXPECT_EQ(op->abi_id, FACT_STEP_GLU);
  EXPECT_EQ(op->kernel_token, "glu");
  EXPECT_EQ(op->device_link, "fact::gemm::epilogue::Glu");
  EXPECT_EQ(op->operand, OperandShape::NONE);
  EXPECT_EQ(op->constants, StepConstantsRead::ACTIVATION);
  EXPECT_TRUE(op->stores_d);
  EXPECT_TRUE(op->halves_columns);
}

TEST(GluStep, CommandLineFormsNameTheGate) {
  const GemmProblem p = make_gemm_problem({64, 96, 32, 1}, DType::BFloat16, "bias,glu_silu");
  ASSERT_EQ(p.epilogue.size(), 2u);
  EXPECT_EQ(p.epilogue[1].kind, EpilogueStep::Kind::Glu);
  EXPECT_EQ(p.epilogue[1].activation, Activation::SiLU);
  EXPECT_TRUE(p.gated());
  EXPECT_EQ(p.d.ld, 48);
  EXPECT_EQ(p.fusion_name(), "gemm_bias_glu_silu");
  EXPECT_THROW(make_gemm_problem({64, 95, 32, 1}, DType::BFloat16, "glu_silu"), std::invalid_argument);
  EXPECT_THROW(make_gemm_problem({64, 96, 32, 1}, DType::BFloat16, "glu_silu,relu"),
               std::invalid_argument);
  EXPECT_THROW(make_gemm_problem({64, 96, 32, 1}, DType::BFloat16, "residual,glu_silu"),
               std::invalid_argument);
}

double activate(Activation a, double x) {
  switch (a) {
    case Activation::SiLU: return x / (1 + std::exp(-x));
    case Activation::GeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    default: ADD_FAILURE() << "no direct formula for this gate"; return 0;
  }
}

// A gated linear unit (one GEMM): bias, then glu(act) over interleaved gate / up columns. The
// image of the problem run through the host reference writes D [m, n/2] with
// D[i, j] = act(x·w[2j] + b[2j]) · (x·w[2j+1] + b[2j+1]), for SwiGLU and GeGLU; the pack refuses
// a D of N columns and a glu step that is not the last.
TEST(GluStep, PairsInterleavedColumnsIntoAHalfWidthOutput) {
  const int64_t m = 6, n = 6, k = 7;
  std::vector<float> x(m * k), w(n * k), bias(n);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.125f * float(int(i % 11) - 5);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * float(int(i % 7) - 3);
  for (int64_t j = 0; j < n; ++j) bias[j] = 0.5f - 0.125f * float(j);
  for (Activation gate : {Activation::SiLU, Activation::GeluTanh}) {
    graph::GraphBuilder b(DType::Float32);
    auto xv = b.input("x", {m, k});
    auto wv = b.parameter("w", {n, k});
    auto y = b.op("aten.linear.default", {graph::T(xv), graph::T(wv)}, {m, n / 2});
    const graph::Graph g = b.finish({y});
    GemmProblem p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.a = {"x", DType::Float32, Layout::RowMajor, k, 0, 0};
    p.b = {"w", DType::Float32, Layout::ColumnMajor, k, 0, 0};
    p.d = {y, DType::Float32, Layout::RowMajor, n / 2, 0, 0};
    EpilogueStep bias_step;
    bias_step.kind = EpilogueStep::Kind::Bias;
    bias_step.operand = "b";
    bias_step.operand_dtype = DType::Float32;
    EpilogueStep glu;
    glu.kind = EpilogueStep::Kind::Glu;
    glu.activation = gate;
    p.epilogue = {bias_step, glu};
    ASSERT_TRUE(p.gated());
    ASSERT_EQ(p.d_cols(), 3);

    const ArgImage image = pack_gemm(p, g);
    std::vector<const void*> operands;
    for (const auto& o : image.operands) {
      operands.push_back(o.value == "x"   ? static_cast<const void*>(x.data())
                         : o.value == "w" ? static_cast<const void*>(w.data())
                                          : static_cast<const void*>(bias.data()));
    }
    std::vector<float> d(m * n / 2 + 1, std::numeric_limits<float>::quiet_NaN());
    std::vector<uint8_t> bytes = bind_addresses(image, operands, {d.data()},
                                                std::vector<int>(operands.size(), 4), {4});
    ASSERT_EQ(reference_call(reinterpret_cast<const FactCallHeader*>(bytes.data())), FACT_OK);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n / 2; ++j) {
        double column[2];
        for (int half = 0; half < 2; ++half) {
          const int64_t c = 2 * j + half;
          double acc = bias[c];
          for (int64_t kk = 0; kk < k; ++kk) acc += double(x[i * k + kk]) * w[c * k + kk];
          column[half] = acc;
        }
        const double want = activate(gate, column[0]) * column[1];
        EXPECT_NEAR(d[i * n / 2 + j], want, 1e-5 * (1 + std::fabs(want))) << i << "," << j;
      }
    }
    EXPECT_TRUE(std::isnan(d.back())) << "written past D's m x n/2 elements";

    GemmProblem wide = p;
    wide.d.ld = n;  // D of N columns: not what a gated GEMM writes
    EXPECT_THROW(pack_gemm(wide, g), std::invalid_argument);
    GemmProblem not_last = p;
    not_last.epilogue = {glu, glu};  // D's shape fits; the first glu is not the last step
    EXPECT_THROW(pack_gemm(not_last, g), std::invalid_argument);
  }
}

}  // namespace
}  // namespace fact::gemm
