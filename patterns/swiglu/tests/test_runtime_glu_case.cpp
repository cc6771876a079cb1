// The GEMM runtime's case (no GPU) for a kernel ending in the glu step: D's width follows the
// spec's last step.
#include <gtest/gtest.h>

#include "patterns/gemm/kind/problem_args.hpp"
#include "patterns/gemm/runtime/gemm_case.hpp"

namespace fact::gemm {
namespace {

using Kind = EpilogueStep::Kind;

GemmSpec bf16_spec(std::vector<EpilogueOpSpec> epilogue) {
  GemmSpec spec;
  spec.a_dtype = spec.b_dtype = spec.d_dtype = DType::BFloat16;
  spec.a_layout = Layout::RowMajor;
  spec.b_layout = Layout::ColumnMajor;
  spec.epilogue = std::move(epilogue);
  return spec;
}

EpilogueOpSpec op(Kind kind, Activation act = Activation::Identity) {
  EpilogueOpSpec o;
  o.kind = kind;
  o.activation = act;
  return o;
}

GemmProblem sizes(int64_t m, int64_t n, int64_t k) {
  return make_gemm_problem({m, n, k, 1}, DType::BFloat16, "", "tn");
}

// A glu kernel's case: D is the dense M × N/2 output, the step keeps its gate
// activation, and an odd N is refused (no column pairs).
TEST(GluCase, AGluCaseSizesDAsHalfTheColumns) {
  const GemmSpec spec = bf16_spec({op(Kind::Glu, Activation::SiLU)});
  const GemmCase c = make_gemm_case(spec, make_gemm_problem({64, 96, 32, 1}, DType::BFloat16, "glu_silu"),
                                    PrecisionMode::Native);
  EXPECT_EQ(c.problem.n, 96);
  EXPECT_EQ(c.problem.d_cols(), 48);
  EXPECT_EQ(c.problem.d.ld, 48);
  EXPECT_EQ(c.problem.d.layout, Layout::RowMajor);
  ASSERT_EQ(c.problem.epilogue.size(), 1u);
  EXPECT_EQ(c.problem.epilogue[0].kind, Kind::Glu);
  EXPECT_EQ(c.problem.epilogue[0].activation, Activation::SiLU);
  const GemmCase from_plain = make_gemm_case(spec, sizes(64, 96, 32), PrecisionMode::Native);
  EXPECT_EQ(from_plain.problem.d.ld, 48);  // the spec decides D's width, not the problem's steps
  EXPECT_THROW(make_gemm_case(spec, sizes(64, 95, 32), PrecisionMode::Native), std::invalid_argument);
}

}  // namespace
}  // namespace fact::gemm
