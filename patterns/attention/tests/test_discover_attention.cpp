// patterns/attention rule: a fact.attention node becomes a pending match.
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
using graph::OpOptions;
using graph::T;
using testing::describe;

TEST(AttentionRule, PendingUntilItsTemplateLands) {
  GraphBuilder b(DType::BFloat16);
  auto q = b.input("q", {2, 8, 256, 64});
  auto k = b.input("k", {2, 8, 256, 64});
  auto v = b.input("v", {2, 8, 256, 64});
  auto kt = b.op("aten.transpose.int", {T(k), C(-2), C(-1)}, {2, 8, 64, 256},
                 OpOptions{.stride = std::vector<int64_t>{131072, 16384, 1, 64}});
  auto scores = b.op("aten.matmul.default", {T(q), T(kt)}, {2, 8, 256, 256});
  auto scaled = b.op("aten.mul.Tensor", {T(scores), C(0.125)}, {2, 8, 256, 256});
  auto mask = b.buffer("causal", {256, 256});
  auto masked = b.op("aten.add.Tensor", {T(scaled), T(mask)}, {2, 8, 256, 256});
  auto probs = b.op("aten.softmax.int", {T(masked), C(-1)}, {2, 8, 256, 256});
  auto out = b.op("aten.matmul.default", {T(probs), T(v)}, {2, 8, 256, 64});
  const auto d = discover(b.finish({out}));
  ASSERT_EQ(d.matches.size(), 1u) << describe(d.matches);
  const Match& m = d.matches[0];
  EXPECT_EQ(m.pattern, "attention");
  EXPECT_EQ(m.rule, "attention_causal");
  EXPECT_EQ(m.status, MatchStatus::Pending);
  EXPECT_EQ(m.reason, "no template yet (attention issue)");
  EXPECT_EQ(m.classification, Classification::New);
  EXPECT_EQ(m.problems.size(), 1u);
  EXPECT_EQ(m.problems[0].kind, "attention");
  EXPECT_EQ(m.roles.at("q"), "q");
  EXPECT_EQ(m.roles.at("k"), "k");
  EXPECT_EQ(m.roles.at("v"), "v");
  EXPECT_EQ(m.roles.at("mask"), "causal");
  EXPECT_EQ(m.roles.at("output"), out);
  EXPECT_EQ(m.extra["seq"], 256);
  EXPECT_EQ(m.nodes.size(), 6u);
  // A fused attention reads q, k, v once and never writes the 2x8x256x256 scores.
  EXPECT_LT(m.est_after_us, m.est_before_us);
}

}  // namespace
}  // namespace fact::discover
