// patterns/rope rule on captured graphs (patterns/rope/tests/graphs, regenerate.py): rotary
// embeddings of a projection's heads become the projection with a Rope step when the selection
// names the rule (it is opt-in: measured slower than the plain GEMM + Inductor's rotary, see
// README.md); by default, and for what the rope epilogue cannot compute, it is declined with
// its reason (a report: the projection stays a GEMM).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "fact/discover/discover.hpp"
#include "fact/graph/graph_json.hpp"
#include "tests/cpp/discover/discover_test_util.hpp"

namespace fact::discover {
namespace {

using namespace ::fact::gemm;  // NOLINT: the GEMM problem types these tests look at
using graph::DType;
using testing::describe;
using testing::find_rule;
using testing::gemms;
using Kind = EpilogueStep::Kind;

// True when the problem's last epilogue step is the rope step (it writes D in the original columns).
bool ends_in_rope(const ::fact::gemm::GemmProblem& p) {
  return !p.epilogue.empty() && p.epilogue.back().kind == ::fact::gemm::EpilogueStep::Kind::Rope;
}

// Discovery with the rope rule named by the selection (DiscoverOptions::opt_in): any of its
// names opts in.
DiscoverOptions opted_in(const std::string& name = "rope") {
  DiscoverOptions options;
  options.opt_in = {name};
  return options;
}

graph::Graph rope_fixture(const std::string& name) {
  return graph::load_graph(std::filesystem::path(FACT_SOURCE_DIR) / "patterns/rope/tests/graphs" / (name + ".json"));
}

const Match* rope_match(const std::vector<Match>& matches) {
  for (const auto& m : matches) {
    if (m.pattern == "rope") return &m;
  }
  return nullptr;
}

// The fixtures' sizes: x [2, 16, 64], q_proj 64 -> 4 heads of 16.
void expect_rope_problem(const Match& m, bool interleaved, int64_t period_stride) {
  ASSERT_EQ(gemms(m).size(), 1u);
  const GemmProblem p = gemms(m)[0];
  EXPECT_EQ(p.m, 32);
  EXPECT_EQ(p.n, 64);
  EXPECT_EQ(p.k, 64);
  EXPECT_TRUE(ends_in_rope(p));
  const EpilogueStep& rope = p.epilogue.back();
  EXPECT_EQ(rope.kind, Kind::Rope);
  EXPECT_EQ(rope.group, 16);
  EXPECT_EQ(rope.period, 16);
  EXPECT_EQ(rope.period_stride, period_stride);
  EXPECT_EQ(rope.interleaved, interleaved);
  EXPECT_EQ(rope.operand_ld, 16);
  EXPECT_EQ(rope.operand_dtype, DType::BFloat16);
  EXPECT_EQ(m.roles.at("cos"), rope.operand);
  EXPECT_EQ(m.roles.at("sin"), rope.operand2);
  EXPECT_EQ(p.d.value, m.roles.at("output"));
  EXPECT_EQ(p.d.ld, 64);
  EXPECT_EQ(m.outputs, (std::vector<graph::ValueId>{p.d.value}));
}

TEST(RopeRule, RotateHalfOfTransposedHeadsPermutesTheWeightRows) {
  const auto d = discover(rope_fixture("rotate_half_bf16"), opted_in());
  SCOPED_TRACE(describe(d.matches));
  ASSERT_EQ(d.matches.size(), 1u);
  const Match& m = d.matches[0];
  EXPECT_EQ(m.rule, "gemm_rope_rotate_half");
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  EXPECT_EQ(m.nodes, (std::vector<graph::NodeId>{"linear", "view", "transpose", "mul", "slice_3", "neg",
                                                 "slice_4", "cat", "mul_1", "add"}));
  expect_rope_problem(m, false, 0);
  EXPECT_EQ(m.roles.at("cos"), "to");  // the sliced buffer cast to bf16
  EXPECT_EQ(m.roles.at("sin"), "to_1");
  ASSERT_EQ(m.derived.size(), 1u);
  const DerivedOperand& w = m.derived[0];
  EXPECT_EQ(w.from, (std::vector<graph::ValueId>{"p_q_proj_weight"}));
  EXPECT_EQ(gemms(m)[0].b.value, w.value);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{64, 64}));
  ASSERT_EQ(w.ops.size(), 3u);  // [H, 2, hd/2, K] -> [H, hd/2, 2, K] -> [N, K]
  EXPECT_EQ(w.ops[0].attrs.at("shape"), nlohmann::json({4, 2, 8, 64}));
  EXPECT_EQ(w.ops[1].op, "permute");
  EXPECT_EQ(w.ops[1].attrs.at("dims"), nlohmann::json({0, 2, 1, 3}));
  EXPECT_EQ(w.ops[2].attrs.at("shape"), nlohmann::json({64, 64}));
  EXPECT_EQ(m.extra.at("rope"), "rotate_half");
}

