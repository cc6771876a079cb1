// Strided views: torch's view rule, collapsing batch dims, view-like ops, operand tracing.
#include <gtest/gtest.h>

#include "fact/discover/strided_view.hpp"
#include "fact/graph/graph_builder.hpp"

namespace fact::discover {
namespace {


using graph::C;
using graph::DType;
using graph::GraphBuilder;
using graph::OpOptions;
using graph::T;
using V = std::vector<int64_t>;

TEST(Restride, MergesAndSplitsContiguousRuns) {
  StridedView contiguous{{2, 3, 4}, {12, 4, 1}};
  EXPECT_EQ(restride(contiguous, {6, 4}), V({4, 1}));
  EXPECT_EQ(restride(contiguous, {-1}), V({1}));
  EXPECT_EQ(restride(contiguous, {2, 3, 2, 2}), V({12, 4, 2, 1}));
  EXPECT_EQ(restride(contiguous, {1, 24, 1}), V({24, 1, 1}));
  EXPECT_FALSE(restride(contiguous, {5, 5}));
  EXPECT_FALSE(restride(contiguous, {-1, -1}));
}

TEST(Restride, SeesThroughRowPaddedViewsButNotTransposes) {
  // One third of a fused QKV projection output [B, T, 3C]: [B, T, C] with row stride 3C.
  StridedView split_part{{2, 16, 64}, {3072, 192, 1}};
  EXPECT_EQ(restride(split_part, {32, 64}), V({192, 1}));
  EXPECT_EQ(restride(split_part, {2, 16, 4, 16}), V({3072, 192, 16, 1}));
  EXPECT_FALSE(restride(split_part, {2, 1024}));  // rows are not adjacent
  StridedView transposed{{4, 6}, {1, 4}};
  EXPECT_FALSE(restride(transposed, {24}));
  // Heads after the transpose: [B, H, T, D] over [B, T, 3C] memory.
  StridedView heads{{2, 4, 16, 16}, {3072, 16, 192, 1}};
  EXPECT_FALSE(restride(heads, {8, 16, 16}));
}

TEST(CollapseDims, OneStrideOrNone) {
  StridedView heads{{2, 4, 16, 16}, {3072, 16, 192, 1}};
  EXPECT_FALSE(collapse_dims(heads, 0, 2));
  StridedView contiguous{{2, 4, 16, 16}, {1024, 256, 16, 1}};
  EXPECT_EQ(collapse_dims(contiguous, 0, 2), 256);
  EXPECT_EQ(collapse_dims(contiguous, 0, 3), 16);
  StridedView broadcast{{2, 4, 16, 16}, {0, 0, 16, 1}};
  EXPECT_EQ(collapse_dims(broadcast, 0, 2), 0);
  StridedView half_broadcast{{2, 4, 16, 16}, {0, 256, 16, 1}};
  EXPECT_FALSE(collapse_dims(half_broadcast, 0, 2));
  StridedView unit{{1, 32, 16, 16}, {999, 256, 16, 1}};
  EXPECT_EQ(collapse_dims(unit, 0, 2), 256);
  EXPECT_EQ(collapse_dims(unit, 0, 0), 0);
}

TEST(ApplyViewLike, TransposePermuteExpandUnsqueezeSqueeze) {
  GraphBuilder b(DType::Float32);
  auto x = b.input("x", {2, 3, 4});
  const StridedView in{{2, 3, 4}, {12, 4, 1}};
  auto node_of = [&](const graph::ValueId& id) { return *b.graph().producer(id); };

  auto t = b.op("aten.transpose.int", {T(x), C(-2), C(-1)}, {2, 4, 3});
  EXPECT_EQ(apply_view_like(node_of(t), in), (StridedView{{2, 4, 3}, {12, 1, 4}}));
  auto p = b.op("aten.permute.default", {T(x), C(V{2, 0, 1})}, {4, 2, 3});
  EXPECT_EQ(apply_view_like(node_of(p), in), (StridedView{{4, 2, 3}, {1, 12, 4}}));
  auto u = b.op("aten.unsqueeze.default", {T(x), C(0)}, {1, 2, 3, 4});
  EXPECT_EQ(apply_view_like(node_of(u), in), (StridedView{{1, 2, 3, 4}, {24, 12, 4, 1}}));
  auto e = b.op("aten.expand.default", {T(u), C(V{5, -1, 3, 4})}, {5, 2, 3, 4});
  EXPECT_EQ(apply_view_like(node_of(e), StridedView{{1, 2, 3, 4}, {24, 12, 4, 1}}),
            (StridedView{{5, 2, 3, 4}, {0, 12, 4, 1}}));
  auto s = b.op("aten.squeeze.dim", {T(u), C(0)}, {2, 3, 4});
  EXPECT_EQ(apply_view_like(node_of(s), StridedView{{1, 2, 3, 4}, {24, 12, 4, 1}}), in);
  auto c = b.op("aten.clone.default", {T(t)}, {2, 4, 3});
  EXPECT_EQ(apply_view_like(node_of(c), StridedView{{2, 4, 3}, {12, 1, 4}}),
            (StridedView{{2, 4, 3}, {12, 1, 4}}));
  auto bad = b.op("aten.expand.default", {T(x), C(V{2, 5, 4})}, {2, 5, 4});
  EXPECT_FALSE(apply_view_like(node_of(bad), in));
  auto not_a_view = b.op("aten.relu.default", {T(x)}, {2, 3, 4});
  EXPECT_FALSE(apply_view_like(node_of(not_a_view), in));
}

TEST(TraceOperand, TakesTheFurthestStartThatReadsInPlace) {
  // Decomposed bmm operand: view -> permute -> expand -> clone -> view.
  GraphBuilder b(DType::Float32);
  auto qkv = b.input("qkv", {2, 16, 64}, V{3072, 192, 1});
  auto v = b.op("aten.view.default", {T(qkv), C(V{2, 16, 4, 16})}, {2, 16, 4, 16},
                OpOptions{.stride = V{3072, 192, 16, 1}});
  auto p = b.op("aten.permute.default", {T(v), C(V{0, 2, 1, 3})}, {2, 4, 16, 16},
                OpOptions{.stride = V{3072, 16, 192, 1}});
  auto e = b.op("aten.expand.default", {T(p), C(V{2, 4, 16, 16})}, {2, 4, 16, 16},
                OpOptions{.stride = V{3072, 16, 192, 1}});
  auto c = b.op("aten.clone.default", {T(e)}, {2, 4, 16, 16});
  auto flat = b.op("aten.view.default", {T(c), C(V{8, 16, 16})}, {8, 16, 16});
  b.op("aten.relu.default", {T(flat)}, {8, 16, 16});
  const auto g = b.graph();

  auto any_view = [](const StridedView&) { return true; };
  auto traced = trace_operand(g, flat, any_view);
  // Reading [8, 16, 16] straight out of qkv is impossible (heads do not collapse), so the
  // copy made by clone stays and only the last view is absorbed.
  EXPECT_TRUE(traced.accepted);
  EXPECT_EQ(traced.source, c);
  EXPECT_EQ(traced.absorbed, std::vector<std::string>{flat});
  EXPECT_EQ(traced.view, (StridedView{{8, 16, 16}, {256, 16, 1}}));

  auto four_d = trace_operand(g, p, any_view);
  EXPECT_EQ(four_d.source, qkv);
  EXPECT_EQ(four_d.absorbed, (std::vector<std::string>{v, p}));
  EXPECT_EQ(four_d.view, (StridedView{{2, 4, 16, 16}, {3072, 16, 192, 1}}));

  auto refuse_all = [](const StridedView&) { return false; };
  auto refused = trace_operand(g, flat, refuse_all);
  EXPECT_FALSE(refused.accepted);
  EXPECT_EQ(refused.source, flat);
  EXPECT_TRUE(refused.absorbed.empty());
}

TEST(TraceOperand, StopsAtValuesWithOtherReaders) {
  GraphBuilder b(DType::Float32);
  auto w = b.input("w", {8, 4});
  auto t = b.op("aten.t.default", {T(w)}, {4, 8}, OpOptions{.stride = V{1, 4}});
  b.op("aten.relu.default", {T(t)}, {4, 8});  // the operand's reader
  b.op("aten.neg.default", {T(t)}, {4, 8});   // and another one
  const auto g = b.graph();
  auto traced = trace_operand(g, t, [](const StridedView&) { return true; });
  EXPECT_EQ(traced.source, t);
  EXPECT_TRUE(traced.absorbed.empty());
}

}  // namespace
}  // namespace fact::discover
