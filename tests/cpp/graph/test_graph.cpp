// The in-memory graph IR: tensor metadata, producer / consumer indexes, the builder.
#include <gtest/gtest.h>

#include "fact/graph/graph.hpp"
#include "fact/graph/graph_builder.hpp"
#include "fact/graph/tensor_desc.hpp"

namespace fact::graph {
namespace {

TEST(TensorDesc, ParsesAndNamesDtypes) {
  EXPECT_EQ(parse_dtype("bfloat16"), DType::BFloat16);
  EXPECT_EQ(parse_dtype("torch.float16"), DType::Float16);
  EXPECT_EQ(parse_dtype("float8_e4m3fn"), DType::Unknown);
  for (DType d : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16, DType::Int64,
                  DType::Int32, DType::Int16, DType::Int8, DType::UInt8, DType::Bool}) {
    EXPECT_EQ(parse_dtype(dtype_name(d)), d) << dtype_name(d);
  }
  EXPECT_EQ(dtype_bytes(DType::BFloat16), 2);
  EXPECT_EQ(dtype_bytes(DType::Float64), 8);
  EXPECT_EQ(dtype_bytes(DType::Unknown), 0);
  EXPECT_TRUE(is_floating(DType::Float16));
  EXPECT_FALSE(is_floating(DType::Int8));
}

TEST(TensorDesc, ContiguityIgnoresUnitDimensions) {
  TensorDesc d{{128, 512, 768}, {393216, 768, 1}, DType::BFloat16, "cuda:0"};
  EXPECT_TRUE(d.is_contiguous());
  EXPECT_EQ(d.numel(), 128 * 512 * 768);
  EXPECT_EQ(d.to_string(), "[128, 512, 768] bfloat16");
  TensorDesc transposed{{64, 96}, {1, 64}, DType::Float32, "cpu"};
  EXPECT_FALSE(transposed.is_contiguous());
  TensorDesc unit{{1, 1, 512, 512}, {262144, 999, 512, 1}, DType::Float32, "cpu"};
  EXPECT_TRUE(unit.is_contiguous());
  TensorDesc split_view{{128, 512, 768}, {1179648, 2304, 1}, DType::Float32, "cpu"};
  EXPECT_FALSE(split_view.is_contiguous());
  TensorDesc rank_mismatch{{4, 4}, {4}, DType::Float32, "cpu"};
  EXPECT_FALSE(rank_mismatch.is_contiguous());
}

TEST(Graph, IndexesProducersAndConsumers) {
  GraphBuilder b(DType::Float32);
  auto x = b.input("x", {4, 8});
  auto w = b.parameter("w", {16, 8});
  auto y = b.op("aten.linear.default", {T(x), T(w)}, {4, 16});
  auto sq = b.op("aten.mul.Tensor", {T(y), T(y)}, {4, 16});
  auto r = b.op("aten.relu.default", {T(y)}, {4, 16});
  Graph g = b.finish({sq, r});

  ASSERT_EQ(g.nodes().size(), 3u);
  EXPECT_EQ(g.producer(x), nullptr);
  ASSERT_NE(g.producer(y), nullptr);
  EXPECT_EQ(g.producer(y)->target, "aten.linear.default");
  auto readers = g.consumers(y);
  ASSERT_EQ(readers.size(), 2u);  // mul reads y twice but is one consumer
  EXPECT_EQ(readers[0]->id, sq);
  EXPECT_EQ(readers[1]->id, r);
  EXPECT_TRUE(g.is_graph_output(r));
  EXPECT_FALSE(g.is_graph_output(y));
  EXPECT_EQ(g.node("relu")->outputs.front(), r);
  EXPECT_EQ(g.node("nope"), nullptr);
  EXPECT_THROW(g.value("nope"), std::out_of_range);
  EXPECT_EQ(g.value(w).kind, ValueKind::Parameter);
  EXPECT_EQ(g.value(w).target, "w");
}

TEST(Graph, ConsumersSeeTensorListsAndKwargs) {
  GraphBuilder b(DType::Float32);
  auto a = b.input("a", {2, 3});
  auto c = b.input("c", {2, 3});
  auto cat = b.op("aten.cat.default", {TL({a, std::nullopt, c}), C(0)}, {4, 3});
  OpOptions with_kwarg;
  with_kwarg.kwargs["other"] = T(a);
  auto k = b.op("custom.op", {T(cat)}, {4, 3}, with_kwarg);
  Graph g = b.finish({k});
  ASSERT_EQ(g.consumers(a).size(), 2u);
  EXPECT_EQ(g.consumers(a)[0]->id, cat);
  EXPECT_EQ(g.consumers(a)[1]->id, k);
  ASSERT_EQ(g.consumers(c).size(), 1u);
}

TEST(Graph, ReindexAfterRewritingNodes) {
  GraphBuilder b(DType::Float32);
  auto x = b.input("x", {4});
  auto n1 = b.op("aten.neg.default", {T(x)}, {4});
  auto n2 = b.op("aten.relu.default", {T(n1)}, {4});
  Graph g = b.finish({n2});
  auto& nodes = g.mutable_nodes();
  nodes[1].args[0] = T(x);  // relu now reads x directly
  nodes.erase(nodes.begin());
  g.reindex();
  EXPECT_EQ(g.producer(n1), nullptr);
  EXPECT_TRUE(g.consumers(n1).empty());
  ASSERT_EQ(g.consumers(x).size(), 1u);
  EXPECT_EQ(g.consumers(x)[0]->id, n2);
  EXPECT_EQ(g.producer(n2)->id, n2);
}

TEST(GraphBuilder, RecordsStridesDtypesAndRejectsUnknownValues) {
  GraphBuilder b(DType::BFloat16, "meta");
  auto x = b.input("x", {2, 3, 4});
  EXPECT_EQ(b.graph().value(x).desc.stride, (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(b.graph().value(x).desc.device, "meta");
  OpOptions transposed;
  transposed.stride = std::vector<int64_t>{12, 1, 4};
  auto t = b.op("aten.transpose.int", {T(x), C(1), C(2)}, {2, 4, 3}, transposed);
  EXPECT_FALSE(b.graph().value(t).desc.is_contiguous());
  OpOptions as_float;
  as_float.dtype = DType::Float32;
  auto f = b.op("aten.to.dtype", {T(t), C("float32")}, {2, 4, 3}, as_float);
  EXPECT_EQ(b.graph().value(f).desc.dtype, DType::Float32);
  EXPECT_THROW(b.op("aten.relu.default", {T("missing")}, {1}), std::invalid_argument);
  auto parts = b.multi_op("aten.split.Tensor", {T(x), C(2), C(2)},
                          {{{2, 3, 2}, {12, 4, 1}, DType::Unknown, ""},
                           {{2, 3, 2}, {12, 4, 1}, DType::Unknown, ""}});
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(b.graph().producer(parts[1])->id, "split");
  EXPECT_EQ(b.graph().value(parts[1]).desc.dtype, DType::BFloat16);
  auto s = b.scalar_constant("half", 0.5);
  EXPECT_EQ(b.graph().value(s).scalar.value(), 0.5);
  EXPECT_THROW(b.finish({"missing"}), std::invalid_argument);
}

}  // namespace
}  // namespace fact::graph
