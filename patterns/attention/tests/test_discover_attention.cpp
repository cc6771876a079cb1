// patterns/attention rule: a fact.attention node becomes a match, accepted when the attention
// kernel computes it, declined with the precise reason otherwise; and discovery on the captured
// minGPT and Llama blocks (tests/data/graphs).
#include <gtest/gtest.h>

#include <fstream>

#include "fact/discover/discover.hpp"
#include "fact/graph/graph_json.hpp"
#include "tests/cpp/discover/discover_test_util.hpp"

namespace fact::discover {
namespace {

using graph::C;
using graph::DType;
using graph::GraphBuilder;
using graph::OpOptions;
using graph::T;
using testing::describe;

// softmax(q·kᵀ / 8 + mask) · v on [2, 8, 256, d] q/k/v inputs with an additive mask buffer.
graph::Graph additive_buffer_attention(int64_t d, DType dtype) {
  GraphBuilder b(dtype);
  auto q = b.input("q", {2, 8, 256, d});
  auto k = b.input("k", {2, 8, 256, d});
  auto v = b.input("v", {2, 8, 256, d});
  auto kt = b.op("aten.transpose.int", {T(k), C(-2), C(-1)}, {2, 8, d, 256},
                 OpOptions{.stride = std::vector<int64_t>{8 * 256 * d, 256 * d, 1, d}});
  auto scores = b.op("aten.matmul.default", {T(q), T(kt)}, {2, 8, 256, 256});
  auto scaled = b.op("aten.mul.Tensor", {T(scores), C(0.125)}, {2, 8, 256, 256});
  auto mask = b.buffer("causal", {256, 256});
  auto masked = b.op("aten.add.Tensor", {T(scaled), T(mask)}, {2, 8, 256, 256});
  auto probs = b.op("aten.softmax.int", {T(masked), C(-1)}, {2, 8, 256, 256});
  auto out = b.op("aten.matmul.default", {T(probs), T(v)}, {2, 8, 256, d});
  return b.finish({out});
}

TEST(AttentionRule, AcceptedWhenTheKernelTakesIt) {
  const auto d = discover(additive_buffer_attention(64, DType::BFloat16));
  ASSERT_EQ(d.matches.size(), 1u) << describe(d.matches);
  const Match& m = d.matches[0];
  EXPECT_EQ(m.pattern, "attention");
  EXPECT_EQ(m.rule, "attention_causal");
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  EXPECT_EQ(m.classification, Classification::Adapt);
  ASSERT_EQ(m.problems.size(), 1u);
  EXPECT_EQ(m.problems[0].kind, "attention");
  EXPECT_EQ(m.problems[0].desc["mask_kind"], "causal_top_left");
  // The buffer's contents are not captured: assumed, and said so.
  EXPECT_NE(m.problems[0].desc["causal_evidence"].get<std::string>().find("assumed"), std::string::npos);
  EXPECT_EQ(m.roles.at("q"), "q");
  EXPECT_EQ(m.roles.at("mask"), "causal");
  EXPECT_EQ(m.extra["seq"], 256);
  EXPECT_EQ(m.nodes.size(), 6u);
  // A fused attention reads q, k, v once and never writes the 2x8x256x256 scores.
  EXPECT_LT(m.est_after_us, m.est_before_us);
}

const Match* attention_match(const Discovery& d) {
  for (const auto& m : d.matches) {
    if (m.pattern == "attention") return &m;
  }
  return nullptr;
}

// Declined decomposed attentions stay as their two GEMMs (which the GEMM pattern composes); the
// attention is reported with the reason, claiming nothing.
TEST(AttentionRule, DeclinesHeadDimsWithoutAKernel) {
  const auto d = discover(additive_buffer_attention(32, DType::BFloat16));
  const Match* attention = attention_match(d);
  ASSERT_NE(attention, nullptr) << describe(d.matches);
  EXPECT_EQ(attention->status, MatchStatus::Declined);
  EXPECT_EQ(attention->reason, "head dim 32 has no kernel (built for 64, 80, 96, 128) (its products stay GEMMs)");
  EXPECT_EQ(attention->nodes.size(), 6u);
  size_t gemms = 0;
  for (const auto& m : d.matches) gemms += m.pattern == "gemm" ? 1 : 0;
  EXPECT_EQ(gemms, 2u) << describe(d.matches);
}

TEST(AttentionRule, Float32IsAcceptedInStrictAndTf32AndDeclinedInNative) {
  for (const char* precision : {"strict", "tf32"}) {
    DiscoverOptions options;
    options.precision = core::parse_precision(precision);
    const auto d = discover(additive_buffer_attention(64, DType::Float32), options);
    const Match* attention = attention_match(d);
    ASSERT_NE(attention, nullptr) << describe(d.matches);
    EXPECT_EQ(attention->status, MatchStatus::Accepted) << precision << ": " << attention->reason;
    EXPECT_EQ(attention->problems.at(0).desc.at("dtype"), "float32");
  }
  DiscoverOptions native;
  native.precision = core::PrecisionMode::Native;
  const auto d = discover(additive_buffer_attention(64, DType::Float32), native);
  const Match* attention = attention_match(d);
  ASSERT_NE(attention, nullptr) << describe(d.matches);
  EXPECT_EQ(attention->status, MatchStatus::Declined);
  EXPECT_NE(attention->reason.find("float32 attention in a 'native' run"), std::string::npos) << attention->reason;
}

graph::Graph load(const std::string& name) {
  return graph::load_graph(std::string(FACT_SOURCE_DIR) + "/tests/data/graphs/" + name);
}

TEST(AttentionRule, MinGptBlockReadsTheFusedProjectionAndWritesMergedHeads) {
  const auto d = discover(load("mingpt_block_bf16.json"));
  const Match* attention = nullptr;
  for (const auto& m : d.matches) {
    if (m.pattern == "attention") attention = &m;
  }
  ASSERT_NE(attention, nullptr) << describe(d.matches);
  EXPECT_EQ(attention->status, MatchStatus::Accepted) << attention->reason;
  const auto& desc = attention->problems.at(0).desc;
  // q, k, v: three views of the c_attn output [128, 512, 2304] (no split, no copies).
  for (const char* t : {"q", "k", "v"}) EXPECT_EQ(desc[t]["value"], "linear") << t;
  EXPECT_EQ(desc["q"]["offset"], 0);
  EXPECT_EQ(desc["k"]["offset"], 768);
  EXPECT_EQ(desc["v"]["offset"], 1536);
  EXPECT_EQ(desc["q"]["stride"], (std::vector<int64_t>{512 * 2304, 96, 2304, 1}));
  // The output is the merged-heads tensor the output projection reads.
  EXPECT_EQ(desc["out"]["value"], "contiguous");
  EXPECT_EQ(desc["out"]["stride"], (std::vector<int64_t>{512 * 768, 96, 768, 1}));
  EXPECT_EQ(desc["scale"].get<double>(), 1.0 / std::sqrt(96.0));
  EXPECT_EQ(attention->nodes.front(), "split");
  EXPECT_EQ(attention->nodes.back(), "contiguous");
  // The c_proj GEMM (view_3, linear_1, + residual) still reads `contiguous`.
  bool proj = false;
  for (const auto& m : d.matches) {
    if (m.pattern == "gemm" && !m.nodes.empty() && m.nodes.front() == "view_3") proj = m.status == MatchStatus::Accepted;
  }
  EXPECT_TRUE(proj) << describe(d.matches);
}

TEST(AttentionRule, MinGptBlockInFloat32RunsTheFloat32KernelInStrictMode) {
  const auto d = discover(load("mingpt_block_fp32.json"));  // strict: the default for float32
  bool seen = false;
  for (const auto& m : d.matches) {
    if (m.pattern != "attention") continue;
    seen = true;
    EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
    EXPECT_EQ(m.problems.at(0).desc.at("dtype"), "float32");
    EXPECT_EQ(m.problems.at(0).desc.at("head_dim"), 96);
  }
  EXPECT_TRUE(seen);
}

TEST(AttentionRule, LlamaBlockGroupedQueryHeads) {
  const auto d = discover(load("llama_block_bf16.json"));
  const Match* attention = nullptr;
  for (const auto& m : d.matches) {
    if (m.pattern == "attention") attention = &m;
  }
  ASSERT_NE(attention, nullptr) << describe(d.matches);
  EXPECT_EQ(attention->status, MatchStatus::Accepted) << attention->reason;
  EXPECT_EQ(attention->problems[0].desc["heads"], 32);
  EXPECT_EQ(attention->problems[0].desc["kv_heads"], 8);
  EXPECT_EQ(attention->problems[0].desc["head_dim"], 128);
}

}  // namespace
}  // namespace fact::discover
