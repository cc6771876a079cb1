// Discovery on graphs captured from the example models (tests/data/graphs, regenerate.py).
#include <gtest/gtest.h>

#include <tuple>

#include <algorithm>

#include "fact/discover/canonicalize.hpp"
#include "fact/discover/discover.hpp"
#include "tests/cpp/discover/discover_test_util.hpp"

namespace fact::discover {
namespace {

using namespace ::fact::gemm;  // NOLINT: the GEMM problem types these tests look at
using testing::gemms;

// True when the problem's last epilogue step is the rope step (it writes D in the original columns).
bool ends_in_rope(const ::fact::gemm::GemmProblem& p) {
  return !p.epilogue.empty() && p.epilogue.back().kind == ::fact::gemm::EpilogueStep::Kind::Rope;
}

using testing::count_status;
using testing::covering;
using testing::describe;
using testing::find_rule;
using testing::load_fixture;
using Ids = std::vector<std::string>;
using Kind = EpilogueStep::Kind;

std::vector<Kind> kinds(const GemmProblem& p) {
  std::vector<Kind> k;
  for (const auto& s : p.epilogue) k.push_back(s.kind);
  return k;
}

class MinGpt : public ::testing::TestWithParam<const char*> {};

TEST_P(MinGpt, ProjectionsMlpAndAttention) {
  const auto g = load_fixture(GetParam());
  const auto d = discover(g);
  SCOPED_TRACE(describe(d.matches));
  // The attention is one match in both dtypes (bf16: the native kernel; float32: the 3xTF32
  // kernel of the default strict mode), with the QKV projection, the output projection and the MLP.
  ASSERT_EQ(d.matches.size(), 4u);
  EXPECT_EQ(count_status(d.matches, MatchStatus::Accepted), 4u);

  // QKV projection: the bias fused, the split left to PyTorch.
  const Match* qkv = covering(d.matches, "linear");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->rule, "gemm_bias");
  EXPECT_EQ(gemms(*qkv).at(0).shape_string(), "65536x2304x768");
  EXPECT_EQ(gemms(*qkv)[0].b.layout, Layout::ColumnMajor);
  EXPECT_EQ(qkv->roles.at("weight"), "p_attn_c_attn_weight");

  // Attention (patterns/attention): accepted; it reads the QKV projection through the split and
  // writes the merged heads (contiguous()).
  const Match* attention = covering(d.matches, "softmax");
  ASSERT_NE(attention, nullptr);
  EXPECT_EQ(attention->pattern, "attention");
  EXPECT_EQ(attention->status, MatchStatus::Accepted) << attention->reason;
  EXPECT_EQ(attention->classification, Classification::Adapt);
  EXPECT_EQ(attention->extra["batch"], 128);
  EXPECT_EQ(attention->extra["heads"], 8);
  EXPECT_EQ(attention->extra["seq"], 512);
  EXPECT_EQ(attention->extra["head_dim"], 96);
  EXPECT_TRUE(attention->extra["causal"].get<bool>());
  EXPECT_NEAR(attention->extra["scale"].get<double>(), 1.0 / std::sqrt(96.0), 1e-12);
  for (const char* id : {"matmul", "mul", "masked_fill", "matmul_1", "transpose_3"}) {
    EXPECT_NE(std::find(attention->nodes.begin(), attention->nodes.end(), id), attention->nodes.end()) << id;
  }

  // Output projection + residual; the head merge (transpose, contiguous) is the attention's.
  const Match* proj = covering(d.matches, "linear_1");
  ASSERT_NE(proj, nullptr);
  EXPECT_EQ(proj->rule, "gemm_bias_residual");
  EXPECT_EQ(proj->nodes, (Ids{"view_3", "linear_1", "add"}));
  EXPECT_EQ(proj->roles.at("residual"), "x");
  EXPECT_EQ(covering(d.matches, "contiguous"), attention);
  EXPECT_EQ(covering(d.matches, "split"), attention);

  // MLP: up-projection with tanh-GELU fused, down-projection with its residual add.
  const Match* mlp = covering(d.matches, "linear_2");
  ASSERT_NE(mlp, nullptr);
  EXPECT_EQ(mlp->rule, "mlp_gelu_tanh");
  EXPECT_EQ(mlp, covering(d.matches, "linear_3"));
  ASSERT_EQ(gemms(*mlp).size(), 2u);
  EXPECT_EQ(gemms(*mlp)[0].fusion_name(), "gemm_bias_gelu_tanh");
  EXPECT_EQ(gemms(*mlp)[0].shape_string(), "65536x3072x768");
  EXPECT_EQ(gemms(*mlp)[1].fusion_name(), "gemm_bias_residual");
  EXPECT_EQ(gemms(*mlp)[1].shape_string(), "65536x768x3072");
  EXPECT_EQ(gemms(*mlp)[1].a.value, gemms(*mlp)[0].d.value);
  EXPECT_EQ(gemms(*mlp)[1].epilogue[1].operand, "add");
  EXPECT_EQ(mlp->nodes.size(), 11u);  // linear_2, the 8 GELU ops, linear_3, add_3

