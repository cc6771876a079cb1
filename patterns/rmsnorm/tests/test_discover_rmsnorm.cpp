// patterns/rmsnorm prologue on captured graphs (patterns/rmsnorm/tests/graphs, regenerate.py):
// an RMSNorm whose readers are all projections of accepted GEMM-family matches is folded into
// them when the selection names it (it is opt-in, README.md): each projection reads the
// pre-norm x, its weight becomes the derived W·diag(g) and its epilogue starts with a RowScale
// by the graph's rsqrt; the matches are merged into one. By default, and for what the fold cannot
// take, the norm is a declined report and the projections stay as the other rules made them.
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

DiscoverOptions opted_in(std::set<std::string> names = {"rmsnorm"}) {
  DiscoverOptions options;
  options.opt_in = std::move(names);
  return options;
}

graph::Graph fixture(const std::string& name) {
  return graph::load_graph(std::filesystem::path(FACT_SOURCE_DIR) / "patterns/rmsnorm/tests/graphs" /
                           (name + ".json"));
}

const Match* rmsnorm_match(const std::vector<Match>& matches, size_t nth = 0) {
  for (const auto& m : matches) {
    if (m.pattern == "rmsnorm" && nth-- == 0) return &m;
  }
  return nullptr;
}

const DerivedOperand* derived(const Match& m, const graph::ValueId& value) {
  for (const auto& d : m.derived) {
    if (d.value == value) return &d;
  }
  return nullptr;
}

// The projection reads x, its weight with the norm weight folded in, and scales rows by rstd
// first. `weight`: the projection weight the fold starts from (the first source of the program).
void expect_folded(const Match& m, const GemmProblem& p, const graph::ValueId& weight) {
  EXPECT_EQ(p.a.value, "x");
  EXPECT_EQ(p.a.dtype, DType::BFloat16);
  ASSERT_FALSE(p.epilogue.empty());
  EXPECT_EQ(p.epilogue[0].kind, Kind::RowScale);
  EXPECT_EQ(p.epilogue[0].operand, "rsqrt");
  EXPECT_EQ(p.epilogue[0].operand_dtype, DType::Float32);
  const DerivedOperand* w = derived(m, p.b.value);
  ASSERT_NE(w, nullptr) << p.b.value;
  ASSERT_GE(w->from.size(), 2u);
  EXPECT_EQ(w->from.front(), weight);
  EXPECT_EQ(w->from.back(), "p_norm_weight");
  EXPECT_EQ(w->shape, (std::vector<int64_t>{p.n, p.k}));
  EXPECT_EQ(w->dtype, DType::BFloat16);
  // ... to float32, the norm weight to float32, their product, rounded once to bf16.
  ASSERT_GE(w->ops.size(), 4u);
  const size_t n = w->ops.size();
  EXPECT_EQ(w->ops[n - 4].op, "to");
  EXPECT_EQ(w->ops[n - 3].op, "to");
  EXPECT_EQ(w->ops[n - 3].args, (std::vector<std::string>{"$" + std::to_string(w->from.size() - 1)}));
  EXPECT_EQ(w->ops[n - 2].op, "mul");
  EXPECT_EQ(w->ops[n - 1].op, "to");
}

TEST(RmsNormRule, QkvProjectionsReadTheInputAndScaleRows) {
  const auto d = discover(fixture("norm_qkv_bf16"), opted_in());
  SCOPED_TRACE(describe(d.matches));
  ASSERT_EQ(d.matches.size(), 1u);
  const Match& m = d.matches[0];
  EXPECT_EQ(m.rule, "rmsnorm_3_matches");
  EXPECT_EQ(m.pattern, "rmsnorm");
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  EXPECT_EQ(m.nodes, (std::vector<graph::NodeId>{"mul", "to_1", "mul_1", "linear", "linear_1", "linear_2"}));
  auto outputs = m.outputs;
  std::sort(outputs.begin(), outputs.end());
  EXPECT_EQ(outputs, (std::vector<graph::ValueId>{"linear", "linear_1", "linear_2"}));
  EXPECT_EQ(m.roles.at("input"), "x");
  EXPECT_EQ(m.roles.at("rstd"), "rsqrt");
  EXPECT_EQ(m.roles.at("norm_weight"), "p_norm_weight");
  EXPECT_DOUBLE_EQ(m.extra.at("eps").get<double>(), 1e-6);
  EXPECT_EQ(m.extra.at("folded_projections"), 3);
  const auto problems = gemms(m);
  ASSERT_EQ(problems.size(), 3u);
  ASSERT_EQ(m.derived.size(), 3u);
  std::vector<graph::ValueId> weights;
  for (const auto& p : problems) {
    EXPECT_EQ(p.m, 32);
    EXPECT_EQ(p.k, 64);
    EXPECT_EQ(p.epilogue.size(), 1u);
    EXPECT_EQ(p.fusion_name(), "gemm_row_scale");
    weights.push_back(derived(m, p.b.value) ? derived(m, p.b.value)->from.front() : "");
    expect_folded(m, p, weights.back());
  }
  std::sort(weights.begin(), weights.end());
  EXPECT_EQ(weights, (std::vector<graph::ValueId>{"p_k_weight", "p_q_weight", "p_v_weight"}));
}

