// Helpers shared by the discovery tests (tests/cpp/discover and patterns/*/test_rule_*.cpp).
#pragma once
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "fact/discover/discover.hpp"
#include "fact/graph/graph.hpp"
#include "fact/graph/graph_builder.hpp"
#include "fact/graph/graph_json.hpp"
#include "patterns/gemm/kind/problem.hpp"

namespace fact::discover::testing {

inline graph::Graph load_fixture(const std::string& name) {
  return graph::load_graph(std::string(FACT_SOURCE_DIR) + "/tests/data/graphs/" + name);
}

// The GEMM problems of a match (its calls of kind gemm), as the GEMM pattern reads them.
inline std::vector<gemm::GemmProblem> gemms(const Match& m) {
  std::vector<gemm::GemmProblem> out;
  for (const auto& p : m.problems) {
    if (p.kind == gemm::kKindName) out.push_back(gemm::gemm_problem_of(p));
  }
  return out;
}

// One line per match: "rule [status] nodes=a,b,c gemms=MxNxK,... reason".
inline std::string describe(const std::vector<Match>& matches) {
  std::ostringstream out;
  for (const auto& m : matches) {
    out << m.rule << " [" << match_status_name(m.status) << "] nodes=";
    for (size_t i = 0; i < m.nodes.size(); ++i) out << (i ? "," : "") << m.nodes[i];
    out << " gemms=";
    const auto problems = gemms(m);
    for (size_t i = 0; i < problems.size(); ++i)
      out << (i ? "," : "") << problems[i].fusion_name() << ":" << problems[i].shape_string();
    if (!m.reason.empty()) out << " reason=" << m.reason;
    out << "\n";
  }
  return out.str();
}

inline const Match* find_rule(const std::vector<Match>& matches, const std::string& rule,
                              size_t nth = 0) {
  for (const auto& m : matches) {
    if (m.rule == rule && nth-- == 0) return &m;
  }
  return nullptr;
}

// The match whose covered nodes include `node`.
inline const Match* covering(const std::vector<Match>& matches, const std::string& node) {
  for (const auto& m : matches) {
    for (const auto& id : m.nodes) {
      if (id == node) return &m;
    }
  }
  return nullptr;
}

inline const graph::Node* find_target(const graph::Graph& g, const std::string& target,
                                      size_t nth = 0) {
  for (const auto& n : g.nodes()) {
    if (n.target == target && nth-- == 0) return &n;
  }
  return nullptr;
}

inline size_t count_target(const graph::Graph& g, const std::string& target) {
  size_t count = 0;
  for (const auto& n : g.nodes()) count += n.target == target;
  return count;
}

inline std::vector<int64_t> with_last(std::vector<int64_t> shape, int64_t last) {
  shape.back() = last;
  return shape;
}

// aten.linear(x, w[, bias]) with w of shape [N, K]: output [..., N].
inline graph::ValueId linear(graph::GraphBuilder& b, const graph::ValueId& x,
                             const graph::ValueId& w, const std::optional<graph::ValueId>& bias = {}) {
  const auto& g = b.graph();
  std::vector<graph::Arg> args{graph::T(x), graph::T(w)};
  if (bias) args.push_back(graph::T(*bias));
  return b.op("aten.linear.default", args,
              with_last(g.value(x).desc.shape, g.value(w).desc.shape.front()));
}

// A unary op keeping the input's shape.
inline graph::ValueId unary(graph::GraphBuilder& b, const std::string& target,
                            const graph::ValueId& x, std::vector<graph::Arg> extra = {}) {
  std::vector<graph::Arg> args{graph::T(x)};
  args.insert(args.end(), extra.begin(), extra.end());
  return b.op(target, args, b.graph().value(x).desc.shape);
}

// A binary elementwise op (add / mul / ...) whose output has `a`'s shape.
inline graph::ValueId binary(graph::GraphBuilder& b, const std::string& target, graph::Arg a,
                             graph::Arg c) {
  const auto& shape = a.is_tensor() ? b.graph().value(a.tensor).desc.shape
                                    : b.graph().value(c.tensor).desc.shape;
  return b.op(target, {a, c}, shape);
}

inline size_t count_status(const std::vector<Match>& matches, MatchStatus status) {
  size_t n = 0;
  for (const auto& m : matches) n += m.status == status;
  return n;
}

}  // namespace fact::discover::testing
