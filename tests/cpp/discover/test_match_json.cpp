// GemmProblem helpers, names, and the JSON forms of problems and matches.
#include <gtest/gtest.h>

#include <limits>

#include "fact/discover/discover.hpp"
#include "patterns/gemm/discover/chain.hpp"
#include "fact/discover/match.hpp"

namespace fact::discover {
namespace {

using namespace ::fact::gemm;  // NOLINT: the GEMM problem types these tests look at

using graph::DType;

GemmProblem mlp_up_projection() {
  GemmProblem p;
  p.m = 65536;
  p.n = 3072;
  p.k = 768;
  p.a = {"x", DType::BFloat16, Layout::RowMajor, 768, 0};
  p.b = {"w", DType::BFloat16, Layout::ColumnMajor, 768, 0};
  p.d = {"y", DType::BFloat16, Layout::RowMajor, 3072, 0};
  EpilogueStep bias;
  bias.kind = EpilogueStep::Kind::Bias;
  bias.operand = "bias";
  bias.operand_dtype = DType::BFloat16;
  EpilogueStep gelu;
  gelu.kind = EpilogueStep::Kind::Activation;
  gelu.activation = Activation::GeluTanh;
  p.epilogue = {bias, gelu};
  return p;
}

TEST(GemmProblem, NamesShapesAndBytes) {
  GemmProblem p = mlp_up_projection();
  EXPECT_EQ(p.fusion_name(), "gemm_bias_gelu_tanh");
  EXPECT_EQ(p.shape_string(), "65536x3072x768");
  EXPECT_DOUBLE_EQ(p.flops(), 2.0 * 65536 * 3072 * 768);
  EXPECT_DOUBLE_EQ(p.min_bytes(), 2.0 * (65536.0 * 768 + 768.0 * 3072 + 65536.0 * 3072 + 3072));
  p.batch = 4;
  p.a.batch_stride = 65536 * 768;  // B stays shared (batch stride 0): counted once
  EpilogueStep residual;
  residual.kind = EpilogueStep::Kind::Residual;
  residual.operand = "r";
  residual.operand_dtype = DType::Float32;
  residual.operand_batch_stride = 65536 * 3072;  // one residual matrix per batch
  p.epilogue.push_back(residual);
  EXPECT_EQ(p.fusion_name(), "bgemm_bias_gelu_tanh_residual");
  EXPECT_EQ(p.shape_string(), "4x(65536x3072x768)");
  EXPECT_DOUBLE_EQ(p.min_bytes(), 2.0 * (4 * 65536.0 * 768 + 768.0 * 3072 + 65536.0 * 3072 + 3072) +
                                      4.0 * 65536 * 3072 * 4);
}

TEST(Names, EnumsHaveOneSpellingEach) {
  EXPECT_EQ(layout_name(Layout::RowMajor), "row");
  EXPECT_EQ(layout_token(Layout::ColumnMajor), 'n');
  for (Activation a : {Activation::Identity, Activation::ReLU, Activation::GeluErf, Activation::GeluTanh,
                       Activation::SiLU, Activation::Sigmoid, Activation::LeakyReLU, Activation::HardTanh,
                       Activation::Tanh}) {
    EXPECT_EQ(parse_activation(activation_name(a)), a);
  }
  EXPECT_FALSE(parse_activation("swish"));
  EXPECT_EQ(epilogue_kind_name(EpilogueStep::Kind::Multiply), "mul");
  for (auto k : {EpilogueStep::Kind::Scale, EpilogueStep::Kind::AddScalar, EpilogueStep::Kind::Bias,
                 EpilogueStep::Kind::Activation, EpilogueStep::Kind::Residual, EpilogueStep::Kind::Multiply}) {
    EXPECT_EQ(parse_epilogue_kind(epilogue_kind_name(k)), k);
  }
  EXPECT_EQ(match_status_name(MatchStatus::Pending), "pending");
  EXPECT_EQ(classification_name(Classification::Reuse), "REUSE");
  EXPECT_EQ(graph::dtype_label(DType::BFloat16), "bf16");
  EXPECT_EQ(math_mode(DType::Float32, core::PrecisionMode::Strict), "3xtf32");
  EXPECT_EQ(math_mode(DType::Float32, core::PrecisionMode::Tf32), "tf32");
  EXPECT_EQ(math_mode(DType::Float32, core::PrecisionMode::Native), "");
  EXPECT_EQ(math_mode(DType::Float16, core::PrecisionMode::Strict), "native");
  EXPECT_EQ(math_mode(DType::Float64, core::PrecisionMode::Strict), "");
}

TEST(GemmProblemJson, RoundTripsIncludingInfiniteClampBounds) {
  GemmProblem p = mlp_up_projection();
  EpilogueStep clamp;
  clamp.kind = EpilogueStep::Kind::Activation;
  clamp.activation = Activation::HardTanh;
  clamp.p0 = -std::numeric_limits<double>::infinity();
  clamp.p1 = 6.0;
  p.epilogue.push_back(clamp);
  p.alpha = 0.5;
  const auto j = gemm_problem_to_json(p);
  EXPECT_EQ(j["fusion"], "gemm_bias_gelu_tanh_hardtanh");
  EXPECT_EQ(j["epilogue"][2]["p0"], "-inf");
  const GemmProblem back = gemm_problem_from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(back.fusion_name(), p.fusion_name());
  EXPECT_EQ(back.m, p.m);
  EXPECT_EQ(back.b.layout, Layout::ColumnMajor);
  EXPECT_EQ(back.b.ld, 768);
  EXPECT_EQ(back.epilogue[0].operand, "bias");
  EXPECT_EQ(back.epilogue[0].operand_dtype, DType::BFloat16);
  EXPECT_EQ(back.epilogue[2].p0, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(back.epilogue[2].p1, 6.0);
  EXPECT_DOUBLE_EQ(back.alpha, 0.5);
  auto broken = j;
  broken.erase("k");
  EXPECT_THROW(gemm_problem_from_json(broken), std::invalid_argument);
  broken = j;
  broken["a"]["layout"] = "diagonal";
  EXPECT_THROW(gemm_problem_from_json(broken), std::invalid_argument);
}

TEST(MatchJson, RoundTrips) {
  Match m;
  m.rule = "gemm_bias_gelu_tanh";
  m.pattern = "gemm";
  m.status = MatchStatus::Declined;
  m.reason = "K=770 not a multiple of 8 for bf16";
  m.classification = Classification::Adapt;
  m.nodes = {"linear", "gelu"};
  m.roles = {{"input", "x"}, {"output", "y"}};
  m.problems = {gemm::to_problem(mlp_up_projection())};
  m.dtype = DType::BFloat16;
  m.extra = {{"math", "native"}};
  m.est_before_us = 10.0;
  m.est_after_us = 4.0;
  const auto j = match_to_json(m);
  EXPECT_EQ(j["status"], "declined");
  EXPECT_DOUBLE_EQ(j["est_saved_us"].get<double>(), 6.0);
  const Match back = match_from_json(j);
  EXPECT_EQ(back.rule, m.rule);
  EXPECT_EQ(back.status, MatchStatus::Declined);
  EXPECT_EQ(back.reason, m.reason);
  EXPECT_EQ(back.nodes, m.nodes);
  EXPECT_EQ(back.roles, m.roles);
  EXPECT_EQ(back.problems.size(), 1u);
  EXPECT_EQ(back.dtype, DType::BFloat16);
  EXPECT_DOUBLE_EQ(back.est_saved_us(), 6.0);
  auto broken = j;
  broken["status"] = "maybe";
  EXPECT_THROW(match_from_json(broken), std::invalid_argument);
}


}  // namespace
}  // namespace fact::discover