TEST(RmsNormRule, ByDefaultTheNormIsAReportAndTheProjectionsStayPlain) {
  for (const auto& options : {DiscoverOptions{}, opted_in({"gemm"})}) {
    const auto d = discover(fixture("norm_qkv_bf16"), options);
    SCOPED_TRACE(describe(d.matches));
    const Match* m = rmsnorm_match(d.matches);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->status, MatchStatus::Declined);
    EXPECT_NE(m->reason.find("fused rmsnorm is opt-in"), std::string::npos) << m->reason;
    EXPECT_TRUE(m->problems.empty());
    EXPECT_TRUE(m->derived.empty());
    size_t plain = 0;
    for (const auto& other : d.matches) {
      if (other.pattern != "gemm") continue;
      ++plain;
      EXPECT_EQ(other.status, MatchStatus::Accepted) << other.reason;
      EXPECT_EQ(gemms(other).at(0).a.value, "mul_1");  // the normalized value
    }
    EXPECT_EQ(plain, 3u);
  }
}

TEST(RmsNormRule, ProjectionBiasesComeAfterTheRowScale) {
  const auto d = discover(fixture("norm_qkv_bias_bf16"), opted_in({"rmsnorm_3_matches"}));
  SCOPED_TRACE(describe(d.matches));
  const Match* m = rmsnorm_match(d.matches);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->status, MatchStatus::Accepted) << m->reason;
  for (const auto& p : gemms(*m)) {
    ASSERT_EQ(p.epilogue.size(), 2u);
    EXPECT_EQ(p.epilogue[0].kind, Kind::RowScale);
    EXPECT_EQ(p.epilogue[1].kind, Kind::Bias);
    EXPECT_EQ(p.fusion_name(), "gemm_row_scale_bias");
  }
}

TEST(RmsNormRule, SwigluOneGemmFoldsIntoTheInterleavedWeight) {
  const auto d = discover(fixture("norm_swiglu_bf16"), opted_in());
  SCOPED_TRACE(describe(d.matches));
  ASSERT_EQ(d.matches.size(), 1u);
  const Match& m = d.matches[0];
  EXPECT_EQ(m.rule, "rmsnorm_swiglu_mlp");
  EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
  EXPECT_EQ(m.extra.at("fused_into"), nlohmann::json({"swiglu_mlp"}));
  const auto problems = gemms(m);
  ASSERT_EQ(problems.size(), 2u);
  const GemmProblem& gated = problems[0];
  ASSERT_EQ(gated.epilogue.size(), 2u);
  EXPECT_EQ(gated.epilogue[1].kind, Kind::Glu);
  expect_folded(m, gated, "p_gate_weight");
  const DerivedOperand* w = derived(m, gated.b.value);
  ASSERT_NE(w, nullptr);
  // The interleave (stack, reshape) then the fold; the interleaved weight alone is gone.
  EXPECT_EQ(w->from, (std::vector<graph::ValueId>{"p_gate_weight", "p_up_weight", "p_norm_weight"}));
  EXPECT_EQ(w->ops[0].op, "stack");
  EXPECT_EQ(m.derived.size(), 1u);
  EXPECT_EQ(m.roles.at("swiglu_mlp.gate_up_weight"), gated.b.value);  // the role follows the fold
  // The down projection reads the product and keeps its residual.
  const GemmProblem& down = problems[1];
  EXPECT_NE(down.a.value, "x");
  EXPECT_EQ(down.epilogue.back().kind, Kind::Residual);
  EXPECT_EQ(down.epilogue.back().operand, "x");
}

TEST(RmsNormRule, Float32IsDeclined) {
  const auto d = discover(fixture("norm_qkv_fp32"), opted_in());
  SCOPED_TRACE(describe(d.matches));
  const Match* m = rmsnorm_match(d.matches);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->status, MatchStatus::Declined);
  EXPECT_NE(m->reason.find("dtype float32"), std::string::npos) << m->reason;
  EXPECT_EQ(std::count_if(d.matches.begin(), d.matches.end(),
                          [](const Match& x) { return x.pattern == "gemm"; }),
            3);
}