TEST(RopeRule, Qwen2BiasIsPermutedLikeTheWeightAndAddedBeforeTheRotation) {
  const auto d = discover(rope_fixture("rotate_half_bias_bf16"), opted_in("gemm_rope"));
  SCOPED_TRACE(describe(d.matches));
  ASSERT_EQ(d.matches.size(), 1u);
  const Match& m = d.matches[0];
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  expect_rope_problem(m, false, 0);
  const GemmProblem p = gemms(m)[0];
  ASSERT_EQ(p.epilogue.size(), 2u);
  EXPECT_EQ(p.epilogue[0].kind, Kind::Bias);
  ASSERT_EQ(m.derived.size(), 2u);
  EXPECT_EQ(p.epilogue[0].operand, m.derived[1].value);
  EXPECT_EQ(m.derived[1].from, (std::vector<graph::ValueId>{"p_q_proj_bias"}));
  EXPECT_EQ(m.derived[1].ops[0].attrs.at("shape"), nlohmann::json({4, 2, 8}));
  EXPECT_EQ(p.fusion_name(), "gemm_bias_rope");
}

TEST(RopeRule, UntransposedHeadsWriteAContiguousOutput) {
  const auto d = discover(rope_fixture("rotate_half_untransposed_bf16"), opted_in());
  SCOPED_TRACE(describe(d.matches));
  ASSERT_EQ(d.matches.size(), 1u);
  EXPECT_EQ(d.matches[0].status, MatchStatus::Accepted) << d.matches[0].reason;
  expect_rope_problem(d.matches[0], false, 0);
}

TEST(RopeRule, GptjInterleavedPairsKeepTheWeight) {
  const auto d = discover(rope_fixture("interleaved_bf16"), opted_in("gemm_rope_interleaved"));
  SCOPED_TRACE(describe(d.matches));
  const Match* m = rope_match(d.matches);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->rule, "gemm_rope_interleaved");
  EXPECT_EQ(m->status, MatchStatus::Accepted) << m->reason;
  expect_rope_problem(*m, true, 0);
  EXPECT_TRUE(m->derived.empty());
  EXPECT_EQ(gemms(*m)[0].b.value, "p_q_proj_weight");
  // The tables are the repeat_interleave'd [1, T, 1, hd] values the model computes.
  EXPECT_EQ(m->roles.at("cos"), "repeat_interleave_1");
  EXPECT_EQ(m->roles.at("sin"), "repeat_interleave");
}

TEST(RopeRule, TransformersTablesPerSequenceAreReadWithTheirBatchStride) {
  const auto d = discover(rope_fixture("per_sequence_tables_bf16"), opted_in("gemm_rope_rotate_half"));
  SCOPED_TRACE(describe(d.matches));
  const Match* m = rope_match(d.matches);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->status, MatchStatus::Accepted) << m->reason;
  expect_rope_problem(*m, false, 16 * 16);  // cos [B, 1, T, hd]: one table per sequence
}

TEST(RopeRule, Float32StaysDeclinedWithTheReason) {
  const auto d = discover(rope_fixture("rotate_half_fp32"));
  SCOPED_TRACE(describe(d.matches));
  const Match* m = rope_match(d.matches);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->status, MatchStatus::Declined);
  EXPECT_NE(m->reason.find("float32"), std::string::npos) << m->reason;
  // A report: the projection is still a GEMM.
  const Match* gemm = find_rule(d.matches, "gemm");
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->status, MatchStatus::Accepted);
}

