// fact.attention: q·kᵀ → scale → mask → softmax → ·v in its captured forms, and SDPA.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "fact/discover/canonicalize.hpp"
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
using graph::ValueId;
using testing::count_target;
using testing::find_target;
using V = std::vector<int64_t>;

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

enum class Mask { CausalBufferFill, AdditiveInput, TrilInGraph, None, FillNotInfinite };

// softmax(q·kᵀ / sqrt(d) masked) · v on [2, 4, 16, 64] q/k/v (a head dim the kernel has: a
// decomposed attention no kernel computes is left to its GEMMs), as torch.export records it.
graph::Graph attention_graph_impl(Mask mask, bool divide, DType dtype, bool canonical) {
  GraphBuilder b(dtype);
  auto q = b.input("q", {2, 4, 16, 64});
  auto k = b.input("k", {2, 4, 16, 64});
  auto v = b.input("v", {2, 4, 16, 64});
  auto kt = b.op("aten.transpose.int", {T(k), C(-2), C(-1)}, {2, 4, 64, 16},
                 OpOptions{.stride = V{4096, 1024, 1, 64}});
  auto scores = b.op("aten.matmul.default", {T(q), T(kt)}, {2, 4, 16, 16});
  auto scaled = divide ? b.op("aten.div.Tensor", {T(scores), C(std::sqrt(64.0))}, {2, 4, 16, 16})
                       : b.op("aten.mul.Tensor", {T(scores), C(1.0 / std::sqrt(64.0))}, {2, 4, 16, 16});
  ValueId masked = scaled;
  if (mask == Mask::CausalBufferFill || mask == Mask::FillNotInfinite) {
    auto buffer = b.buffer("b_bias", {1, 1, 16, 16});
    auto alias = b.op("aten.alias.default", {T(buffer)}, {1, 1, 16, 16});
    auto eq = b.op("aten.eq.Scalar", {T(alias), C(0)}, {1, 1, 16, 16}, OpOptions{.dtype = DType::Bool});
    const double fill = mask == Mask::CausalBufferFill ? kMinusInf : -1.0;
    masked = b.op("aten.masked_fill.Scalar", {T(scaled), T(eq), C(fill)}, {2, 4, 16, 16});
  } else if (mask == Mask::AdditiveInput) {
    auto m = b.input("attention_mask", {2, 1, 16, 16});
    masked = b.op("aten.add.Tensor", {T(scaled), T(m)}, {2, 4, 16, 16});
  } else if (mask == Mask::TrilInGraph) {
    auto ones = b.op("aten.ones.default", {C(V{16, 16})}, {16, 16});
    auto tril = b.op("aten.tril.default", {T(ones)}, {16, 16});
    auto eq = b.op("aten.eq.Scalar", {T(tril), C(0)}, {16, 16}, OpOptions{.dtype = DType::Bool});
    masked = b.op("aten.masked_fill.Scalar", {T(scaled), T(eq), C(kMinusInf)}, {2, 4, 16, 16});
  }
  auto probs = b.op("aten.softmax.int", {T(masked), C(-1)}, {2, 4, 16, 16});
  auto out = b.op("aten.matmul.default", {T(probs), T(v)}, {2, 4, 16, 64});
  return canonical ? canonicalize(b.finish({out})) : b.finish({out});
}

graph::Graph attention_graph(Mask mask, bool divide = false, DType dtype = DType::BFloat16) {
  return attention_graph_impl(mask, divide, dtype, true);
}

// The same graph, not canonicalized (for discovery).
graph::Graph attention_graph_raw(Mask mask, bool divide = false) {
  return attention_graph_impl(mask, divide, DType::BFloat16, false);
}

TEST(CanonicalizeAttention, CausalMaskBufferAsMinGptWritesIt) {
  auto g = attention_graph(Mask::CausalBufferFill);
  ASSERT_EQ(g.nodes().size(), 1u) << g.nodes().front().target;
  const auto& node = g.nodes().front();
  EXPECT_EQ(node.target, "fact.attention");
  const auto& a = node.attrs;
  EXPECT_EQ(a["batch"], 2);
  EXPECT_EQ(a["heads"], 4);
  EXPECT_EQ(a["kv_heads"], 4);
  EXPECT_EQ(a["seq"], 16);
  EXPECT_EQ(a["kv_seq"], 16);
  EXPECT_EQ(a["head_dim"], 64);
  EXPECT_EQ(a["v_head_dim"], 64);
  EXPECT_TRUE(a["causal"].get<bool>());
  EXPECT_NE(a["causal_evidence"].get<std::string>().find("b_bias"), std::string::npos);
  EXPECT_NEAR(a["scale"].get<double>(), 1.0 / std::sqrt(64.0), 1e-12);
  EXPECT_EQ(a["mask"]["kind"], "fill");
  EXPECT_EQ(a["mask"]["value"], "b_bias");
  EXPECT_EQ(a["k"]["value"], "k");  // the transpose is absorbed: k is read as [B, H, S, D]
  EXPECT_EQ(a["k"]["shape"], (V{2, 4, 16, 64}));
  EXPECT_EQ(a["k"]["stride"], (V{4096, 1024, 64, 1}));
  EXPECT_EQ(node.args.size(), 4u);
  EXPECT_EQ(node.origin.size(), 8u);  // transpose, matmul, mul, alias, eq, masked_fill, softmax, matmul
}