  // Ranking: accepted first, by time saved.
  EXPECT_EQ(d.matches.front().rule, "mlp_gelu_tanh");
  EXPECT_EQ(d.matches.back().status, MatchStatus::Accepted);
  for (const auto& m : d.matches) {
    if (m.status == MatchStatus::Accepted) EXPECT_GE(m.est_before_us, m.est_after_us) << m.rule;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MinGpt,
                         ::testing::Values("mingpt_block_bf16.json", "mingpt_block_fp32.json"),
                         [](const auto& info) {  // mingpt_block_bf16
                           const std::string file = info.param;
                           return file.substr(0, file.find('.'));
                         });

TEST(MinGptFp32, PrecisionModeDecidesTheMath) {
  const auto g = load_fixture("mingpt_block_fp32.json");
  DiscoverOptions strict;
  auto d = discover(g, strict);
  EXPECT_EQ(find_rule(d.matches, "gemm_bias")->extra["math"], "3xtf32");
  DiscoverOptions tf32;
  tf32.precision = core::PrecisionMode::Tf32;
  d = discover(g, tf32);
  EXPECT_EQ(find_rule(d.matches, "gemm_bias")->extra["math"], "tf32");
  DiscoverOptions native;
  native.precision = core::PrecisionMode::Native;
  d = discover(g, native);
  SCOPED_TRACE(describe(d.matches));
  EXPECT_EQ(count_status(d.matches, MatchStatus::Accepted), 0u);
  // The MLP does not stand when its kernels cannot be built: each GEMM declines on its own.
  EXPECT_EQ(find_rule(d.matches, "mlp_gelu_tanh"), nullptr);
  const Match* up = find_rule(d.matches, "gemm_bias_gelu_tanh");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->status, MatchStatus::Declined);
  EXPECT_NE(up->reason.find("--precision strict"), std::string::npos);
}

// The q / k projections with their rotary embedding fused (patterns/rope) when the
// selection names the rope rule (it is opt-in); by default they are plain GEMMs and the rope
// rule reports each with the measured reason.
TEST(Llama, ProjectionsWithoutTheOptInRopeArePlainGemms) {
  const auto d = discover(load_fixture("llama_block_bf16.json"));
  SCOPED_TRACE(describe(d.matches));
  // 6 accepted; the 2 rope reports and the 2 rmsnorm reports (patterns/rmsnorm, also opt-in).
  ASSERT_EQ(d.matches.size(), 10u);
  EXPECT_EQ(count_status(d.matches, MatchStatus::Accepted), 6u);
  for (const char* rule : {"rmsnorm_3_matches", "rmsnorm_swiglu_mlp"}) {
    const Match* norm = find_rule(d.matches, rule);
    ASSERT_NE(norm, nullptr) << rule;
    EXPECT_EQ(norm->status, MatchStatus::Declined);
    EXPECT_NE(norm->reason.find("fused rmsnorm is opt-in"), std::string::npos) << norm->reason;
  }
  for (const auto& [node, shape] : std::vector<std::pair<std::string, std::string>>{
           {"linear", "8192x4096x4096"}, {"linear_1", "8192x1024x4096"}, {"linear_2", "8192x1024x4096"}}) {
    const Match* m = covering(d.matches, node);  // accepted matches rank first
    ASSERT_NE(m, nullptr) << node;
    EXPECT_EQ(m->rule, "gemm") << node;
    EXPECT_EQ(m->status, MatchStatus::Accepted) << m->reason;
    EXPECT_EQ(gemms(*m).at(0).shape_string(), shape) << node;
    EXPECT_FALSE(ends_in_rope(gemms(*m).at(0))) << node;
  }
  for (size_t i = 0; i < 2; ++i) {
    const Match* rope = find_rule(d.matches, "gemm_rope_rotate_half", i);
    ASSERT_NE(rope, nullptr) << i;
    EXPECT_EQ(rope->status, MatchStatus::Declined);
    EXPECT_NE(rope->reason.find("fused rope is opt-in"), std::string::npos) << rope->reason;
  }
}

TEST(Llama, ProjectionsSwigluAndAttention) {
  const auto g = load_fixture("llama_block_bf16.json");
  DiscoverOptions options;
  options.opt_in = {"rope"};
  const auto d = discover(g, options);
  SCOPED_TRACE(describe(d.matches));
  ASSERT_EQ(d.matches.size(), 8u);  // 6 accepted, the 2 opt-in rmsnorm reports (not named here)
  // q and k projections carry their rotary embedding (patterns/rope, opted in); v is a GEMM.
  for (const auto& [node, shape, rule] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"linear", "8192x4096x4096", "gemm_rope_rotate_half"},
           {"linear_1", "8192x1024x4096", "gemm_rope_rotate_half"},
           {"linear_2", "8192x1024x4096", "gemm"}}) {
    const Match* m = covering(d.matches, node);
    ASSERT_NE(m, nullptr) << node;
    EXPECT_EQ(m->rule, rule) << node;
    EXPECT_EQ(gemms(*m).at(0).shape_string(), shape) << node;
    EXPECT_EQ(m->status, MatchStatus::Accepted) << m->reason;
  }
  const Match* o = covering(d.matches, "linear_3");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->rule, "gemm_residual");
  EXPECT_EQ(o->nodes, (Ids{"linear_3", "add_4"}));

  const Match* swiglu = covering(d.matches, "mul_9");
  ASSERT_NE(swiglu, nullptr);
  EXPECT_EQ(swiglu->rule, "swiglu_mlp");
  EXPECT_EQ(swiglu->nodes, (Ids{"linear_4", "silu", "linear_5", "mul_9", "linear_6", "add_6"}));
  // bf16: gate and up as one GEMM over their interleaved weights, then the down GEMM
  // with the residual.
  EXPECT_EQ(swiglu->status, MatchStatus::Accepted) << swiglu->reason;
  ASSERT_EQ(gemms(*swiglu).size(), 2u);
  EXPECT_EQ(gemms(*swiglu)[0].fusion_name(), "gemm_glu_silu");
  EXPECT_EQ(gemms(*swiglu)[0].shape_string(), "8192x28672x4096");
  EXPECT_EQ(gemms(*swiglu)[0].d_cols(), 14336);
  ASSERT_EQ(swiglu->derived.size(), 1u);
  EXPECT_EQ(gemms(*swiglu)[0].b.value, swiglu->derived[0].value);
  EXPECT_EQ(swiglu->derived[0].shape, (std::vector<int64_t>{28672, 4096}));
  EXPECT_EQ(gemms(*swiglu)[1].fusion_name(), "gemm_residual");
  EXPECT_EQ(gemms(*swiglu)[1].a.value, gemms(*swiglu)[0].d.value);
  EXPECT_EQ(gemms(*swiglu)[1].shape_string(), "8192x4096x14336");

  const Match* attention = covering(d.matches, "softmax");
  ASSERT_NE(attention, nullptr);
  EXPECT_EQ(attention->status, MatchStatus::Accepted) << attention->reason;  // GQA 32/8, d128
  EXPECT_EQ(attention->extra["heads"], 32);
  EXPECT_EQ(attention->extra["kv_heads"], 8);
  EXPECT_EQ(attention->extra["head_dim"], 128);
  EXPECT_EQ(attention->extra["softmax_dtype"], "float32");
  EXPECT_TRUE(attention->extra["causal"].get<bool>());
}

TEST(SmallFixtures, LinearReluBmmAndTransposedMatmul) {
  auto d = discover(load_fixture("linear_relu.json"));
  ASSERT_EQ(d.matches.size(), 1u);
  EXPECT_EQ(d.matches[0].rule, "gemm_bias_relu");
  EXPECT_EQ(d.matches[0].nodes, (Ids{"linear", "relu"}));

  d = discover(load_fixture("bmm.json"));
  ASSERT_EQ(d.matches.size(), 1u);
  EXPECT_EQ(d.matches[0].rule, "bgemm");
  EXPECT_EQ(gemms(d.matches[0])[0].shape_string(), "8x(128x32x64)");

  d = discover(load_fixture("matmul_transposed.json"));
  ASSERT_EQ(d.matches.size(), 1u);
  EXPECT_EQ(d.matches[0].nodes, (Ids{"transpose", "matmul"}));
  EXPECT_EQ(gemms(d.matches[0])[0].b.value, "w");
  EXPECT_EQ(gemms(d.matches[0])[0].b.layout, Layout::ColumnMajor);
  EXPECT_EQ(gemms(d.matches[0])[0].b.ld, 64);
}

}  // namespace
}  // namespace fact::discover
