// Backward graphs: the dgrad GEMM of a Linear → activation → Linear block (grad_out · W, through
// AOTAutograd's views and transposes) absorbs the activation's backward op — aten.gelu_backward
// (tanh → gelu_tanh_grad, erf → gelu_erf_grad), aten.threshold_backward at 0 (relu_grad),
// aten.silu_backward (silu_grad) — as an epilogue step whose M×N operand is the saved forward
// tensor. The graphs are graph JSON shaped as AOTAutograd writes them (docs/graph_json.md).
#include <gtest/gtest.h>

#include <string>

#include "fact/discover/discover.hpp"
#include "fact/graph/graph_json.hpp"
#include "tests/cpp/discover/discover_test_util.hpp"

namespace fact::discover {
namespace {

using namespace ::fact::gemm;  // NOLINT: the GEMM problem types these tests look at
using nlohmann::json;
using testing::describe;
using testing::gemms;
using Kind = EpilogueStep::Kind;

json value(const std::string& id, const char* kind, std::vector<int64_t> shape, std::vector<int64_t> stride) {
  return {{"id", id}, {"kind", kind}, {"shape", shape}, {"stride", stride}, {"dtype", "float32"},
          {"device", "cpu"}};
}

json node(const std::string& id, const std::string& target, json args, json kwargs = json::object()) {
  return {{"id", id}, {"target", target}, {"args", std::move(args)}, {"kwargs", std::move(kwargs)},
          {"outputs", {id}}};
}

json tensor(const std::string& id) { return {{"tensor", id}}; }
json constant(json c) { return {{"const", std::move(c)}}; }

// The input gradient of the second Linear ([2, 8, 16] tokens · W2 [16, 64], W2 saved as t_1 =
// W2ᵀ and transposed back) and the activation's backward op `target` over it. `saved_3d`: the
// saved tensor is [2, 8, 64] and the product is viewed back to it (AOT's batch-3-D form); else
// the saved tensor is a 2-D pre-activation [16, 64] viewed as [2, 8, 64] in the backward graph.
// `acc_first` false puts the product second.
graph::Graph backward_graph(const std::string& target, json extra_args, json kwargs, bool saved_3d = true,
                            bool acc_first = true) {
  json values = json::array({
      value("saved", "input", saved_3d ? std::vector<int64_t>{2, 8, 64} : std::vector<int64_t>{16, 64},
            saved_3d ? std::vector<int64_t>{512, 64, 1} : std::vector<int64_t>{64, 1}),
      value("t_1", "input", {64, 16}, {1, 64}),
      value("tangents_1", "input", {2, 8, 16}, {128, 16, 1}),
      value("view_3", "intermediate", {16, 16}, {16, 1}),
      value("t", "intermediate", {16, 64}, {64, 1}),
      value("mm", "intermediate", {16, 64}, {64, 1}),
      value("view_5", "intermediate", {2, 8, 64}, {512, 64, 1}),
      value("grad", "intermediate", {2, 8, 64}, {512, 64, 1}),
  });
  json nodes = json::array({
      node("view_3", "aten.view.default", {tensor("tangents_1"), constant({16, 16})}),
      node("t", "aten.t.default", {tensor("t_1")}),
      node("mm", "aten.mm.default", {tensor("view_3"), tensor("t")}),
      node("view_5", "aten.view.default", {tensor("mm"), constant({2, 8, 64})}),
  });
  std::string saved = "saved";
  if (!saved_3d) {
    values.push_back(value("view_4", "intermediate", {2, 8, 64}, {512, 64, 1}));
    nodes.push_back(node("view_4", "aten.view.default", {tensor("saved"), constant({2, 8, 64})}));
    saved = "view_4";
  }
  json args = acc_first ? json::array({tensor("view_5"), tensor(saved)})
                        : json::array({tensor(saved), tensor("view_5")});
  for (const json& a : extra_args) args.push_back(a);
  nodes.push_back(node("grad", target, args, std::move(kwargs)));
  json doc = {{"schema", "fact.graph/1"},
              {"source", {{"module", "backward"}, {"capture", "test"}}},
              {"values", values},
              {"nodes", nodes},
              {"inputs", {"saved", "t_1", "tangents_1"}},
              {"outputs", {"grad"}}};
  return graph::graph_from_json(doc);
}

const Match& gemm_match(const Discovery& d) {
  EXPECT_EQ(d.matches.size(), 1u) << describe(d.matches);
  if (d.matches.empty()) throw std::runtime_error("no match");
  return d.matches.front();
}

struct Case {
  const char* target;
  json extra_args, kwargs;
  Kind kind;
  const char* rule;
};

TEST(BackwardSteps, DgradGemmAbsorbsTheActivationsBackwardWithTheSavedOperand) {
  const std::vector<Case> cases = {
      {"aten.gelu_backward.default", json::array(), {{"approximate", constant("tanh")}}, Kind::GeluTanhGrad,
       "gemm_gelu_tanh_grad"},
      {"aten.gelu_backward.default", json::array(), json::object(), Kind::GeluErfGrad, "gemm_gelu_erf_grad"},
      {"aten.gelu_backward.default", json::array(), {{"approximate", constant("none")}}, Kind::GeluErfGrad,
       "gemm_gelu_erf_grad"},
      {"aten.threshold_backward.default", json::array({constant(0)}), json::object(), Kind::ReluGrad,
       "gemm_relu_grad"},
      {"aten.threshold_backward.default", json::array({constant(0.0)}), json::object(), Kind::ReluGrad,
       "gemm_relu_grad"},
      {"aten.silu_backward.default", json::array(), json::object(), Kind::SiluGrad, "gemm_silu_grad"},
  };
  for (const Case& c : cases) {
    for (bool saved_3d : {true, false}) {
      SCOPED_TRACE(std::string(c.rule) + (saved_3d ? " saved [2, 8, 64]" : " saved [16, 64] viewed"));
      const Discovery d = discover(backward_graph(c.target, c.extra_args, c.kwargs, saved_3d));
      const Match& m = gemm_match(d);
      EXPECT_EQ(m.rule, c.rule);
      EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
      EXPECT_EQ(m.nodes, (std::vector<std::string>{"view_3", "t", "mm", "view_5", "grad"}));
      const std::string saved = saved_3d ? "saved" : "view_4";
      EXPECT_EQ(m.roles.at("saved"), saved);
      EXPECT_EQ(m.roles.at("input"), "tangents_1");
      EXPECT_EQ(m.roles.at("weight"), "t_1");
      EXPECT_EQ(m.roles.at("output"), "grad");
      ASSERT_EQ(gemms(m).size(), 1u);
      const GemmProblem p = gemms(m)[0];
      EXPECT_EQ(p.m, 16);
      EXPECT_EQ(p.n, 64);
      EXPECT_EQ(p.k, 16);
      EXPECT_EQ(p.b.value, "t_1");  // t(W2ᵀ) = W2 [16, 64] read in place: row-major, ld 64
      EXPECT_EQ(p.b.layout, Layout::RowMajor);
      EXPECT_EQ(p.b.ld, 64);
      EXPECT_EQ(p.d.value, "grad");
      ASSERT_EQ(p.epilogue.size(), 1u);
      EXPECT_EQ(p.epilogue[0].kind, c.kind);
      EXPECT_EQ(p.epilogue[0].operand, saved);
      EXPECT_EQ(p.epilogue[0].operand_dtype, graph::DType::Float32);
      EXPECT_EQ(p.epilogue[0].operand_ld, 64);
      EXPECT_EQ(p.epilogue[0].operand_batch_stride, 0);
      EXPECT_EQ(m.extra["math"], "3xtf32");
    }
  }
}

// Not the step: another threshold (not ReLU's), an approximation the table does not know, an
// argument the row does not name, the product as the saved tensor rather than the gradient.
TEST(BackwardSteps, OtherSpellingsStayPyTorchs) {
  const std::vector<graph::Graph> graphs = {
      backward_graph("aten.threshold_backward.default", json::array({constant(0.5)}), json::object()),
      backward_graph("aten.threshold_backward.default", json::array(), json::object()),
      backward_graph("aten.gelu_backward.default", json::array(), {{"approximate", constant("sigmoid")}}),
      backward_graph("aten.silu_backward.default", json::array(), {{"inplace", constant(true)}}),
      backward_graph("aten.gelu_backward.default", json::array(), json::object(), true, /*acc_first=*/false),
  };
  for (size_t i = 0; i < graphs.size(); ++i) {
    SCOPED_TRACE(i);
    const Discovery d = discover(graphs[i]);
    const Match& m = gemm_match(d);
    EXPECT_EQ(m.rule, "gemm");
    EXPECT_EQ(m.status, MatchStatus::Accepted) << m.reason;
    EXPECT_EQ(m.nodes, (std::vector<std::string>{"view_3", "t", "mm", "view_5"}));
    EXPECT_TRUE(gemms(m).at(0).epilogue.empty());
  }
}

}  // namespace
}  // namespace fact::discover