TEST(CanonicalizeAttention, DivisionByTheScaleAndAdditiveInputMask) {
  // A mask the model is given cannot be known to be causal: the attention stays as its two
  // GEMMs, and discovery reports why it was declined (with what it read: scale, mask).
  auto g = attention_graph(Mask::AdditiveInput, /*divide=*/true);
  EXPECT_EQ(count_target(g, "fact.attention"), 0u);
  EXPECT_EQ(count_target(g, "fact.gemm"), 2u);
  const auto d = discover(attention_graph_raw(Mask::AdditiveInput, /*divide=*/true));
  const Match* attention = nullptr;
  for (const auto& m : d.matches) {
    if (m.pattern == "attention") attention = &m;
  }
  ASSERT_NE(attention, nullptr);
  EXPECT_EQ(attention->status, MatchStatus::Declined);
  EXPECT_NE(attention->reason.find("model input 'attention_mask'"), std::string::npos) << attention->reason;
  EXPECT_NE(attention->reason.find("its products stay GEMMs"), std::string::npos);
  EXPECT_NEAR(attention->extra["scale"].get<double>(), 1.0 / std::sqrt(64.0), 1e-12);
  EXPECT_EQ(attention->extra["mask"]["kind"], "additive");
  EXPECT_EQ(attention->extra["mask"]["value"], "attention_mask");
  EXPECT_EQ(attention->nodes.size(), 6u);  // transpose, matmul, div, add, softmax, matmul
}

TEST(CanonicalizeAttention, TriangleBuiltInTheGraphIsCausal) {
  auto g = attention_graph(Mask::TrilInGraph);
  const auto* node = find_target(g, "fact.attention");
  ASSERT_NE(node, nullptr);
  EXPECT_TRUE(node->attrs["causal"].get<bool>());
  EXPECT_EQ(node->attrs["mask_kind"], "causal_top_left");
  EXPECT_EQ(node->attrs["unsupported"], "");
  EXPECT_EQ(g.nodes().size(), 1u);  // ones, tril, eq went with it
}

TEST(CanonicalizeAttention, NoMask) {
  auto g = attention_graph(Mask::None);
  const auto* node = find_target(g, "fact.attention");
  ASSERT_NE(node, nullptr);
  EXPECT_FALSE(node->attrs["causal"].get<bool>());
  EXPECT_TRUE(node->attrs["mask"].is_null());
}

TEST(CanonicalizeAttention, FillThatIsNotMinusInfinityIsNotAttention) {
  auto g = attention_graph(Mask::FillNotInfinite);
  EXPECT_EQ(count_target(g, "fact.attention"), 0u);
  EXPECT_EQ(count_target(g, "fact.gemm"), 2u);
}

TEST(CanonicalizeAttention, GroupedQueryHeadsBehindRepeatInterleave) {
  GraphBuilder b(DType::BFloat16);
  auto q = b.input("q", {1, 8, 16, 64});
  auto k = b.input("k", {1, 2, 16, 64});
  auto v = b.input("v", {1, 2, 16, 64});
  auto kr = b.op("aten.repeat_interleave.self_int", {T(k), C(4), C(1)}, {1, 8, 16, 64});
  auto vr = b.op("aten.repeat_interleave.self_int", {T(v), C(4), C(1)}, {1, 8, 16, 64});
  auto kt = b.op("aten.transpose.int", {T(kr), C(-2), C(-1)}, {1, 8, 64, 16},
                 OpOptions{.stride = V{8192, 1024, 1, 64}});
  auto scores = b.op("aten.matmul.default", {T(q), T(kt)}, {1, 8, 16, 16});
  auto scaled = b.op("aten.mul.Tensor", {T(scores), C(0.125)}, {1, 8, 16, 16});
  auto as_float = b.op("aten.to.dtype", {T(scaled), C("float32")}, {1, 8, 16, 16},
                       OpOptions{.dtype = DType::Float32});
  auto probs = b.op("aten.softmax.int", {T(as_float), C(-1)}, {1, 8, 16, 16});
  auto back = b.op("aten.to.dtype", {T(probs), C("bfloat16")}, {1, 8, 16, 16},
                   OpOptions{.dtype = DType::BFloat16});
  auto out = b.op("aten.matmul.default", {T(back), T(vr)}, {1, 8, 16, 64});
  auto g = canonicalize(b.finish({out}));
  ASSERT_EQ(g.nodes().size(), 1u);
  const auto& a = g.nodes().front().attrs;
  EXPECT_EQ(a["heads"], 8);
  EXPECT_EQ(a["kv_heads"], 2);
  EXPECT_EQ(a["k"]["value"], "k");
  EXPECT_EQ(a["v"]["value"], "v");
  EXPECT_EQ(a["softmax_dtype"], "float32");
  EXPECT_EQ(a["dtype"], "bfloat16");
}

TEST(CanonicalizeAttention, ScaledDotProductAttention) {
  GraphBuilder b(DType::Float16);
  auto q = b.input("q", {2, 4, 16, 64});
  auto k = b.input("k", {2, 4, 16, 64});
  auto v = b.input("v", {2, 4, 16, 64});
  OpOptions causal;
  causal.kwargs["is_causal"] = C(true);
  auto out = b.op("aten.scaled_dot_product_attention.default", {T(q), T(k), T(v)}, {2, 4, 16, 64},
                  causal);
  auto g = canonicalize(b.finish({out}));
  ASSERT_EQ(g.nodes().size(), 1u);
  const auto& node = g.nodes().front();
  EXPECT_EQ(node.target, "fact.attention");
  EXPECT_TRUE(node.attrs["causal"].get<bool>());
  EXPECT_DOUBLE_EQ(node.attrs["scale"].get<double>(), 0.125);
  EXPECT_EQ(node.origin, std::vector<std::string>{"scaled_dot_product_attention"});
}

}  // namespace
}  // namespace fact::discover
