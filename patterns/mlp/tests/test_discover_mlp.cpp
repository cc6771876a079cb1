// patterns/mlp rule: GEMM → activation → GEMM, its precedence over single GEMMs, and when it
// steps aside.
#include <gtest/gtest.h>

#include "fact/discover/discover.hpp"
#include "tests/cpp/discover/discover_test_util.hpp"

namespace fact::discover {
namespace {

using namespace ::fact::gemm;  // NOLINT: the GEMM problem types these tests look at
using testing::gemms;

using graph::C;
using graph::DType;
using graph::GraphBuilder;
using graph::T;
using graph::ValueId;
using testing::describe;
using testing::find_rule;
using testing::linear;
using testing::unary;
using Kind = EpilogueStep::Kind;

// x [8, 64, 256] → fc (256 → hidden) → activation → proj (hidden → out) [→ + x]
struct MlpGraph {
  GraphBuilder b{DType::BFloat16};
  ValueId x, hidden, out;
  MlpGraph(const std::string& activation, int64_t hidden_width = 1024, int64_t out_width = 256,
           bool residual = true) {
    x = b.input("x", {8, 64, 256});
    auto w1 = b.parameter("w1", {hidden_width, 256});
    auto b1 = b.parameter("b1", {hidden_width});
    auto w2 = b.parameter("w2", {out_width, hidden_width});
    auto b2 = b.parameter("b2", {out_width});
    hidden = activation.empty() ? linear(b, x, w1, b1) : unary(b, activation, linear(b, x, w1, b1));
    out = linear(b, hidden, w2, b2);
    if (residual && out_width == 256) out = b.op("aten.add.Tensor", {T(x), T(out)}, {8, 64, 256});
  }
};

TEST(MlpRule, TwoKernelsWithTheActivationInTheFirst) {
  MlpGraph g("aten.relu.default");
  const auto d = discover(g.b.finish({g.out}));
  ASSERT_EQ(d.matches.size(), 1u) << describe(d.matches);
  const Match& m = d.matches[0];
  EXPECT_EQ(m.rule, "mlp_relu");
  EXPECT_EQ(m.pattern, "mlp");
  EXPECT_EQ(m.status, MatchStatus::Accepted);
  EXPECT_EQ(m.nodes, (std::vector<std::string>{"linear", "relu", "linear_1", "add"}));
  ASSERT_EQ(gemms(m).size(), 2u);
  EXPECT_EQ(gemms(m)[0].fusion_name(), "gemm_bias_relu");
  EXPECT_EQ(gemms(m)[1].fusion_name(), "gemm_bias_residual");
  EXPECT_EQ(gemms(m)[0].shape_string(), "512x1024x256");
  EXPECT_EQ(gemms(m)[1].shape_string(), "512x256x1024");
  EXPECT_EQ(gemms(m)[1].a.value, gemms(m)[0].d.value);
  EXPECT_EQ(m.roles.at("hidden"), g.hidden);
  EXPECT_EQ(m.roles.at("up_weight"), "w1");
  EXPECT_EQ(m.roles.at("down_weight"), "w2");
  EXPECT_EQ(m.roles.at("residual"), "x");
  EXPECT_EQ(m.roles.at("output"), g.out);
  EXPECT_GT(m.est_saved_us(), 0.0);
}

TEST(MlpRule, AnyEpilogueActivation) {
  for (const auto& [target, rule] : std::vector<std::pair<std::string, std::string>>{
           {"aten.gelu.default", "mlp_gelu_erf"}, {"aten.silu.default", "mlp_silu"},
           {"aten.sigmoid.default", "mlp_sigmoid"}}) {
    MlpGraph g(target);
    const auto d = discover(g.b.finish({g.out}));
    ASSERT_EQ(d.matches.size(), 1u) << describe(d.matches);
    EXPECT_EQ(d.matches[0].rule, rule);
  }
}

TEST(MlpRule, WithoutAnActivationTheGemmsStandAlone) {
  MlpGraph g("");
  const auto d = discover(g.b.finish({g.out}));
  ASSERT_EQ(d.matches.size(), 2u) << describe(d.matches);
  EXPECT_NE(find_rule(d.matches, "gemm_bias"), nullptr);
  EXPECT_NE(find_rule(d.matches, "gemm_bias_residual"), nullptr);
}

TEST(MlpRule, AnUnalignedHiddenWidthRunsPadded) {
  // hidden 1002: the second GEMM's K is padded to 1008 (its weight once, by the plan); the
  // first one's unaligned D rows are the direct-store variant's.
  MlpGraph g("aten.relu.default", /*hidden_width=*/1002, /*out_width=*/256, /*residual=*/false);
  const auto d = discover(g.b.finish({g.out}));
  ASSERT_EQ(d.matches.size(), 1u) << describe(d.matches);
  const auto& m = d.matches.front();
  EXPECT_EQ(m.pattern, "mlp");
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  EXPECT_EQ(m.problems.size(), 2u);
  EXPECT_EQ(m.extra["note"], "K padded 1002\u21921008");
  ASSERT_EQ(m.derived.size(), 1u);
  EXPECT_EQ(m.derived[0].shape, (std::vector<int64_t>{256, 1008}));
}

TEST(MlpRule, HiddenReadElsewhereIsNoMlp) {
  MlpGraph g("aten.relu.default");
  auto g2 = g.b.finish({g.out, g.hidden});
  const auto d = discover(g2);
  EXPECT_EQ(find_rule(d.matches, "mlp_relu"), nullptr) << describe(d.matches);
  EXPECT_NE(find_rule(d.matches, "gemm_bias_relu"), nullptr);
}

}  // namespace
}  // namespace fact::discover
