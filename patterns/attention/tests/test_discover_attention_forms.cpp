// fact.attention around its core: Q/K/V read in place from a fused projection (split, unbind,
// slice) or behind repeat_kv, a scale applied to q first, the head merge written by the kernel,
// and the masks and dropouts it takes or declines with a reason.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "fact/discover/canonicalize.hpp"
#include "fact/discover/discover.hpp"
#include "tests/cpp/discover/discover_test_util.hpp"

namespace fact::discover {
namespace {

using graph::C;
using graph::DType;
using graph::GraphBuilder;
using graph::OpOptions;
using graph::T;
using graph::TL;
using graph::TensorDesc;
using graph::ValueId;
using testing::find_target;
using V = std::vector<int64_t>;

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

OpOptions named(const std::string& id, std::optional<V> stride = std::nullopt) {
  OpOptions o;
  o.id = id;
  o.stride = stride;
  return o;
}

// timm's Attention: qkv(x).reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0),
// q * scale, q @ kᵀ, softmax, dropout (eval), @ v, transpose(1, 2).reshape(B, N, C), proj.
TEST(AttentionForms, TimmUnbindScaledQueryAndHeadMerge) {
  GraphBuilder b(DType::BFloat16);
  auto x = b.input("x", {2, 16, 256});
  auto w = b.parameter("w_qkv", {768, 256});
  auto qkv = b.op("aten.linear.default", {T(x), T(w)}, {2, 16, 768}, named("qkv"));
  auto r = b.op("aten.reshape.default", {T(qkv), C(V{2, 16, 3, 4, 64})}, {2, 16, 3, 4, 64});
  auto p = b.op("aten.permute.default", {T(r), C(V{2, 0, 3, 1, 4})}, {3, 2, 4, 16, 64},
                named("permute", V{256, 12288, 64, 768, 1}));
  const TensorDesc piece{{2, 4, 16, 64}, {12288, 64, 768, 1}, DType::BFloat16, "cpu"};
  auto qkv3 = b.multi_op("aten.unbind.int", {T(p)}, {piece, piece, piece}, "unbind");
  auto q = b.op("aten.mul.Tensor", {T(qkv3[0]), C(0.125)}, {2, 4, 16, 64}, named("q_scaled", V{4096, 64, 256, 1}));
  auto kt = b.op("aten.transpose.int", {T(qkv3[1]), C(-2), C(-1)}, {2, 4, 64, 16}, named("kt", V{12288, 64, 1, 768}));
  auto s = b.op("aten.matmul.default", {T(q), T(kt)}, {2, 4, 16, 16});
  auto probs = b.op("aten.softmax.int", {T(s), C(-1)}, {2, 4, 16, 16});
  auto drop = b.op("aten.dropout.default", {T(probs), C(0.1), C(false)}, {2, 4, 16, 16});
  auto y = b.op("aten.matmul.default", {T(drop), T(qkv3[2])}, {2, 4, 16, 64});
  auto yt = b.op("aten.transpose.int", {T(y), C(1), C(2)}, {2, 16, 4, 64}, named("yt", V{4096, 64, 1024, 1}));
  auto merged = b.op("aten.reshape.default", {T(yt), C(V{2, 16, 256})}, {2, 16, 256}, named("merged"));
  auto wo = b.parameter("w_proj", {256, 256});
  auto out = b.op("aten.linear.default", {T(merged), T(wo)}, {2, 16, 256});
  auto g = canonicalize(b.finish({out}));
  const auto* node = find_target(g, "fact.attention");
  ASSERT_NE(node, nullptr);
  const auto& a = node->attrs;
  for (const char* t : {"q", "k", "v"}) EXPECT_EQ(a[t]["value"], "qkv") << t;
  EXPECT_EQ(a["q"]["offset"], 0);
  EXPECT_EQ(a["k"]["offset"], 256);
  EXPECT_EQ(a["v"]["offset"], 512);
  EXPECT_EQ(a["q"]["stride"], (V{12288, 64, 768, 1}));
  EXPECT_DOUBLE_EQ(a["scale"].get<double>(), 0.125);  // q * 0.125 folded in
  // The training form reads the product's own q, already scaled: no scale after the product.
  EXPECT_DOUBLE_EQ(a["training_form"]["kwargs"]["scale"].get<double>(), 1.0);
  EXPECT_EQ(a["training_form"]["kwargs"]["is_causal"], false);
  EXPECT_EQ(a["mask_kind"], "none");
  EXPECT_EQ(a["unsupported"], "");                    // dropout in eval mode is the identity
  EXPECT_EQ(node->outputs.front(), merged);
  EXPECT_EQ(a["out"]["stride"], (V{4096, 64, 256, 1}));
  // Everything between the two projections is one node.
  EXPECT_EQ(g.nodes().size(), 3u);
}

// transformers' eager Llama attention: separate projections, repeat_kv by expand + reshape,
// an additive causal mask built with full(min).triu(1), softmax in float32.
TEST(AttentionForms, RepeatKvExpandReshapeAndAdditiveCausalMask) {
  GraphBuilder b(DType::BFloat16);
  auto x = b.input("x", {1, 32, 512});
  auto q = b.op("aten.view.default", {T(b.input("q_proj", {1, 32, 512})), C(V{1, 32, 8, 64})}, {1, 32, 8, 64});
  auto qt = b.op("aten.transpose.int", {T(q), C(1), C(2)}, {1, 8, 32, 64}, named("qt", V{16384, 64, 512, 1}));
  auto kv_in = b.input("k_proj", {1, 32, 128});
  auto kview = b.op("aten.view.default", {T(kv_in), C(V{1, 32, 2, 64})}, {1, 32, 2, 64});
  auto kh = b.op("aten.transpose.int", {T(kview), C(1), C(2)}, {1, 2, 32, 64}, named("kh", V{4096, 64, 128, 1}));
  auto ku = b.op("aten.unsqueeze.default", {T(kh), C(2)}, {1, 2, 1, 32, 64}, named("ku", V{4096, 64, 4096, 128, 1}));
  auto ke = b.op("aten.expand.default", {T(ku), C(V{1, 2, 4, 32, 64})}, {1, 2, 4, 32, 64},
                 named("ke", V{4096, 64, 0, 128, 1}));
  auto k = b.op("aten.reshape.default", {T(ke), C(V{1, 8, 32, 64})}, {1, 8, 32, 64}, named("k_rep"));
  auto vv = b.input("v_proj", {1, 32, 128});
  auto vview = b.op("aten.view.default", {T(vv), C(V{1, 32, 2, 64})}, {1, 32, 2, 64});
  auto vh = b.op("aten.transpose.int", {T(vview), C(1), C(2)}, {1, 2, 32, 64}, named("vh", V{4096, 64, 128, 1}));
  auto vu = b.op("aten.unsqueeze.default", {T(vh), C(2)}, {1, 2, 1, 32, 64}, named("vu", V{4096, 64, 4096, 128, 1}));
  auto ve = b.op("aten.expand.default", {T(vu), C(V{1, 2, 4, 32, 64})}, {1, 2, 4, 32, 64},
                 named("ve", V{4096, 64, 0, 128, 1}));
  auto v = b.op("aten.reshape.default", {T(ve), C(V{1, 8, 32, 64})}, {1, 8, 32, 64}, named("v_rep"));
  auto kt = b.op("aten.transpose.int", {T(k), C(2), C(3)}, {1, 8, 64, 32}, named("kt", V{16384, 2048, 1, 64}));
  auto s = b.op("aten.matmul.default", {T(qt), T(kt)}, {1, 8, 32, 32});
  auto scaled = b.op("aten.mul.Tensor", {T(s), C(0.125)}, {1, 8, 32, 32});
  OpOptions full = named("full");
  auto fm = b.op("aten.full.default", {C(V{32, 32}), C(-3.3895313892515355e+38)}, {32, 32}, full);
  auto triu = b.op("aten.triu.default", {T(fm), C(1)}, {32, 32});
  auto mask = b.op("aten.unsqueeze.default", {T(triu), C(0)}, {1, 32, 32});
  auto added = b.op("aten.add.Tensor", {T(scaled), T(mask)}, {1, 8, 32, 32});
  auto f32 = b.op("aten._to_copy.default", {T(added)}, {1, 8, 32, 32}, OpOptions{.dtype = DType::Float32});
  auto probs = b.op("aten.softmax.int", {T(f32), C(-1)}, {1, 8, 32, 32});
  auto back = b.op("aten._to_copy.default", {T(probs)}, {1, 8, 32, 32}, OpOptions{.dtype = DType::BFloat16});
  auto y = b.op("aten.matmul.default", {T(back), T(v)}, {1, 8, 32, 64});
  (void)x;
  auto g = canonicalize(b.finish({y}));
  const auto* node = find_target(g, "fact.attention");
  ASSERT_NE(node, nullptr);
  const auto& a = node->attrs;
  EXPECT_EQ(a["heads"], 8);
  EXPECT_EQ(a["kv_heads"], 2);
  EXPECT_EQ(a["k"]["value"], "k_proj");  // behind the expand + reshape copy: the projection itself
  EXPECT_EQ(a["v"]["value"], "v_proj");
  EXPECT_EQ(a["k"]["stride"], (V{4096, 64, 128, 1}));
  EXPECT_EQ(a["mask_kind"], "causal_top_left");
  EXPECT_EQ(a["unsupported"], "");
  EXPECT_EQ(a["softmax_dtype"], "float32");
  EXPECT_EQ(g.nodes().size(), 1u);
  // For training: PyTorch's fused attention over the products' own operands (q and kᵀ of the
  // scores product, v of the output product), the scale applied after the scores product.
  const auto& form = a["training_form"];
  EXPECT_EQ(form["op"], "aten.scaled_dot_product_attention.default");
  EXPECT_EQ(form["replaces"], y);
  EXPECT_EQ(form["args"][0], (nlohmann::json{{"node", s}, {"arg", 0}}));
  EXPECT_EQ(form["args"][1]["node"], s);
  EXPECT_EQ(form["args"][1]["transpose"], (V{-2, -1}));
  EXPECT_EQ(form["args"][2], (nlohmann::json{{"node", y}, {"arg", 1}}));
  EXPECT_EQ(form["kwargs"]["is_causal"], true);
  EXPECT_DOUBLE_EQ(form["kwargs"]["scale"].get<double>(), 0.125);
}

// The pieces of the attention core on [1, 2, 8, 64] q/k/v inputs, with `mask_node` applied to
// the scaled scores; returns the captured (not canonicalized) graph.
graph::Graph with_mask(const std::function<ValueId(GraphBuilder&, const ValueId&)>& mask_node, int64_t seq = 8,
                       int64_t kv_seq = 8, bool dropout_train = false) {
  GraphBuilder b(DType::BFloat16);
  auto q = b.input("q", {1, 2, seq, 64});
  auto k = b.input("k", {1, 2, kv_seq, 64});
  auto v = b.input("v", {1, 2, kv_seq, 64});
  auto kt = b.op("aten.transpose.int", {T(k), C(-2), C(-1)}, {1, 2, 64, kv_seq}, named("kt", V{2 * kv_seq * 64, kv_seq * 64, 1, 64}));
  auto s = b.op("aten.matmul.default", {T(q), T(kt)}, {1, 2, seq, kv_seq});
  auto scaled = b.op("aten.mul.Tensor", {T(s), C(0.125)}, {1, 2, seq, kv_seq});
  auto masked = mask_node(b, scaled);
  auto probs = b.op("aten.softmax.int", {T(masked), C(-1)}, {1, 2, seq, kv_seq});
  if (dropout_train) probs = b.op("aten.dropout.default", {T(probs), C(0.1), C(true)}, {1, 2, seq, kv_seq});
  auto y = b.op("aten.matmul.default", {T(probs), T(v)}, {1, 2, seq, 64});
  return b.finish({y});
}

// A graph and the strides of its packed projection: one token apart, one batch entry apart.
struct MhaGraph {
  graph::Graph graph;
  int64_t token, row;
};

const nlohmann::json& attrs_of(const graph::Graph& g) {
  const auto* node = find_target(g, "fact.attention");
  if (node == nullptr) throw std::runtime_error("no fact.attention");
  return node->attrs;
}

// The attention a rewritten graph holds.
nlohmann::json accepted(const graph::Graph& captured) { return attrs_of(canonicalize(captured)); }

// A decomposed attention no kernel computes: left as GEMMs by canonicalization, reported by
// discovery as declined; returns that match.
Match declined(const graph::Graph& captured) {
  EXPECT_EQ(find_target(canonicalize(captured), "fact.attention"), nullptr);
  for (const auto& m : discover(captured).matches) {
    if (m.pattern == "attention") return m;
  }
  throw std::runtime_error("no attention match");
}

TEST(AttentionForms, BooleanBufferKeptWhereTrueAsNeoXWritesIt) {
  // torch.where(bias[:, :, :T, :T], scores, finfo.min): a bool tril buffer, visible where True.
  auto g = with_mask([](GraphBuilder& b, const ValueId& scores) {
    auto bias = b.buffer("bias", {1, 1, 32, 32}, DType::Bool);
    auto s1 = b.op("aten.slice.Tensor", {T(bias), C(2), C(0), C(8)}, {1, 1, 8, 32}, named("s1", V{1024, 1024, 32, 1}));
    auto s2 = b.op("aten.slice.Tensor", {T(s1), C(3), C(0), C(8)}, {1, 1, 8, 8}, named("s2", V{1024, 1024, 32, 1}));
    auto fill = b.scalar_constant("min_value", -3.3895313892515355e+38);
    return b.op("aten.where.self", {T(s2), T(scores), T(fill)}, {1, 2, 8, 8}, OpOptions{.dtype = DType::BFloat16});
  });
  const auto a = accepted(g);
  EXPECT_EQ(a["mask_kind"], "causal_top_left");
  EXPECT_NE(a["causal_evidence"].get<std::string>().find("buffer 'bias' assumed"), std::string::npos);
  EXPECT_EQ(a["unsupported"], "");
}

TEST(AttentionForms, WhereFillingWhereTrueIsTheOtherPolarity) {
  // where(triu(ones, 1), -inf, scores): hidden where True.
  auto g = with_mask([](GraphBuilder& b, const ValueId& scores) {
    auto ones = b.op("aten.ones.default", {C(V{8, 8})}, {8, 8}, OpOptions{.dtype = DType::Bool});
    auto future = b.op("aten.triu.default", {T(ones), C(1)}, {8, 8});
    auto fill = b.scalar_constant("neg_inf", kMinusInf);
    return b.op("aten.where.self", {T(future), T(fill), T(scores)}, {1, 2, 8, 8}, OpOptions{.dtype = DType::BFloat16});
  });
  EXPECT_EQ(accepted(g)["mask_kind"], "causal_top_left");
}

TEST(AttentionForms, AntiCausalTriangleIsDeclined) {
  // masked_fill(tril(ones), -inf) hides the past: not a mask the kernel computes.
  auto g = with_mask([](GraphBuilder& b, const ValueId& scores) {
    auto ones = b.op("aten.ones.default", {C(V{8, 8})}, {8, 8}, OpOptions{.dtype = DType::Bool});
    auto past = b.op("aten.tril.default", {T(ones)}, {8, 8});
    return b.op("aten.masked_fill.Scalar", {T(scores), T(past), C(kMinusInf)}, {1, 2, 8, 8});
  });
  const Match m = declined(g);
  EXPECT_EQ(m.status, MatchStatus::Declined);
  EXPECT_NE(m.reason.find("neither causal nor empty"), std::string::npos) << m.reason;
}

TEST(AttentionForms, SlidingWindowIsCausalWithItsWidth) {
  // tril(ones) ∧ triu(ones, -2): query i sees keys i-2 .. i, a causal window of 3 (Mistral, Phi-3).
  auto g = with_mask([](GraphBuilder& b, const ValueId& scores) {
    auto ones = b.op("aten.ones.default", {C(V{8, 8})}, {8, 8}, OpOptions{.dtype = DType::Bool});
    auto lower = b.op("aten.tril.default", {T(ones)}, {8, 8});
    auto band = b.op("aten.triu.default", {T(lower), C(-2)}, {8, 8});
    auto hidden = b.op("aten.logical_not.default", {T(band)}, {8, 8});
    return b.op("aten.masked_fill.Scalar", {T(scores), T(hidden), C(kMinusInf)}, {1, 2, 8, 8});
  });
  const auto attrs = accepted(g);
  EXPECT_EQ(attrs["mask_kind"], "causal_top_left");
  EXPECT_EQ(attrs["window"], 3);
  EXPECT_NE(attrs["causal_evidence"].get<std::string>().find("sliding-window"), std::string::npos);
}

TEST(AttentionForms, ABandThatIsNotCausalIsDeclined) {
  // A band around the diagonal that also sees one future key: no causal window explains it.
  auto g = with_mask([](GraphBuilder& b, const ValueId& scores) {
    auto ones = b.op("aten.ones.default", {C(V{8, 8})}, {8, 8}, OpOptions{.dtype = DType::Bool});
    auto lower = b.op("aten.tril.default", {T(ones), C(1)}, {8, 8});
    auto band = b.op("aten.triu.default", {T(lower), C(-2)}, {8, 8});
    auto hidden = b.op("aten.logical_not.default", {T(band)}, {8, 8});
    return b.op("aten.masked_fill.Scalar", {T(scores), T(hidden), C(kMinusInf)}, {1, 2, 8, 8});
  });
  const Match m = declined(g);
  EXPECT_EQ(m.status, MatchStatus::Declined);
  EXPECT_NE(m.reason.find("neither causal nor empty"), std::string::npos) << m.reason;
}

TEST(AttentionForms, BottomRightCausalWhenQueriesAreFewerThanKeys) {
  // tril(ones(Tq, Tk), diagonal=Tk-Tq): the last query sees every key.
  auto g = with_mask(
      [](GraphBuilder& b, const ValueId& scores) {
        auto ones = b.op("aten.ones.default", {C(V{4, 8})}, {4, 8}, OpOptions{.dtype = DType::Bool});
        auto visible = b.op("aten.tril.default", {T(ones), C(4)}, {4, 8});
        auto hidden = b.op("aten.logical_not.default", {T(visible)}, {4, 8});
        return b.op("aten.masked_fill.Scalar", {T(scores), T(hidden), C(kMinusInf)}, {1, 2, 4, 8});
      },
      4, 8);
  EXPECT_EQ(accepted(g)["mask_kind"], "causal_bottom_right");
}

TEST(AttentionForms, DropoutInTrainingModeIsDeclined) {
  auto g = with_mask([](GraphBuilder&, const ValueId& scores) { return scores; }, 8, 8, /*dropout_train=*/true);
  const Match m = declined(g);
  EXPECT_NE(m.reason.find("dropout p=0.1"), std::string::npos);
  // No training form either: the random mask stays PyTorch's, as written.
  EXPECT_NE(m.problems.at(0).desc["training_form"]["declined"].get<std::string>().find("dropout"), std::string::npos);
}

TEST(AttentionForms, SdpaGroupedQueryHeadsAndHeadMerge) {
  GraphBuilder b(DType::BFloat16);
  auto q = b.input("q", {2, 8, 16, 128});
  auto k = b.input("k", {2, 2, 16, 128});
  auto v = b.input("v", {2, 2, 16, 128});
  OpOptions options;
  options.kwargs["is_causal"] = C(true);
  options.kwargs["enable_gqa"] = C(true);
  options.stride = V{16384, 128, 1024, 1};  // SDPA returns [B, T, H, D] memory order
  auto y = b.op("aten.scaled_dot_product_attention.default", {T(q), T(k), T(v)}, {2, 8, 16, 128}, options);
  auto yt = b.op("aten.transpose.int", {T(y), C(1), C(2)}, {2, 16, 8, 128}, named("yt", V{16384, 1024, 128, 1}));
  auto merged = b.op("aten.reshape.default", {T(yt), C(V{2, 16, 1024})}, {2, 16, 1024}, named("merged"));
  auto g = canonicalize(b.finish({merged}));
  // The kernel writes the merged [B, T, H·D] tensor, which is what the graph returns.
  const auto& a = attrs_of(g);
  EXPECT_EQ(a["kv_heads"], 2);
  EXPECT_EQ(a["mask_kind"], "causal_top_left");
  EXPECT_EQ(a["out"]["value"], merged);
  EXPECT_EQ(a["out"]["stride"], (V{16384, 128, 1024, 1}));
  EXPECT_EQ(g.nodes().size(), 1u);
}

// nn.MultiheadAttention (batch_first, query is key is value), as torch.export records it: the
// packed projection of x transposed to [T, B, 3E] is unflattened, moved to [3, T, B, E] and
// copied by .contiguous(), then selected, viewed [T, B·H, D], transposed and viewed [B, H, T, D].
// The kernel reads q, k and v in the projection's own memory; the copy is left out.
MhaGraph multihead_attention_graph(bool copy_read_elsewhere, int64_t B = 2) {
  constexpr int64_t T_ = 17, E = 256, H = 4, D = 64;
  GraphBuilder b(DType::BFloat16);
  auto x = b.input("x", {B, T_, E});
  auto w = b.parameter("w_in", {3 * E, E});
  auto xt = b.op("aten.transpose.int", {T(x), C(1), C(0)}, {T_, B, E}, named("xt", V{E, T_ * E, 1}));
  auto proj = b.op("aten.linear.default", {T(xt), T(w)}, {T_, B, 3 * E}, named("proj"));
  auto unflat = b.op("aten.unflatten.int", {T(proj), C(-1), C(V{3, E})}, {T_, B, 3, E}, named("unflatten"));
  auto unsq = b.op("aten.unsqueeze.default", {T(unflat), C(0)}, {1, T_, B, 3, E},
                   named("unsqueeze", V{T_ * B * 3 * E, B * 3 * E, 3 * E, E, 1}));
  auto tr = b.op("aten.transpose.int", {T(unsq), C(0), C(-2)}, {3, T_, B, 1, E},
                 named("moved", V{E, B * 3 * E, 3 * E, T_ * B * 3 * E, 1}));
  auto sq = b.op("aten.squeeze.dim", {T(tr), C(-2)}, {3, T_, B, E}, named("squeeze", V{E, B * 3 * E, 3 * E, 1}));
  auto packed = b.op("aten.contiguous.default", {T(sq)}, {3, T_, B, E}, named("packed"));
  ValueId heads[3];
  for (int i = 0; i < 3; ++i) {
    const std::string n = std::to_string(i);
    auto sel = b.op("aten.select.int", {T(packed), C(0), C(i)}, {T_, B, E}, named("select" + n));
    auto split = b.op("aten.view.default", {T(sel), C(V{T_, B * H, D})}, {T_, B * H, D}, named("split" + n));
    auto tt = b.op("aten.transpose.int", {T(split), C(0), C(1)}, {B * H, T_, D}, named("tt" + n, V{D, B * E, 1}));
    heads[i] = b.op("aten.view.default", {T(tt), C(V{B, H, T_, D})}, {B, H, T_, D}, named("heads" + n, V{H * D, D, B * E, 1}));
  }
  OpOptions options;
  options.stride = V{H * D, D, B * E, 1};
  auto y = b.op("aten.scaled_dot_product_attention.default", {T(heads[0]), T(heads[1]), T(heads[2])}, {B, H, T_, D},
                options);
  std::vector<ValueId> outputs{y};
  if (copy_read_elsewhere) outputs.push_back(b.op("aten.sum.default", {T(packed)}, {}, named("elsewhere", V{})));
  return {b.finish(outputs), B * 3 * E, 3 * E};
}

TEST(AttentionForms, MultiheadAttentionReadsItsPackedProjectionWithoutTheCopy) {
  const auto mha = multihead_attention_graph(false);
  auto g = canonicalize(mha.graph);
  const auto& a = attrs_of(g);
  for (const char* t : {"q", "k", "v"}) {
    EXPECT_EQ(a[t]["value"], "unflatten") << t;  // the projection's memory, viewed [T, B, 3, E]
    // [B, H, T, D]: a batch entry is a 3E row, a head D elements along it, a token B rows on.
    EXPECT_EQ(a[t]["stride"], (V{mha.row, 64, mha.token, 1})) << t;
  }
  EXPECT_EQ(a["q"]["offset"], 0);
  EXPECT_EQ(a["k"]["offset"], 256);
  EXPECT_EQ(a["v"]["offset"], 512);
  EXPECT_EQ(find_target(g, "aten.contiguous.default"), nullptr);  // the copy is gone
}

// At batch 1 the batch dim is never stepped; it still gets the projection's row stride, as at
// every other batch size (a problem planned over a range of batch sizes needs the same stride
// formula at each).
TEST(AttentionForms, MultiheadAttentionAtBatchOneKeepsTheRowStride) {
  const auto mha = multihead_attention_graph(false, 1);
  const auto g = canonicalize(mha.graph);
  const auto& a = attrs_of(g);
  for (const char* t : {"q", "k", "v"}) EXPECT_EQ(a[t]["stride"], (V{mha.row, 64, mha.token, 1})) << t;
  EXPECT_EQ(a["v"]["offset"], 512);
}

TEST(AttentionForms, APackedCopyReadElsewhereStaysAndIsRead) {
  auto g = canonicalize(multihead_attention_graph(true).graph);
  const auto& a = attrs_of(g);
  for (const char* t : {"q", "k", "v"}) EXPECT_EQ(a[t]["value"], "packed") << t;
  EXPECT_NE(find_target(g, "aten.contiguous.default"), nullptr);
}

// The attrs of SDPA over [batch, 2, seq, 64] q/k/v inputs with the bool `attn_mask` that
// `mask_of` adds to the graph.
nlohmann::json sdpa_with_bool_mask(int64_t batch, int64_t seq,
                                   const std::function<ValueId(GraphBuilder&)>& mask_of) {
  GraphBuilder b(DType::BFloat16);
  auto q = b.input("q", {batch, 2, seq, 64});
  auto k = b.input("k", {batch, 2, seq, 64});
  auto v = b.input("v", {batch, 2, seq, 64});
  OpOptions options;
  options.kwargs["attn_mask"] = T(mask_of(b));
  auto y = b.op("aten.scaled_dot_product_attention.default", {T(q), T(k), T(v)}, {batch, 2, seq, 64}, options);
  return attrs_of(canonicalize(b.finish({y})));
}

// transformers' create_causal_mask while exported (no is_causal shortcut): kv_idx <= q_idx over
// broadcast aranges, expanded over the batch, handed to SDPA as a bool mask (logical_not'ed
// once more by a caller that fills where True). At 17 x 1025 x 1025 the expanded mask has more
// elements than the evaluator materializes; the batch it only broadcasts is evaluated once.
TEST(AttentionForms, ExpandedBatchOfAnArangeCausalMaskIsReadOnce) {
  constexpr int64_t kBatch = 17, kSeq = 1025;
  const auto a = sdpa_with_bool_mask(kBatch, kSeq, [&](GraphBuilder& b) {
    OpOptions int64;
    int64.dtype = DType::Int64;
    const OpOptions boolean{.dtype = DType::Bool};
    auto positions = b.op("aten.arange.default", {C(kSeq)}, {kSeq}, int64);
    auto rows = b.op("aten.unsqueeze.default", {T(positions), C(1)}, {kSeq, 1}, named("rows", V{1, 1}));
    auto q_idx = b.op("aten.view.default", {T(rows), C(V{1, 1, kSeq, 1})}, {1, 1, kSeq, 1}, named("q_idx", V{kSeq, kSeq, 1, 1}));
    auto kv_idx = b.op("aten.view.default", {T(positions), C(V{1, 1, 1, kSeq})}, {1, 1, 1, kSeq}, named("kv_idx", V{kSeq, kSeq, kSeq, 1}));
    auto causal = b.op("aten.le.Tensor", {T(kv_idx), T(q_idx)}, {1, 1, kSeq, kSeq}, boolean);
    auto expanded = b.op("aten.expand.default", {T(causal), C(V{kBatch, -1, kSeq, kSeq})}, {kBatch, 1, kSeq, kSeq},
                         named("expanded", V{0, kSeq * kSeq, kSeq, 1}));
    auto hidden = b.op("aten.logical_not.default", {T(expanded)}, {kBatch, 1, kSeq, kSeq}, boolean);
    return b.op("aten.logical_not.default", {T(hidden)}, {kBatch, 1, kSeq, kSeq}, boolean);
  });
  EXPECT_EQ(a["mask_kind"], "causal_top_left");
  EXPECT_EQ(a["unsupported"], "");
}

// transformers' create_causal_mask given position ids while exported: the packed-sequence ids
// (cumsum of diff(position_ids) != 1) indexed by a batch arange and compared per batch entry,
// and-ed with kv_idx <= q_idx: a [B, 1, S, S] mask computed per batch entry from ids every entry
// shares. At 17 x 1025 it reads as causal, its batch seen as broadcast.
TEST(AttentionForms, PackedSequenceIdsOfSharedPositionsReadAsCausal) {
  constexpr int64_t kBatch = 17, kSeq = 1025;
  const auto a = sdpa_with_bool_mask(kBatch, kSeq, [&](GraphBuilder& b) {
    OpOptions int64;
    int64.dtype = DType::Int64;
    const OpOptions boolean{.dtype = DType::Bool};
    auto arange = [&](int64_t n) { return b.op("aten.arange.start_step", {C(0), C(n)}, {n}, int64); };
    auto positions = b.op("aten.unsqueeze.default", {T(arange(kSeq)), C(0)}, {1, kSeq}, int64);
    auto position_ids = b.op("aten.expand.default", {T(positions), C(V{kBatch, -1})}, {kBatch, kSeq},
                             OpOptions{.stride = V{0, 1}, .dtype = DType::Int64});
    auto first = b.op("aten.slice.Tensor", {T(position_ids), C(1), C(0), C(1)}, {kBatch, 1},
                      OpOptions{.stride = V{0, 1}, .dtype = DType::Int64});
    auto dummy = b.op("aten.sub.Tensor", {T(first), C(1)}, {kBatch, 1}, int64);
    auto diff = b.op("aten.diff.default", {T(position_ids), C(1), C(-1), T(dummy)}, {kBatch, kSeq}, int64);
    auto starts = b.op("aten.ne.Scalar", {T(diff), C(1)}, {kBatch, kSeq}, boolean);
    auto ids = b.op("aten.cumsum.default", {T(starts), C(-1)}, {kBatch, kSeq}, int64);
    auto batch_idx = b.op("aten.view.default", {T(arange(kBatch)), C(V{kBatch, 1, 1, 1})}, {kBatch, 1, 1, 1}, int64);
    auto q_idx = b.op("aten.view.default", {T(arange(kSeq)), C(V{1, 1, kSeq, 1})}, {1, 1, kSeq, 1}, int64);
    auto kv_idx = b.op("aten.view.default", {T(arange(kSeq)), C(V{1, 1, 1, kSeq})}, {1, 1, 1, kSeq}, int64);
    auto everything = b.op("aten.full.default", {C(V{}), C(true)}, {}, boolean);
    auto causal = b.op("aten.le.Tensor", {T(kv_idx), T(q_idx)}, {1, 1, kSeq, kSeq}, boolean);
    auto causal_all = b.op("aten.bitwise_and.Tensor", {T(everything), T(causal)}, {1, 1, kSeq, kSeq}, boolean);
    auto q_ids = b.op("aten.index.Tensor", {T(ids), TL({batch_idx, q_idx})}, {kBatch, 1, kSeq, 1}, int64);
    auto kv_ids = b.op("aten.index.Tensor", {T(ids), TL({batch_idx, kv_idx})}, {kBatch, 1, 1, kSeq}, int64);
    auto same = b.op("aten.eq.Tensor", {T(q_ids), T(kv_ids)}, {kBatch, 1, kSeq, kSeq}, boolean);
    auto mask = b.op("aten.bitwise_and.Tensor", {T(causal_all), T(same)}, {kBatch, 1, kSeq, kSeq}, boolean);
    return b.op("aten.expand.default", {T(mask), C(V{kBatch, -1, kSeq, kSeq})}, {kBatch, 1, kSeq, kSeq}, boolean);
  });
  EXPECT_EQ(a["mask_kind"], "causal_top_left") << a.dump();
  EXPECT_EQ(a["unsupported"], "");
}

// lucidrains-style: einsum("bhqd,bhkd->bhqk") * scale, masked_fill_(triu(ones, 1)), softmax,
// einsum("bhqk,bhkd->bhqd").
TEST(AttentionForms, EinsumProducts) {
  GraphBuilder b(DType::BFloat16);
  auto q = b.input("q", {2, 4, 16, 64});
  auto k = b.input("k", {2, 4, 16, 64});
  auto v = b.input("v", {2, 4, 16, 64});
  auto s = b.op("aten.einsum.default", {C("bhqd,bhkd->bhqk"), graph::TL({q, k})}, {2, 4, 16, 16});
  auto scaled = b.op("aten.mul.Tensor", {T(s), C(0.125)}, {2, 4, 16, 16});
  auto ones = b.op("aten.ones.default", {C(V{16, 16})}, {16, 16}, OpOptions{.dtype = DType::Bool});
  auto future = b.op("aten.triu_.default", {T(ones), C(1)}, {16, 16});
  auto masked = b.op("aten.masked_fill_.Scalar", {T(scaled), T(future), C(-3.3895313892515355e+38)}, {2, 4, 16, 16});
  auto probs = b.op("aten.softmax.int", {T(masked), C(-1)}, {2, 4, 16, 16});
  auto y = b.op("aten.einsum.default", {C("bhqk,bhkd->bhqd"), graph::TL({probs, v})}, {2, 4, 16, 64});
  auto g = canonicalize(b.finish({y}));
  const auto& a = attrs_of(g);
  EXPECT_EQ(a["q"]["value"], "q");
  EXPECT_EQ(a["k"]["value"], "k");
  EXPECT_EQ(a["k"]["stride"], (V{4096, 1024, 64, 1}));
  EXPECT_DOUBLE_EQ(a["scale"].get<double>(), 0.125);
  EXPECT_EQ(a["mask_kind"], "causal_top_left");
  EXPECT_EQ(g.nodes().size(), 1u);
}

TEST(AttentionForms, EinsumWithAnotherEquationIsNotAttention) {
  GraphBuilder b(DType::BFloat16);
  auto q = b.input("q", {2, 4, 16, 64});
  auto k = b.input("k", {2, 4, 16, 64});
  auto v = b.input("v", {2, 4, 16, 64});
  // q·kᵀ over the wrong dims ("bhqd,bhkd->bhqd" is not a product of these shapes' kind).
  auto s = b.op("aten.einsum.default", {C("bhdq,bhdk->bhqk"), graph::TL({q, k})}, {2, 4, 64, 64});
  auto probs = b.op("aten.softmax.int", {T(s), C(-1)}, {2, 4, 64, 64});
  auto y = b.op("aten.einsum.default", {C("bhqk,bhkd->bhqd"), graph::TL({probs, v})}, {2, 4, 64, 64});
  auto g = canonicalize(b.finish({y}));
  EXPECT_EQ(find_target(g, "fact.attention"), nullptr);
}

TEST(AttentionForms, AScaleOnVIsNotTheSoftmaxScale) {
  GraphBuilder b(DType::BFloat16);
  auto q = b.input("q", {1, 2, 8, 64});
  auto k = b.input("k", {1, 2, 8, 64});
  auto v = b.input("v", {1, 2, 8, 64});
  auto kt = b.op("aten.transpose.int", {T(k), C(-2), C(-1)}, {1, 2, 64, 8}, named("kt", V{1024, 512, 1, 64}));
  auto s = b.op("aten.matmul.default", {T(q), T(kt)}, {1, 2, 8, 8});
  auto scaled = b.op("aten.mul.Tensor", {T(s), C(0.125)}, {1, 2, 8, 8});
  auto probs = b.op("aten.softmax.int", {T(scaled), C(-1)}, {1, 2, 8, 8});
  auto v2 = b.op("aten.mul.Tensor", {T(v), C(2.0)}, {1, 2, 8, 64}, named("v2"));
  auto y = b.op("aten.matmul.default", {T(probs), T(v2)}, {1, 2, 8, 64});
  auto g = canonicalize(b.finish({y}));
  const auto& a = attrs_of(g);
  EXPECT_DOUBLE_EQ(a["scale"].get<double>(), 0.125);
  EXPECT_EQ(a["v"]["value"], "v2");  // the scaled v is read; its scale stays PyTorch's
}

TEST(AttentionForms, SdpaDropoutIsDeclined) {
  GraphBuilder b(DType::BFloat16);
  auto q = b.input("q", {2, 4, 16, 64});
  auto y = b.op("aten.scaled_dot_product_attention.default", {T(q), T(q), T(q), C(nullptr), C(0.1)},
                {2, 4, 16, 64});
  auto g = canonicalize(b.finish({y}));
  EXPECT_NE(attrs_of(g)["unsupported"].get<std::string>().find("dropout_p=0.1"), std::string::npos);
}

}  // namespace
}  // namespace fact::discover
