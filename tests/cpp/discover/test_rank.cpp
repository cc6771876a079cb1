// Roofline estimates, classification and ranking.
#include <gtest/gtest.h>

#include "fact/discover/rank.hpp"
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

DiscoverOptions round_numbers(core::PrecisionMode precision = core::PrecisionMode::Strict) {
  DiscoverOptions o;
  o.precision = precision;
  o.device.hbm_bytes_per_s = 1e12;
  o.device.bf16_flops = 1e15;
  o.device.tf32_flops = 3e14;
  o.device.fp32_flops = 5e13;
  o.device.launch_overhead_s = 1e-6;
  return o;
}

TEST(PytorchNodeSeconds, ViewsAreFreeElementwiseIsOnePass) {
  GraphBuilder b(DType::Float32);
  auto x = b.input("x", {1024, 1024});
  auto v = b.op("aten.view.default", {T(x), C(std::vector<int64_t>{1024 * 1024})}, {1024 * 1024});
  auto r = b.op("aten.relu.default", {T(x)}, {1024, 1024});
  auto same = b.op("aten.to.dtype", {T(x), C("float32")}, {1024, 1024});
  auto half = b.op("aten.to.dtype", {T(x), C("float16")}, {1024, 1024}, OpOptions{.dtype = DType::Float16});
  const auto g = b.finish({v, r, same, half});
  const auto o = round_numbers();
  EXPECT_EQ(pytorch_node_seconds(g, *g.node(v), o), 0.0);
  EXPECT_EQ(pytorch_node_seconds(g, *g.node(same), o), 0.0);
  EXPECT_DOUBLE_EQ(pytorch_node_seconds(g, *g.node(r), o), 2.0 * 4 * 1024 * 1024 / 1e12 + 1e-6);
  EXPECT_DOUBLE_EQ(pytorch_node_seconds(g, *g.node(half), o), 6.0 * 1024 * 1024 / 1e12 + 1e-6);
}

TEST(PytorchNodeSeconds, Float32MatmulsRunOnCudaCoresUnlessTf32) {
  GraphBuilder b(DType::Float32);
  auto x = b.input("x", {4096, 4096});
  auto w = b.parameter("w", {4096, 4096});
  auto y = testing::linear(b, x, w);
  const auto g = b.finish({y});
  const double flops = 2.0 * 4096 * 4096 * 4096;
  EXPECT_DOUBLE_EQ(pytorch_node_seconds(g, *g.node(y), round_numbers(core::PrecisionMode::Strict)), flops / 5e13 + 1e-6);
  EXPECT_DOUBLE_EQ(pytorch_node_seconds(g, *g.node(y), round_numbers(core::PrecisionMode::Tf32)), flops / 3e14 + 1e-6);
}

// The GEMM kind's roofline of one fused kernel, as ranking asks for it.
double fused_gemm_seconds(const GemmProblem& p, const DiscoverOptions& o) {
  return kind_of(to_problem(p)).fused_seconds(to_problem(p).desc, o.device, o.precision);
}

TEST(FusedGemmSeconds, RatesByDtypeAndPrecision) {
  GemmProblem p;
  p.m = p.n = p.k = 4096;
  p.a.dtype = p.b.dtype = p.d.dtype = DType::Float32;
  const double flops = 2.0 * 4096 * 4096 * 4096;
  EXPECT_DOUBLE_EQ(fused_gemm_seconds(p, round_numbers(core::PrecisionMode::Strict)), flops / 1e14 + 1e-6);  // 3xTF32
  EXPECT_DOUBLE_EQ(fused_gemm_seconds(p, round_numbers(core::PrecisionMode::Tf32)), flops / 3e14 + 1e-6);
  p.a.dtype = p.b.dtype = p.d.dtype = DType::BFloat16;
  EXPECT_DOUBLE_EQ(fused_gemm_seconds(p, round_numbers()), flops / 1e15 + 1e-6);
  p.m = 16;  // memory bound
  EXPECT_DOUBLE_EQ(fused_gemm_seconds(p, round_numbers()), p.min_bytes() / 1e12 + 1e-6);
}

TEST(Estimate, FusedEpilogueSavesTheSeparatePasses) {
  GraphBuilder b(DType::BFloat16);
  auto x = b.input("x", {4096, 1024});
  auto w = b.parameter("w", {1024, 1024});
  auto y = testing::linear(b, x, w);
  auto r = b.op("aten.relu.default", {T(y)}, {4096, 1024});
  const auto g = b.finish({r});
  const auto o = round_numbers();
  const auto d = discover(g, o);
  ASSERT_EQ(d.matches.size(), 1u);
  const Match& m = d.matches.front();
  const double gemm_bytes = 2.0 * (4096.0 * 1024 * 2 + 1024.0 * 1024);
  const double flops = 2.0 * 4096 * 1024 * 1024;
  const double relu = 2.0 * 2 * 4096 * 1024 / 1e12 + 1e-6;
  const double gemm = std::max(flops / 1e15, gemm_bytes / 1e12) + 1e-6;
  EXPECT_NEAR(m.est_before_us, (gemm + relu) * 1e6, 1e-9);
  EXPECT_NEAR(m.est_after_us, gemm * 1e6, 1e-9);
  EXPECT_GT(m.est_saved_us(), 0.0);
}

TEST(Classify, ReuseAdaptNew) {
  Match m;
  m.status = MatchStatus::Accepted;
  GemmProblem p;
  p.m = p.n = p.k = 128;
  p.a.dtype = p.b.dtype = DType::BFloat16;
  m.problems = {gemm::to_problem(p)};
  DiscoverOptions o;
  EXPECT_EQ(classify(m, true, o), Classification::Adapt);
  EXPECT_EQ(classify(m, false, o), Classification::New);
  o.key_of = [](const Problem&, core::PrecisionMode) { return std::string("other spelling"); };
  EXPECT_EQ(classify(m, true, o), Classification::Adapt);
  o.tuned_keys.insert("other spelling");
  EXPECT_EQ(classify(m, true, o), Classification::Reuse);
  m.status = MatchStatus::Pending;
  EXPECT_EQ(classify(m, true, o), Classification::New);
}

TEST(RankMatches, AcceptedBySavingsThenPendingThenDeclined) {
  auto make = [](const char* rule, MatchStatus s, double before, double after) {
    Match m;
    m.rule = rule;
    m.status = s;
    m.est_before_us = before;
    m.est_after_us = after;
    return m;
  };
  std::vector<Match> ms{make("declined_small", MatchStatus::Declined, 5, 5),
                        make("accepted_small", MatchStatus::Accepted, 10, 9),
                        make("pending", MatchStatus::Pending, 100, 10),
                        make("declined_big", MatchStatus::Declined, 50, 50),
                        make("accepted_big", MatchStatus::Accepted, 10, 2)};
  rank_matches(ms);
  std::vector<std::string> order;
  for (const auto& m : ms) order.push_back(m.rule);
  EXPECT_EQ(order, (std::vector<std::string>{"accepted_big", "accepted_small", "pending",
                                             "declined_big", "declined_small"}));
}

}  // namespace
}  // namespace fact::discover