TEST(RmsNormRule, DeclinesWhatTheFoldCannotTake) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"norm_also_returned_bf16", "also read by"},
      {"norm_other_dim_bf16", "not the last"},
      {"norm_computed_weight_bf16", "computed by the graph"},
  };
  for (const auto& [name, reason] : cases) {
    SCOPED_TRACE(name);
    const auto d = discover(fixture(name), opted_in());
    SCOPED_TRACE(describe(d.matches));
    const Match* m = rmsnorm_match(d.matches);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->status, MatchStatus::Declined);
    EXPECT_NE(m->reason.find(reason), std::string::npos) << m->reason;
    EXPECT_TRUE(m->problems.empty());
    // The projection is still a GEMM of its own.
    EXPECT_NE(std::find_if(d.matches.begin(), d.matches.end(),
                           [](const Match& x) { return x.pattern == "gemm" && x.status == MatchStatus::Accepted; }),
              d.matches.end());
  }
}

// The fold of g = w + c: W and w to float32, c added to w, their product, rounded once to bf16.
void expect_offset_fold(const Match& m, const GemmProblem& p, const graph::ValueId& norm_weight) {
  EXPECT_EQ(p.a.value, "x");
  ASSERT_FALSE(p.epilogue.empty());
  EXPECT_EQ(p.epilogue[0].kind, Kind::RowScale);
  const DerivedOperand* w = derived(m, p.b.value);
  ASSERT_NE(w, nullptr) << p.b.value;
  ASSERT_EQ(w->from.size(), 2u);
  EXPECT_EQ(w->from.back(), norm_weight);
  std::vector<std::string> ops;
  for (const auto& op : w->ops) ops.push_back(op.op);
  EXPECT_EQ(ops, (std::vector<std::string>{"to", "to", "add_scalar", "mul", "to"}));
  EXPECT_DOUBLE_EQ(w->ops[2].attrs.at("value").get<double>(), 1.0);
  EXPECT_EQ(w->ops[2].args, (std::vector<std::string>{"%1"}));
}

// transformers' GemmaRMSNorm: (x_f · rstd · (1 + w.float())).type_as(x) — the weight multiplies in
// float32 before the cast and is one plus a parameter: folded as W·diag(1 + w); the cast back is
// claimed with the norm's tail.
TEST(RmsNormRule, GemmaNormFoldsWithItsOffsetWeight) {
  const auto d = discover(fixture("norm_gemma_qkv_bf16"), opted_in());
  SCOPED_TRACE(describe(d.matches));
  const Match* m = rmsnorm_match(d.matches);
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->status, MatchStatus::Accepted) << m->reason;
  EXPECT_EQ(m->extra.at("folded_projections"), 3);
  for (const auto& p : gemms(*m)) expect_offset_fold(*m, p, "p_norm_weight");
}

TEST(RmsNormRule, OffsetWeightInLlamaOrderFolds) {
  const auto d = discover(fixture("norm_offset_weight_bf16"), opted_in());
  SCOPED_TRACE(describe(d.matches));
  const Match* m = rmsnorm_match(d.matches);
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->status, MatchStatus::Accepted) << m->reason;
  ASSERT_EQ(gemms(*m).size(), 1u);
  expect_offset_fold(*m, gemms(*m).front(), "p_w");
}

// The bench Llama block (tests/data/graphs/llama_block_bf16.json): both norms fold, the first
// into q / k (with their rope when it is named too) and v, the second into the SwiGLU MLP.
TEST(RmsNormRule, LlamaBlockFoldsBothNorms) {
  const auto d = discover(testing::load_fixture("llama_block_bf16.json"), opted_in({"rmsnorm", "rope"}));
  SCOPED_TRACE(describe(d.matches));
  const Match* attention_input = nullptr;
  const Match* mlp_input = nullptr;
  for (size_t i = 0; const Match* m = rmsnorm_match(d.matches, i); ++i) {
    EXPECT_EQ(m->status, MatchStatus::Accepted) << m->reason;
    if (m->roles.at("input") == "x") attention_input = m;
    else mlp_input = m;
  }
  ASSERT_NE(attention_input, nullptr);
  ASSERT_NE(mlp_input, nullptr);
  EXPECT_EQ(attention_input->extra.at("folded_projections"), 3);
  size_t roped = 0;
  for (const auto& p : gemms(*attention_input)) {
    EXPECT_EQ(p.epilogue.front().kind, Kind::RowScale);
    if (ends_in_rope(p)) {
      ++roped;
      ASSERT_EQ(p.epilogue.size(), 2u);  // row scale, then the rotation
      const DerivedOperand* w = derived(*attention_input, p.b.value);
      ASSERT_NE(w, nullptr);
      EXPECT_EQ(w->ops[0].op, "reshape");  // the rope's row permutation, then the fold
      EXPECT_EQ(w->from.size(), 2u);
    }
  }
  EXPECT_EQ(roped, 2u);
  EXPECT_EQ(mlp_input->rule, "rmsnorm_swiglu_mlp");
  EXPECT_EQ(gemms(*mlp_input).front().epilogue.back().kind, Kind::Glu);
}

}  // namespace
}  // namespace fact::discover