TEST(RopeRule, TablesThatDifferBetweenHeadsAreDeclined) {
  const auto d = discover(rope_fixture("table_per_head_bf16"));
  SCOPED_TRACE(describe(d.matches));
  const Match* m = rope_match(d.matches);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->status, MatchStatus::Declined);
  EXPECT_NE(m->reason.find("differs between heads"), std::string::npos) << m->reason;
  ASSERT_NE(find_rule(d.matches, "gemm"), nullptr);
}

TEST(RopeRule, PartialRotaryIsDeclinedWithTheReason) {
  const auto d = discover(rope_fixture("partial_rotary_bf16"));
  SCOPED_TRACE(describe(d.matches));
  const Match* m = rope_match(d.matches);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->status, MatchStatus::Declined);
  EXPECT_NE(m->reason.find("partial rotary (the first 8 of 16"), std::string::npos) << m->reason;
  ASSERT_NE(find_rule(d.matches, "gemm"), nullptr);
}

// By default (no selection, or one that does not name the rope rule) every match the rule
// would accept is a report with the measured reason, and the projection is the GEMM rule's.
TEST(RopeRule, ByDefaultTheFusionIsDeclinedAndTheProjectionStaysAGemm) {
  for (const char* fixture : {"rotate_half_bf16", "rotate_half_bias_bf16", "rotate_half_untransposed_bf16",
                              "interleaved_bf16", "per_sequence_tables_bf16"}) {
    for (const DiscoverOptions& options : {DiscoverOptions{}, opted_in("gemm"), opted_in("attention")}) {
      const auto d = discover(rope_fixture(fixture), options);
      SCOPED_TRACE(std::string(fixture) + "\n" + describe(d.matches));
      const Match* m = rope_match(d.matches);
      ASSERT_NE(m, nullptr);
      EXPECT_EQ(m->status, MatchStatus::Declined);
      EXPECT_NE(m->reason.find("fused rope is opt-in"), std::string::npos) << m->reason;
      EXPECT_NE(m->reason.find("patterns=['rope'"), std::string::npos) << m->reason;
      EXPECT_NE(m->reason.find("fact plan --patterns rope"), std::string::npos) << m->reason;
      EXPECT_NE(m->reason.find("bench/results/blocks-nvidia-h100-80gb-hbm3-2026-11-25-llama-rope.json"),
                std::string::npos)
          << m->reason;
      EXPECT_TRUE(m->problems.empty());
      EXPECT_TRUE(m->derived.empty());
      // It names what it would have replaced: the projection and the rotation.
      EXPECT_NE(std::find(m->nodes.begin(), m->nodes.end(), "linear"), m->nodes.end());
      ASSERT_FALSE(m->nodes.empty());
      EXPECT_EQ(m->nodes.back().rfind("add", 0), 0u) << m->nodes.back();  // the rotation's add
      // The projection is a plain GEMM (with its bias for Qwen2), no rope step.
      const Match* gemm = nullptr;
      for (const auto& other : d.matches) {
        if (other.pattern == "gemm" && std::find(other.nodes.begin(), other.nodes.end(), "linear") != other.nodes.end())
          gemm = &other;
      }
      ASSERT_NE(gemm, nullptr);
      EXPECT_EQ(gemm->status, MatchStatus::Accepted) << gemm->reason;
      ASSERT_EQ(gemms(*gemm).size(), 1u);
      EXPECT_FALSE(ends_in_rope(gemms(*gemm)[0]));
      EXPECT_EQ(gemms(*gemm)[0].shape_string(), "32x64x64");
    }
  }
}

TEST(RopeRule, TheRotationOfAnInputIsNoMatch) {
  const auto d = discover(rope_fixture("no_gemm_bf16"));
  EXPECT_EQ(rope_match(d.matches), nullptr) << describe(d.matches);
}

}  // namespace
}  // namespace fact::discover
